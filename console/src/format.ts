// Pure formatting, naming, sorting and role rules: no DOM, no network, so
// vitest checks them exactly.
import type { EdgeStatus } from "../../sdk/typescript/src/gen/rivora/v1/admin_pb.js";

/** Role names as WhoAmI's enum numbers them (rivora.v1.Role). */
export type RoleName = "admin" | "operator" | "viewer" | "publisher" | "customer" | "unknown";

export function roleName(role: number): RoleName {
  return (["unknown", "admin", "operator", "viewer", "publisher", "customer"] as const)[role] ?? "unknown";
}

/**
 * What a role may do in the console; the server enforces the same.
 * "operate" is the operators' console (every destination, every
 * customer); "self-serve" is the customer portal (its own customers only).
 */
export type Capability = "read" | "steer" | "admin" | "operate" | "self-serve";

export function can(role: RoleName, what: Capability): boolean {
  switch (what) {
    case "read":
      return role !== "unknown";
    case "steer":
      return role === "admin" || role === "operator";
    case "admin":
      return role === "admin";
    case "operate":
      return role === "admin" || role === "operator" || role === "viewer";
    case "self-serve":
      return role === "customer";
  }
}

export type DisplayState = "healthy" | "degraded" | "parked" | "paused" | "disabled" | "unusable";

/**
 * The state an operator sees: a pause outranks the owner's unusable
 * config (why it cannot build it), which outranks the budget's state.
 */
export function displayState(h: { state: string; paused: boolean; disabled: boolean; unusable?: string }): DisplayState {
  if (h.disabled) return "disabled";
  if (h.paused) return "paused";
  if (h.unusable) return "unusable";
  if (h.state === "degraded" || h.state === "parked") return h.state;
  return "healthy";
}

/** A rate in events per second: "0", "0.25/s", "12/s", "1.2k/s". */
export function formatRate(r: number): string {
  if (!Number.isFinite(r) || r <= 0) return "0";
  if (r >= 1000) return `${trim(r / 1000, 1)}k/s`;
  if (r >= 10) return `${Math.round(r)}/s`;
  return `${trim(r, 2)}/s`;
}

/** A share 0..1 as a percentage: "0%", "0.5%", "12%". */
export function formatShare(s: number): string {
  if (!Number.isFinite(s) || s <= 0) return "0%";
  const p = s * 100;
  return p < 10 ? `${trim(p, 1)}%` : `${Math.round(p)}%`;
}

/** A duration in seconds: "0s", "45s", "3m 20s", "2h 5m", "3d 4h"; undefined: "never". */
export function formatDuration(seconds: number | undefined): string {
  if (seconds === undefined) return "never";
  if (!Number.isFinite(seconds)) return "never";
  // Under a second, milliseconds (a try's "41ms", not "0s"; as rivoractl).
  if (seconds > 0 && seconds < 0.9995) return seconds < 0.001 ? "<1ms" : `${Math.round(seconds * 1000)}ms`;
  let s = Math.max(0, Math.round(seconds));
  if (s < 60) return `${s}s`;
  const d = Math.floor(s / 86400);
  s -= d * 86400;
  const h = Math.floor(s / 3600);
  s -= h * 3600;
  const m = Math.floor(s / 60);
  s -= m * 60;
  if (d > 0) return h > 0 ? `${d}d ${h}h` : `${d}d`;
  if (h > 0) return m > 0 ? `${h}h ${m}m` : `${h}h`;
  return s > 0 ? `${m}m ${s}s` : `${m}m`;
}

/** Parses "30s", "15m", "2h", "1h30m", "1d" into seconds; undefined if malformed. */
export function parseDuration(text: string): number | undefined {
  const t = text.trim();
  if (t === "") return undefined;
  const re = /(\d+(?:\.\d+)?)(d|h|m|s)/gy;
  let total = 0;
  let end = 0;
  for (let m = re.exec(t); m !== null; m = re.exec(t)) {
    total += Number(m[1]) * { d: 86400, h: 3600, m: 60, s: 1 }[m[2] as "d" | "h" | "m" | "s"];
    end = re.lastIndex;
  }
  return end === t.length && end > 0 ? total : undefined;
}

export function formatCount(n: number | bigint): string {
  return Number(n).toLocaleString("en-US");
}

