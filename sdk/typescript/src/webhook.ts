// Standard Webhooks verification, as Rivora signs every delivery (the Go
// package sdk/webhook): base64(HMAC-SHA256(key, `${id}.${timestamp}.${body}`))
// sent as "v1,<signature>" in webhook-signature, several space-separated
// during a secret rotation; or, for a destination signing ed25519, the same
// content signed with its key, sent as "v1a,<signature>". WebCrypto only, so it runs in Node >= 20, browsers
// and edge runtimes alike.

/** Header names of the Standard Webhooks scheme. */
export const HEADER_ID = "webhook-id";
export const HEADER_TIMESTAMP = "webhook-timestamp";
export const HEADER_SIGNATURE = "webhook-signature";

/** Every secret is "whsec_" + base64 of its key bytes. */
export const SECRET_PREFIX = "whsec_";

/**
 * A destination signing ed25519 (Standard Webhooks "v1a") has a public key
 * "whpk_" + base64 of its 32 bytes: receivers verify with it, and it is not
 * a secret.
 */
export const PUBLIC_KEY_PREFIX = "whpk_";

/** An ed25519 signing key ("whsk_…") signs: Rivora holds it, receivers never need it. */
const SIGNING_KEY_PREFIX = "whsk_";

/** How far webhook-timestamp may be from now, by default (5 minutes). */
export const DEFAULT_TOLERANCE_SECONDS = 300;

/** Why a webhook was refused. */
export type WebhookVerificationReason =
  /** webhook-id, webhook-timestamp or webhook-signature is missing or empty. */
  | "missing_header"
  /** webhook-timestamp is not Unix seconds (not a number, or so far ahead it must be milliseconds or finer). */
  | "bad_timestamp"
  /** webhook-timestamp is older than the tolerance (a replay, or a clock off). */
  | "stale"
  /** webhook-timestamp is further ahead than the tolerance. */
  | "future"
  /** No v1 signature matches the body: forged, tampered, or the wrong secret. */
  | "bad_signature"
  /** webhook-signature has more than {@link MAX_SIGNATURES} entries: refused before any is checked. */
  | "too_many_signatures";

/**
 * The most entries verifyWebhook reads in a webhook-signature header, as Go's
 * `webhook.MaxSignatures`: Rivora sends a few (current and previous, per
 * scheme), and each entry costs a verification an unauthenticated sender
 * could otherwise multiply by the thousand.
 */
export const MAX_SIGNATURES = 16;

/**
 * WebhookVerificationError is thrown by {@link verifyWebhook} for a request
 * that must not be trusted: answer it 401. A bad secret is not one of these
 * (it throws a TypeError): that is the receiver's configuration to fix, and
 * answering 500 makes Rivora retry rather than hear "unauthorized".
 */
export class WebhookVerificationError extends Error {
  override readonly name = "WebhookVerificationError";
  readonly reason: WebhookVerificationReason;

  constructor(reason: WebhookVerificationReason, message: string) {
    super(message);
    this.reason = reason;
  }
}

/**
 * Headers as receivers get them: a fetch `Headers` (or anything with `get`),
 * a Node `IncomingHttpHeaders` (`req.headers` in http and Express) or a plain
 * record, looked up case-insensitively.
 */
export type WebhookHeaders =
  | { get(name: string): string | null }
  | Readonly<Record<string, string | readonly string[] | undefined>>;

/** A webhook body exactly as received: never a re-serialized parse of it. */
export type WebhookBody = string | Uint8Array | ArrayBuffer;

export interface VerifyWebhookOptions {
  /**
   * Accept timestamps within this many seconds of now (default 300); 0 or
   * below keeps the default, as Go's `WithTolerance` does (it would refuse
   * every request).
   */
  toleranceSeconds?: number;
  /** The time to check against (default: the clock); a Date or Unix ms. */
  now?: Date | number;
}

