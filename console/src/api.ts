// The console's one connection to Rivora: the generated client (shared with
// the TypeScript SDK) over Connect, with the signed-in token.
import { Code, ConnectError, createClient, type Client } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-web";
import { durationFromMs, timestampDate, type Duration, type Timestamp } from "@bufbuild/protobuf/wkt";
import { AdminService } from "../../sdk/typescript/src/gen/rivora/v1/admin_pb.js";
import { ArchiveService } from "../../sdk/typescript/src/gen/rivora/v1/deadletters_pb.js";
import { EventService } from "../../sdk/typescript/src/gen/rivora/v1/events_pb.js";
import { IngestService } from "../../sdk/typescript/src/gen/rivora/v1/ingest_pb.js";
import { LaneService } from "../../sdk/typescript/src/gen/rivora/v1/lanes_pb.js";
import { EventTypeService, SubscriptionService } from "../../sdk/typescript/src/gen/rivora/v1/subscriptions_pb.js";
import { TokenService } from "../../sdk/typescript/src/gen/rivora/v1/tokens_pb.js";
import { bearerAuth } from "./bearer.js";
import { unreachable, type Failure } from "./freshness.js";
import { roleName, withoutCliHints, type RoleName } from "./format.js";

// The token lives in sessionStorage only: it ends with the tab, and
// nothing secret is ever written to localStorage.
const tokenKey = "rivora.token";

export function token(): string | null {
  return sessionStorage.getItem(tokenKey);
}

export function setToken(t: string | null): void {
  if (t === null) sessionStorage.removeItem(tokenKey);
  else sessionStorage.setItem(tokenKey, t);
}

// signedOut, when set, is told when the server no longer takes the
// token (revoked, expired) mid-session: the page signs out and says why,
// rather than leave a page whose every call fails.
let signedOut: ((why: string) => void) | undefined;

/** onSignedOut registers what to do when the server refuses the session's token. */
export function onSignedOut(fn: (why: string) => void): void {
  signedOut = fn;
}

const bearer = bearerAuth(token, (why) => signedOut?.(why));

/** Where Rivora is: the console is served by the server it calls. */
export const origin = window.location.origin;

// Binary protobuf: a 2,000-destination health snapshot is several times
// smaller and faster to encode and decode than its JSON.
const transport = createConnectTransport({ baseUrl: origin, interceptors: [bearer], useBinaryFormat: true });

export const admin: Client<typeof AdminService> = createClient(AdminService, transport);
export const archive: Client<typeof ArchiveService> = createClient(ArchiveService, transport);
export const events: Client<typeof EventService> = createClient(EventService, transport);
export const eventTypes: Client<typeof EventTypeService> = createClient(EventTypeService, transport);
export const ingest: Client<typeof IngestService> = createClient(IngestService, transport);
export const subscriptions: Client<typeof SubscriptionService> = createClient(SubscriptionService, transport);
export const lanes: Client<typeof LaneService> = createClient(LaneService, transport);
export const tokens: Client<typeof TokenService> = createClient(TokenService, transport);

export interface Me {
  id: string;
  name: string;
  role: RoleName;
  /** The customers a customer (or publisher) token acts for; empty for the other roles. */
  customers: string[];
}

export async function whoAmI(): Promise<Me> {
  const res = await tokens.whoAmI({});
  return { id: res.token?.id ?? "", name: res.token?.name ?? "", role: roleName(res.token?.role ?? 0), customers: res.token?.customers ?? [] };
}

/** isNotFound: the id is absent (or, to a customer token, another customer's). */
export function isNotFound(err: unknown): boolean {
  return ConnectError.from(err).code === Code.NotFound;
}

/** isFailedPrecondition: refused in the current state (e.g. events still pending). */
export function isFailedPrecondition(err: unknown): boolean {
  return ConnectError.from(err).code === Code.FailedPrecondition;
}

/** An error in plain words: the server's message, with its code spelled out. */
export function errorText(err: unknown): string {
  const e = ConnectError.from(err);
  const away = unreachable(e, navigator.onLine);
  if (away !== undefined) return `cannot reach Rivora at ${origin}: ${away}`;
  const what = Code[e.code]?.replace(/([a-z])([A-Z])/g, "$1 $2").toLowerCase() ?? "error";
  // The code goes with the first line: the lines after it, if any, quote
  // what the message is about (a filter, with a caret under a column).
  const [first, ...rest] = (withoutCliHints(e.rawMessage) || "request failed").split("\n");
  return [`${first} (${what})`, ...rest].join("\n");
}

/** problemText: errorText for the server's errors, the message for the page's own checks. */
export function problemText(err: unknown): string {
  if (err instanceof Error && !(err instanceof ConnectError)) return err.message;
  return errorText(err);
}

/** isUnreachable: the call got no answer from Rivora (freshness.ts unreachable). */
export function isUnreachable(err: unknown): boolean {
  return unreachable(err, navigator.onLine) !== undefined;
}

/** failureOf: why a read failed, as a view's line says it (freshness.ts). */
export function failureOf(err: unknown): Failure {
  const away = unreachable(err, navigator.onLine);
  return away === undefined ? { unreachable: false, text: errorText(err) } : { unreachable: true, reason: away };
}

export function isUnauthenticated(err: unknown): boolean {
  return ConnectError.from(err).code === Code.Unauthenticated;
}

export function seconds(d: Duration | undefined): number | undefined {
  return d === undefined ? undefined : Number(d.seconds) + d.nanos / 1e9;
}

export function duration(seconds: number): Duration {
  return durationFromMs(Math.round(seconds * 1000));
}

export function date(ts: Timestamp | undefined): Date | undefined {
  return ts === undefined ? undefined : timestampDate(ts);
}

export function when(ts: Timestamp | undefined): string {
  const d = date(ts);
  return d === undefined ? "" : d.toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
}