/** A byte count in IEC units, as rivoractl prints it: "0 B", "512 B", "1.5 MiB". */
export function formatBytes(n: number): string {
  if (!Number.isFinite(n) || n < 1024) return `${Math.max(0, Math.floor(Number.isFinite(n) ? n : 0))} B`;
  const units = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
  let v = n / 1024;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return `${v.toFixed(1)} ${units[i]}`;
}

function trim(n: number, digits: number): string {
  return String(Number(n.toFixed(digits)));
}

/** The row the Destinations table shows, flattened from the API's answer. */
export interface DestinationRow {
  id: string;
  state: DisplayState;
  configuredRate: number;
  currentRate: number;
  pending: number;
  inFlight: number;
  throttledShare: number;
  serverErrorShare: number;
  /** Attempts no answer came to (timeouts, connection and TLS errors). */
  noAnswerShare: number;
  /** Attempts the partner refused with a 4xx other than 429 (it dead-letters them). */
  clientErrorShare: number;
  oldestPendingAge: number | undefined;
  drainTime: number | undefined;
}

/**
 * How noisy a destination is: its 429, 5xx, other 4xx and unanswered
 * share over the last minute. A partner refusing every event with 400
 * (each one dead-lettered) read healthy and quiet without its 4xx.
 */
export function noise(r: Pick<DestinationRow, "throttledShare" | "serverErrorShare" | "noAnswerShare" | "clientErrorShare">): number {
  return r.throttledShare + r.serverErrorShare + r.noAnswerShare + r.clientErrorShare;
}

const stateRank: Record<DisplayState, number> = { parked: 0, unusable: 1, degraded: 2, disabled: 3, paused: 4, healthy: 5 };

export type SortKey = keyof DestinationRow | "noise";

/**
 * Sorts rows by key; "noise" (the default) puts the noisiest first, then
 * the worst state, then the biggest backlog. Ties break on id, so the order
 * is stable between polls. "never" durations sort as the longest.
 */
export function sortRows(rows: DestinationRow[], key: SortKey, descending: boolean): DestinationRow[] {
  const val = (r: DestinationRow): number | string => {
    switch (key) {
      case "noise":
        return noise(r);
      case "id":
        return r.id;
      case "state":
        return -stateRank[r.state];
      case "oldestPendingAge":
      case "drainTime":
        return r[key] ?? Number.POSITIVE_INFINITY;
      default:
        return r[key];
    }
  };
  const dir = descending ? -1 : 1;
  return [...rows].sort((a, b) => {
    let c = cmp(val(a), val(b)) * dir;
    if (c === 0 && key === "noise") c = stateRank[a.state] - stateRank[b.state] || b.pending - a.pending;
    return c || cmp(a.id, b.id);
  });
}

function cmp(a: number | string, b: number | string): number {
  if (a === b) return 0;
  if (typeof a === "number" && typeof b === "number") {
    if (a === Number.POSITIVE_INFINITY) return 1;
    if (b === Number.POSITIVE_INFINITY) return -1;
    return a - b;
  }
  return String(a) < String(b) ? -1 : 1;
}

/** The noisiest destination, if any is noisy at all (some 429, 5xx, other 4xx or no answer). */
export function noisiest(rows: DestinationRow[]): string | undefined {
  // The first of the noise order, ties broken as the table breaks them:
  // the mark is on the top row of "noisiest first".
  const first = sortRows(rows, "noise", true)[0];
  return first && noise(first) > 0 ? first.id : undefined;
}

/** What one try of an event shows (events page): its number among all the
 * event's tries, and the one of its attempts it used or why none. */
export interface TryView {
  try: number;
  used: string;
}

/** tryView reads an Attempt: `try` numbers every request sent (0 from a
 * server that does not number them: the place in the list); `charged` is
 * unset on records from before Rivora recorded it, shown with a "?". */
export function tryView(a: { try: number; number: number; charged?: boolean; notChargedReason: string }, index: number): TryView {
  const n = a.try || index + 1;
  let used: string;
  if (a.charged === undefined) used = `attempt ${a.number}?`;
  else if (a.charged) used = `attempt ${a.number}`;
  else used = a.notChargedReason ? `not charged: ${a.notChargedReason}` : "not charged";
  return { try: n, used };
}

