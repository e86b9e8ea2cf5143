// What a view that reads from Rivora says about what it shows. Until its
// first answer it says it loads (an empty table read as "nothing here");
// a read that fails before any answer is an error; one that fails after
// keeps the data on screen and says since when it is old and why (the
// data stood as if fresh while the control plane was stopped). Pure: no
// DOM, no network, so vitest checks it exactly; loadline.ts draws it.
import { Code, ConnectError } from "@connectrpc/connect";

/** Why a read failed: Rivora was not reached (and why), or it answered an error (in words). */
export type Failure = { unreachable: true; reason: string } | { unreachable: false; text: string };

/** What a view knows of its data: whether it was asked for, when it was last drawn, and the failure of the latest read since. */
export interface Freshness {
  /** Whether the view has a question (a page's list has; a look-up has once an id is given). */
  asked: boolean;
  /** When the data shown was read (ms since the epoch); undefined: nothing shown yet. */
  shownAt: number | undefined;
  /** The latest read's failure; undefined when it succeeded or none finished yet. */
  failure: Failure | undefined;
}

/** Nothing asked yet (a look-up with no id): nothing to say. */
export const idle: Freshness = { asked: false, shownAt: undefined, failure: undefined };

/** Nothing shown yet, nothing failed: the first read is under way. */
export const loading: Freshness = { asked: true, shownAt: undefined, failure: undefined };

/** answered: a read succeeded at now and its data is drawn. */
export function answered(now: number): Freshness {
  return { asked: true, shownAt: now, failure: undefined };
}

/** failed: the latest read failed; what was shown stays shown. */
export function failed(f: Freshness, failure: Failure): Freshness {
  return { asked: true, shownAt: f.shownAt, failure };
}

/** What the view's line says: its state and its words ("" when fresh). */
export interface Line {
  state: "idle" | "loading" | "error" | "stale" | "fresh";
  text: string;
}

/**
 * line is what a view says of its data. what names the data in words
 * that follow "Loading" ("destinations", "the audit log"); origin is where
 * Rivora is (the console's own origin); retrying says the view reads
 * again by itself (it polls).
 */
export function line(f: Freshness, what: string, origin: string, retrying = true): Line {
  if (!f.asked) return { state: "idle", text: "" };
  if (f.failure === undefined) return f.shownAt === undefined ? { state: "loading", text: `Loading ${what}…` } : { state: "fresh", text: "" };
  const why = f.failure.unreachable ? `cannot reach Rivora at ${origin}: ${f.failure.reason}` : f.failure.text;
  const again = retrying ? "; retrying" : "";
  if (f.shownAt === undefined) return { state: "error", text: `Could not load ${what}: ${why}${again}` };
  return { state: "stale", text: `${capitalized(what)} as of ${clock(f.shownAt)} — ${f.failure.unreachable ? why : `the refresh failed: ${why}`}${again}` };
}

/** clock is ms as the local wall clock's HH:MM:SS (24-hour). */
export function clock(ms: number): string {
  const d = new Date(ms);
  return [d.getHours(), d.getMinutes(), d.getSeconds()].map((n) => String(n).padStart(2, "0")).join(":");
}

function capitalized(s: string): string {
  return s.charAt(0).toUpperCase() + s.slice(1);
}

/**
 * unreachable says why a call got no answer from Rivora itself, or
 * undefined when Rivora answered (an error of its own is its answer):
 * the browser offline; the request failing before any answer (stopped,
 * restarting, refused, the network down); or a proxy in front answering
 * a bare 502, 503 or 504 for it.
 */
export function unreachable(err: unknown, online = true): string | undefined {
  const e = ConnectError.from(err);
  if (e.code === Code.Unknown && /Failed to fetch|NetworkError|Load failed|fetch failed/i.test(e.rawMessage)) {
    return online ? "no answer (it may be stopped or restarting, or the network is down)" : "this browser is offline";
  }
  const gateway = /^HTTP (502|503|504)$/.exec(e.rawMessage);
  if (e.code === Code.Unavailable && gateway) return `the address answered HTTP ${gateway[1]} ${gatewayNames[gateway[1]!]} for it`;
  return undefined;
}

const gatewayNames: Record<string, string> = { "502": "Bad Gateway", "503": "Service Unavailable", "504": "Gateway Timeout" };