/** What a verified webhook says about itself. */
export interface VerifiedWebhook {
  /** webhook-id: the event's id, stable across retries; dedupe on it (deliveries are at least once). */
  id: string;
  /** webhook-timestamp, Unix seconds. */
  timestamp: number;
}

const utf8 = new TextEncoder();

/**
 * verifyWebhook checks a delivery's Standard Webhooks headers against its raw
 * body with the destination's secret ("whsec_…", as printed by `rivoractl
 * destinations create`), checking "v1," signatures, or with its public key
 * ("whpk_…", a destination signing ed25519), checking "v1a," signatures. One
 * matching signature is enough (rotation, or both schemes side by side).
 * It resolves with the webhook's id and timestamp, and rejects with a
 * {@link WebhookVerificationError} otherwise; the comparison is WebCrypto's
 * constant-time HMAC verify.
 */
export async function verifyWebhook(
  secret: string,
  headers: WebhookHeaders,
  body: WebhookBody,
  options: VerifyWebhookOptions = {},
): Promise<VerifiedWebhook> {
  // Whitespace around a secret or key (a newline from a file or a paste) is
  // not part of it, as Go's verifier (and this SDK's token) have it.
  if (typeof secret === "string") secret = secret.trim();
  if (typeof secret === "string" && secret.startsWith(SIGNING_KEY_PREFIX)) {
    // As Go's NewVerifier: name the key the receiver should hold instead.
    throw new TypeError(
      `rivora: a "${SIGNING_KEY_PREFIX}" key signs; a receiver verifies with its public key "${PUBLIC_KEY_PREFIX}" (the destination's public key in \`rivoractl destinations get\`)`,
    );
  }
  const asymmetric = typeof secret === "string" && secret.startsWith(PUBLIC_KEY_PREFIX);
  const key = asymmetric ? await importPublicKey(secret) : await importKey(secret, "verify");
  const version = asymmetric ? "v1a" : "v1";
  const algorithm = asymmetric ? "Ed25519" : "HMAC";
  let tolerance = options.toleranceSeconds ?? DEFAULT_TOLERANCE_SECONDS;
  if (typeof tolerance !== "number" || Number.isNaN(tolerance)) {
    // NaN would pass every timestamp: a replay check must not turn off by accident.
    throw new TypeError(`rivora: toleranceSeconds must be a number (Infinity to skip the check), got ${String(tolerance)}`);
  }
  if (tolerance <= 0) tolerance = DEFAULT_TOLERANCE_SECONDS;
  const now = options.now === undefined ? Date.now() : typeof options.now === "number" ? options.now : options.now.getTime();
  if (!Number.isFinite(now)) {
    throw new TypeError(`rivora: now must be a valid Date or Unix milliseconds, got ${String(options.now)}`);
  }
  const raw = rawBody(body, "verifyWebhook");
  // As Go's verifier: the first line of webhook-id and webhook-timestamp,
  // and every line of webhook-signature, as one list of entries.
  const id = headerLines(headers, HEADER_ID)[0] ?? "";
  const ts = headerLines(headers, HEADER_TIMESTAMP)[0] ?? "";
  const sigs = headerLines(headers, HEADER_SIGNATURE).join(" ").trim();
  if (!id || !ts || !sigs) {
    const missing = [!id && HEADER_ID, !ts && HEADER_TIMESTAMP, !sigs && HEADER_SIGNATURE].filter(Boolean);
    throw new WebhookVerificationError("missing_header", `webhook: missing ${missing.join(", ")} header`);
  }
  // Split no further than one past the bound: the count alone decides.
  const entries = sigs.split(/\s+/, MAX_SIGNATURES + 1);
  if (entries.length > MAX_SIGNATURES) {
    throw new WebhookVerificationError("too_many_signatures", `webhook: more than ${MAX_SIGNATURES} entries in the webhook-signature header`);
  }
  const timestamp = parseTimestamp(ts);
  const offBy = (now - Number(timestamp) * 1000) / 1000;
  if (offBy > tolerance) {
    throw new WebhookVerificationError("stale", `webhook: timestamp is ${Math.round(offBy)}s old; the tolerance is ${tolerance}s`);
  }
  if (offBy < -tolerance) {
    const why = notSeconds(timestamp, offBy);
    if (why) throw new WebhookVerificationError("bad_timestamp", `webhook: ${why}`);
    throw new WebhookVerificationError("future", `webhook: timestamp is ${Math.round(-offBy)}s ahead; the tolerance is ${tolerance}s`);
  }
  const content = signedContent(id, timestamp, raw);
  // Space-separated; a proxy (or fetch's Headers) may also have joined
  // repeated header lines with ", ".
  for (const entry of entries.map((e) => e.replace(/,+$/, ""))) {
    const comma = entry.indexOf(",");
    if (comma < 0 || entry.slice(0, comma) !== version) continue;
    const sig = decodeBase64(entry.slice(comma + 1));
    if (sig === undefined) continue;
    if (await globalThis.crypto.subtle.verify(algorithm, key, sig, content)) {
      return { id, timestamp: Number(timestamp) };
    }
  }
  throw new WebhookVerificationError("bad_signature", "webhook: no matching signature");
}