// utcInput reads a datetime-local input's value ("2026-12-06T00:50",
// seconds optional) as UTC, the zone every time the console shows is in:
// read as the browser's local time, an operator outside UTC searched (and
// replayed) another window than the one the page showed. undefined when
// empty or not a time.
export function utcInput(value: string): Date | undefined {
  if (!/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d+)?)?$/.test(value)) return undefined;
  const d = new Date(value + "Z");
  return Number.isNaN(d.getTime()) ? undefined : d;
}

// counted is n and the noun, singular for one: "1 subscription",
// "2 subscriptions" (the noun's plural adds an s).
export function counted(n: number | bigint, noun: string): string {
  return `${formatCount(n)} ${noun}${n === 1 || n === 1n ? "" : "s"}`;
}

/**
 * inFlightText says what a forced delete left to attempts in flight ("" when
 * none was): their events, which their attempts decide, and the events queued
 * behind them, which become dead letters once those attempts end (the
 * answer's in_flight and archived_later).
 */
export function inFlightText(inFlight: bigint, later: bigint): string {
  if (inFlight === 0n) return "";
  const one = inFlight === 1n;
  let s = one
    ? "; 1 event was in flight: its attempt goes on (the event becomes a dead letter too if it fails)"
    : `; ${formatCount(inFlight)} events were in flight: their attempts go on (each event becomes a dead letter too if its attempt fails)`;
  const [behind, once] = one ? ["it", "it ends"] : ["them", "they end"];
  if (later === 1n) s += `, and the 1 event queued behind ${behind} becomes a dead letter once ${once}`;
  else if (later > 1n) s += `, and the ${formatCount(later)} events queued behind ${behind} become dead letters once ${once}`;
  return s;
}

/**
 * deletedSubscriptionsText names a replay's deleted subscriptions (ids:
 * the first ones, sorted; count: how many): "subscription sub_a",
 * "3 subscriptions (sub_a, sub_b, sub_c)", "… and 2 more" past three.
 */
export function deletedSubscriptionsText(ids: string[], count: bigint): string {
  if (count === 1n && ids.length === 1) return `subscription ${ids[0]}`;
  const shown = ids.slice(0, 3);
  const more = count - BigInt(shown.length);
  return `${formatCount(count)} subscriptions (${shown.join(", ")}${more > 0n ? ` and ${formatCount(more)} more` : ""})`;
}

// A command-line hint in a server message: a backticked `rivoractl …`
// (or a bare "see rivoractl …"), with the words that lead to it.
// A bare one runs to the end of its parenthesis or clause: ids in it
// have digits and dashes ("see rivoractl lanes list --destination b-500").
// A parenthesis goes with the hint only when the hint opened it.
const hintBody = "(?:(?:see|resume it with|change it with)\\s+)?(?:`rivoractl [^`]*`|rivoractl [a-z][^);\\n]*[^);\\n\\s.])";
const cliHint = new RegExp(`\\s*\\(${hintBody}\\)|\\s*(?:[;:,]\\s*)?${hintBody}`, "g");

/**
 * withoutCliHints is a server message without its command-line hints
 * ("; see `rivoractl subscriptions list`"): the page has its own buttons.
 */
export function withoutCliHints(message: string): string {
  return message
    .replace(cliHint, "")
    .replace(forceClause, "")
    .replace(flagExample, "")
    .replace(/\(\s*\)/g, "")
    .trim();
}

// ", or delete with --force to archive them as dead letters": the page
// offers its own "Delete anyway" (or "Remove anyway") after the refusal.
const forceClause = /,?\s+or (?:delete|remove)\b[^;.]*?--force\b[^;.]*/g;

// "give a path (--path /in/c1)": the flag's example, in parentheses; the
// form's field has its own label.
const flagExample = /\s*\(--[a-z][a-z-]*\b[^)]*\)/g;

/** The customer ids typed in a field: comma- or space-separated, no empties. */
export function customerList(text: string): string[] {
  return text.split(/[\s,]+/).filter((c) => c !== "");
}

/**
 * An edge's buffer figure as the Agents page shows it: "unknown" before
 * any report, and marked "(stale)" when the control plane judged the
 * report too old to go by (a cut-off edge keeps what it held, and more),
 * as rivoractl marks it.
 */
export function bufferFigure(e: EdgeStatus, figure: string): string {
  if (!e.buffer) return "unknown";
  return e.reportStale ? `${figure} (stale)` : figure;
}
