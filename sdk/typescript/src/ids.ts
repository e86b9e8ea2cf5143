const utf8 = new TextEncoder();

/**
 * newIdempotencyKey returns a fresh UUIDv7 (RFC 9562: 48 bits of Unix
 * milliseconds, then random bits), the key the client assigns to an event
 * published without one, as the Go SDK does.
 */
export function newIdempotencyKey(now: number = Date.now()): string {
  const b = new Uint8Array(16);
  globalThis.crypto.getRandomValues(b);
  let ms = Math.max(0, Math.floor(now));
  for (let i = 5; i >= 0; i--) {
    b[i] = ms % 256;
    ms = Math.floor(ms / 256);
  }
  b[6] = (b[6]! & 0x0f) | 0x70;
  b[8] = (b[8]! & 0x3f) | 0x80;
  return formatUUID(b);
}

/**
 * eventId is the id Rivora gives an event published with an idempotency
 * key: a function of the destination, the customer and the key (the same as
 * the Go SDK's `sdk.EventID`), so a publisher knows it before publishing.
 * For a UUIDv7 key it is a UUIDv7 with the key's time; for any other key a
 * UUIDv8. Async because it hashes with WebCrypto.
 */
export async function eventId(destinationId: string, customerId: string, idempotencyKey: string): Promise<string> {
  return derive("rivora event id v1", destinationId, customerId, idempotencyKey);
}

/**
 * subscriptionEventId is the id of the delivery a keyed publish without a
 * destination (a fan-out) stores for one subscription: a function of the
 * subscription, the customer and the key (the Go SDK's
 * `sdk.SubscriptionEventID`), never equal to an `eventId`. Versions are as
 * for `eventId`.
 */
export async function subscriptionEventId(subscriptionId: string, customerId: string, idempotencyKey: string): Promise<string> {
  return derive("rivora subscription event id v1", subscriptionId, customerId, idempotencyKey);
}

// derive hashes the domain and the three parts, each NUL-terminated, into
// a UUID, as the Go package sdk/eventid does.
async function derive(domain: string, scope: string, customerId: string, idempotencyKey: string): Promise<string> {
  const parts = [domain, scope, customerId, idempotencyKey].map((p) => utf8.encode(p));
  const input = new Uint8Array(parts.reduce((n, p) => n + p.length + 1, 0));
  let at = 0;
  for (const p of parts) {
    input.set(p, at);
    at += p.length + 1; // each part ends with a zero byte
  }
  const id = new Uint8Array(await globalThis.crypto.subtle.digest("SHA-256", input)).slice(0, 16);
  let version = 8;
  const key = parseUUID(idempotencyKey);
  if (key !== undefined && key[6]! >> 4 === 7 && (key[8]! & 0xc0) === 0x80) {
    id.set(key.subarray(0, 6), 0); // the key's unix milliseconds
    version = 7;
  }
  id[6] = (id[6]! & 0x0f) | (version << 4);
  id[8] = (id[8]! & 0x3f) | 0x80; // RFC 4122 / 9562 variant
  return formatUUID(id);
}

function formatUUID(b: Uint8Array): string {
  const hex = Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

/**
 * parseUUID accepts what Go's github.com/google/uuid Parse accepts (so that
 * eventId agrees with the server on which keys are UUIDv7s): the 36-byte
 * form, with "urn:uuid:" (any case) or one byte either side (braces, not
 * checked, as Go does not) around it, or 32 hex digits.
 */
function parseUUID(s: string): Uint8Array | undefined {
  const b = utf8.encode(s); // Go measures bytes
  const text = String.fromCharCode(...b);
  let body: string;
  switch (b.length) {
    case 32:
      return /^[0-9a-fA-F]{32}$/.test(text) ? hexBytes(text) : undefined;
    case 36:
      body = text;
      break;
    case 36 + 9:
      if (text.slice(0, 9).toLowerCase() !== "urn:uuid:") return undefined;
      body = text.slice(9);
      break;
    case 36 + 2:
      body = text.slice(1, 37);
      break;
    default:
      return undefined;
  }
  if (!/^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/.test(body)) return undefined;
  return hexBytes(body.replaceAll("-", ""));
}

function hexBytes(hex: string): Uint8Array {
  const out = new Uint8Array(hex.length / 2);
  for (let i = 0; i < out.length; i++) out[i] = parseInt(hex.slice(2 * i, 2 * i + 2), 16);
  return out;
}