/**
 * signWebhook returns the webhook-signature value Rivora would send for one
 * delivery ("v1,<base64>"): for tests of a receiver.
 */
export async function signWebhook(
  secret: string,
  webhook: { id: string; timestamp: number; body: WebhookBody },
): Promise<string> {
  const key = await importKey(secret, "sign");
  const ts = BigInt(Math.trunc(webhook.timestamp));
  const mac = await globalThis.crypto.subtle.sign("HMAC", key, signedContent(webhook.id, ts, rawBody(webhook.body, "signWebhook")));
  return "v1," + encodeBase64(new Uint8Array(mac));
}

async function importKey(secret: string, usage: "sign" | "verify"): Promise<CryptoKey> {
  if (typeof secret === "string") secret = secret.trim();
  if (typeof secret !== "string" || !secret.startsWith(SECRET_PREFIX)) {
    throw new TypeError(`rivora: webhook secret must start with "${SECRET_PREFIX}"`);
  }
  const raw = decodeBase64(secret.slice(SECRET_PREFIX.length));
  if (raw === undefined) {
    throw new TypeError(`rivora: webhook secret after "${SECRET_PREFIX}" must be base64`);
  }
  if (raw.length < 16) {
    throw new TypeError(`rivora: webhook secret key is ${raw.length} bytes; use at least 16`);
  }
  return globalThis.crypto.subtle.importKey("raw", raw, { name: "HMAC", hash: "SHA-256" }, false, [usage]);
}

async function importPublicKey(publicKey: string): Promise<CryptoKey> {
  publicKey = publicKey.trim();
  const raw = decodeBase64(publicKey.slice(PUBLIC_KEY_PREFIX.length));
  if (raw === undefined) {
    throw new TypeError(`rivora: webhook public key after "${PUBLIC_KEY_PREFIX}" must be base64`);
  }
  if (raw.length !== 32) {
    throw new TypeError(`rivora: webhook public key is ${raw.length} bytes; an ed25519 public key is 32`);
  }
  return globalThis.crypto.subtle.importKey("raw", raw, { name: "Ed25519" }, false, ["verify"]);
}

// headerLines is every line of one header, as Go's Header.Values: an array
// value (Node's req.headersDistinct) as it is, a string as one line (Node's
// req.headers and fetch's Headers have already joined repeated lines with
// ", ").
function headerLines(headers: WebhookHeaders, name: string): readonly string[] {
  if (typeof (headers as { get?: unknown }).get === "function") {
    const value = (headers as { get(name: string): string | null }).get(name);
    return value === null ? [] : [value];
  }
  const record = headers as Readonly<Record<string, string | readonly string[] | undefined>>;
  let value = record[name];
  if (value === undefined) {
    const key = Object.keys(record).find((k) => k.toLowerCase() === name);
    value = key === undefined ? undefined : record[key];
  }
  if (value === undefined) return [];
  return typeof value === "string" ? [value] : value;
}

