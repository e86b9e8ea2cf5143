// Reading a limit override as typed, against the bounds the control plane
// checks (controlplane/limitbounds.go, internal/rates): the page says the
// real bound of a field before asking. The API reads 0 as "not
// overridden", so a rate or a count of 0 was answered "nothing to
// override: set at least one limit" — or, beside another field, dropped
// without a word. No DOM, no network, so vitest checks them exactly.
import { formatCount, formatDuration, formatRate, parseDuration } from "./format.js";

export const bounds = {
  minRate: 0.001,
  maxRate: 1e6,
  maxBurst: 1_000_000,
  maxAttempts: 10_000,
  maxInFlight: 10_000,
  /** Seconds. */
  maxWindow: 90 * 86400,
  minTimeout: 0.1,
  maxTimeout: 300,
};

// What an override cannot say, and what does it instead.
const noZero = "an override cannot set 0: Pause holds every event, Clear limit drops the override";

/** rateOf reads a rate per second; empty is unset (undefined). It throws an Error naming the bound. */
export function rateOf(text: string): number | undefined {
  const t = text.trim();
  if (t === "") return undefined;
  const r = Number(t);
  if (!(r >= bounds.minRate && r <= bounds.maxRate)) {
    throw new Error(`Rate per second "${t}": a number of events per second from ${bounds.minRate} (one event in ${formatCount(1 / bounds.minRate)} s) to ${formatCount(bounds.maxRate)}${r === 0 ? `; ${noZero}` : ""}`);
  }
  return r;
}

/** countOf reads a whole number from 1 to most (burst, max attempts, max in flight); empty is unset. */
export function countOf(text: string, label: string, most: number): number | undefined {
  const t = text.trim();
  if (t === "") return undefined;
  const n = Number(t);
  if (!Number.isInteger(n) || n < 1 || n > most) {
    throw new Error(`${label} "${t}": a whole number from 1 to ${formatCount(most)}${n === 0 ? `; ${noZero}` : ""}`);
  }
  return n;
}

/**
 * durationOf reads a duration in seconds ("30s", "15m"); empty is unset.
 * least 0 means more than 0; most defaults to no bound.
 */
export function durationOf(text: string, label: string, least: number, most = Number.POSITIVE_INFINITY): number | undefined {
  const t = text.trim();
  if (t === "") return undefined;
  const d = parseDuration(t);
  const from = least === 0 ? "more than 0" : `from ${formatDuration(least)}`;
  const range = Number.isFinite(most) ? `${from} ${least === 0 ? "and at most" : "to"} ${formatDuration(most)}` : from;
  if (d === undefined) throw new Error(`${label} "${t}": a duration ${range}, such as 30s, 15m, 2h`);
  if ((least === 0 ? d <= 0 : d < least) || d > most) throw new Error(`${label} "${t}": a duration ${range}`);
  return d;
}

/**
 * What a limit preview says of the pending events (a dry run's answer): the
 * drain time is at the rate the destination would run at, from what its
 * partner delivers, less the events arriving (arrivals, per second), as
 * the destination's health counts it.
 */
export function drainPreview(r: { pending: number; drainSeconds: number | undefined; noDrainReason: string; arrivals?: number }): string {
  const events = `${formatCount(r.pending)} pending event${r.pending === 1 ? "" : "s"}`;
  const arrivals = r.arrivals ?? 0;
  if (r.noDrainReason) return `${events} do${r.pending === 1 ? "es" : ""} not drain now: ${r.noDrainReason}`;
  if (r.pending === 0) return "nothing is pending";
  if (r.drainSeconds === undefined && arrivals > 0) {
    return `${events} never drain${r.pending === 1 ? "s" : ""} at this rate: events arrive at ${formatRate(arrivals)}, no slower (the backlog grows)`;
  }
  if (r.drainSeconds === undefined) return `${events} do${r.pending === 1 ? "es" : ""} not drain at this rate`;
  const less = arrivals > 0 ? `, less the ${formatRate(arrivals)} arriving` : "";
  return `${events} drain${r.pending === 1 ? "s" : ""} in ${formatDuration(r.drainSeconds)}${less}`;
}