const INT64_MAX = 2n ** 63n - 1n;

// parseTimestamp reads Unix seconds as Go's verifier does: decimal digits
// without sign or leading zero, within int64. The signed content carries
// the number as the sender formatted it, so "+17…" or "017…" would be
// checked against another text than the one signed.
function parseTimestamp(ts: string): bigint {
  if (/^(0|[1-9][0-9]*)$/.test(ts)) {
    const n = BigInt(ts);
    if (n <= INT64_MAX) return n;
  }
  throw new WebhookVerificationError("bad_timestamp", `webhook: timestamp ${JSON.stringify(ts.slice(0, 32))} is not Unix seconds`);
}

// Bounds beyond which a timestamp ahead of now is taken for another unit
// than seconds rather than a clock that is off, as Go's verifier: after the
// year 9999, or further ahead than a Go time.Duration holds (292 years).
const LAST_SECOND_OF_9999 = 253402300799n;
const FAR_SECONDS = 9223372036;

// notSeconds says why a timestamp refused as ahead of now by more than the
// tolerance cannot be Unix seconds ("" when it can: a clock off), guessing
// its unit by its size: Unix milliseconds have 13 digits today,
// microseconds 16, nanoseconds 19. Go's verifier words it the same.
function notSeconds(timestamp: bigint, offBy: number): string {
  if (timestamp <= LAST_SECOND_OF_9999 && offBy > -FAR_SECONDS) return "";
  let guess = `year ${new Date(Number(timestamp) * 1000).getUTCFullYear()}?`;
  if (timestamp >= 10n ** 17n) guess = "nanoseconds?";
  else if (timestamp >= 10n ** 14n) guess = "microseconds?";
  else if (timestamp >= 10n ** 11n) guess = "milliseconds?";
  return `timestamp ${timestamp.toString()} is not Unix seconds (${guess})`;
}

// rawBody is body as a string or this realm's bytes. Bytes from another
// realm (a vm context, jsdom, an iframe) fail instanceof Uint8Array and
// ArrayBuffer, so they are told by their internal slots, as the client
// tells a payload's: ArrayBuffer.isView, and Object.prototype.toString.
function rawBody(body: WebhookBody, what: string): string | Uint8Array {
  if (typeof body === "string") return body;
  if (ArrayBuffer.isView(body)) return new Uint8Array(body.buffer, body.byteOffset, body.byteLength);
  if (Object.prototype.toString.call(body) === "[object ArrayBuffer]") return new Uint8Array(body);
  throw new TypeError(
    `rivora: ${what} needs the raw body (a string, Uint8Array/Buffer or ArrayBuffer) as received, not a parsed object: the signature covers the exact bytes (with Express, use express.raw())`,
  );
}

function signedContent(id: string, timestamp: bigint, body: string | Uint8Array): Uint8Array<ArrayBuffer> {
  const head = utf8.encode(`${id}.${timestamp.toString()}.`);
  const rest = typeof body === "string" ? utf8.encode(body) : body;
  const out = new Uint8Array(head.length + rest.length);
  out.set(head, 0);
  out.set(rest, head.length);
  return out;
}

// decodeBase64 is standard, padded base64 (Go's base64.StdEncoding), or
// undefined: atob alone would also take unpadded text and whitespace.
function decodeBase64(s: string): Uint8Array<ArrayBuffer> | undefined {
  if (s.length % 4 !== 0 || !/^[A-Za-z0-9+/]*={0,2}$/.test(s)) return undefined;
  try {
    return Uint8Array.from(atob(s), (c) => c.charCodeAt(0));
  } catch {
    return undefined;
  }
}

function encodeBase64(b: Uint8Array): string {
  let s = "";
  for (const x of b) s += String.fromCharCode(x);
  return btoa(s);
}
