import { create, fromJson, type JsonValue } from "@bufbuild/protobuf";
import { ValueSchema } from "@bufbuild/protobuf/wkt";
import { Code, createClient, type Client } from "@connectrpc/connect";
import { context } from "@opentelemetry/api";

import { Caller, transportFor, type CallOptions, type RivoraClientOptions } from "./call.js";
import { IngestService, PublishRequestSchema, type PublishRequest, type PublishResponse } from "./gen/rivora/v1/ingest_pb.js";
import { RivoraError } from "./errors.js";
import { newIdempotencyKey } from "./ids.js";

export { DEFAULT_BASE_BACKOFF_MS, DEFAULT_MAX_ATTEMPTS, DEFAULT_TIMEOUT_MS, type CallOptions, type RivoraClientOptions } from "./call.js";

/**
 * A payload is delivered as the webhook's body: a string as its UTF-8 bytes
 * and bytes (a Uint8Array or Buffer, any other typed array or DataView, an
 * ArrayBuffer) as they are, with `contentType` (default application/json);
 * anything else as JSON (what JSON.stringify makes of it), compact, with
 * content type application/json. What JSON.stringify would change without
 * a word, anywhere in the value, is refused, naming its path: an object it
 * turns into `{}` without being a plain empty object (a Map, a Set, a
 * Blob), NaN and ±Infinity (it sends null), and a BigInt.
 */
export type Payload = string | Uint8Array | ArrayBuffer | JsonValue | object;

/** One event to publish. */
export interface PublishEvent {
  /**
   * The registered destination the event is delivered to. Leave it out (or
   * empty) to fan out: the event then goes to every active subscription of
   * `customerId` whose types (and filter) match `type`, one delivery (and
   * event id) each, listed in the result's `routes`.
   */
  destinationId?: string;
  /**
   * Instead of `destinationId`: send the event to this one subscription of
   * `customerId` (its destination, path, secret and headers) whether or not
   * its types and filter match — a test event.
   */
  subscriptionId?: string;
  /** The tenant the event belongs to. */
  customerId: string;
  /** Events with the same (destination, customer, lane) are delivered one at a time, in order; usually the end user's id. */
  laneKey: string;
  /** The event type, e.g. "order.created". */
  type: string;
  payload: Payload;
  /** Default application/json; for a JSON payload it may only be application/json. */
  contentType?: string;
  /**
   * Names the event within its (destination, customer): a repeat within the
   * server's dedup window returns the same id and stores nothing twice (a
   * fan-out too: nothing is stored twice, whatever subscriptions were
   * created since). When absent the client assigns a UUIDv7 before the
   * first try, so its own retries never store an event twice; set it
   * yourself to make your own retries (say, after a crash) idempotent too.
   * The event id is `eventId(destinationId, customerId, key)`.
   */
  idempotencyKey?: string;
}

/** One delivery a fan-out stored. */
export interface Route {
  subscriptionId: string;
  destinationId: string;
  /** This delivery's event id. */
  eventId: string;
}

export interface PublishResult {
  /** The stored event's id when the event named its destination; "" for a fan-out (see `routes`). */
  eventId: string;
  /** True when the event had already been accepted (same idempotency key). */
  duplicate: boolean;
  /** True when the event named no destination: `routes` is then the whole answer, and empty when no subscription matched (not an error: nothing was stored). */
  fannedOut: boolean;
  /** One entry per subscription a fan-out stored a delivery for. */
  routes: Route[];
}

export interface PublishBatchResult {
  /** eventIds[i] is the id of events[i] ("" for an event that fanned out). */
  eventIds: string[];
  /** results[i] is the answer for events[i], as `publish` gives it. */
  results: PublishResult[];
}

/**
 * RivoraClient publishes events to a Rivora agent over Connect (fetch-based,
 * so it runs in Node >= 20 and browsers). Create one per process and share
 * it. It never logs; every failure rejects with a {@link RivoraError}.
 */
export class RivoraClient {
  readonly #ingest: Client<typeof IngestService>;
  readonly #caller: Caller;

  constructor(options: RivoraClientOptions) {
    this.#ingest = createClient(IngestService, transportFor(options));
    this.#caller = new Caller(options);
  }

  /**
   * publish accepts one event; resolved means Rivora stored it durably
   * (for a fan-out, every delivery listed in `routes`).
   */
  async publish(event: PublishEvent, options: CallOptions = {}): Promise<PublishResult> {
    const ctx = context.active(); // before any await: the caller's span
    const req = toRequest(event, "rivora publish");
    const res = await this.#caller.retry("rivora publish", ctx, options, (o) => this.#ingest.publish(req, o));
    if (req.destinationId !== "" && res.eventId === "") {
      // A Rivora agent always names the event it stored (or found).
      throw new RivoraError(
        Code.Internal,
        `rivora publish: the server answered without the event's id (not a Rivora agent, or a proxy emptied its answer): whether it was stored is unknown; publishing it again with idempotency key ${JSON.stringify(req.idempotencyKey)} is safe`,
      );
    }
    return resultOf(res);
  }

  /**
   * publishBatch accepts events all or nothing: when one is invalid none is
   * stored and the error names its index. An empty batch sends nothing.
   */
  async publishBatch(events: readonly PublishEvent[], options: CallOptions = {}): Promise<PublishBatchResult> {
    const ctx = context.active();
    if (events.length === 0) return { eventIds: [], results: [] };
    const batch = events.map((e, i) => toRequest(e, `rivora publish batch: event ${i}`));
    const res = await this.#caller.retry("rivora publish batch", ctx, options, (o) => this.#ingest.publishBatch({ events: batch }, o));
    let results: PublishResult[];
    if (res.results.length === events.length) {
      results = res.results.map(resultOf);
    } else if (res.results.length === 0 && res.eventIds.length === events.length) {
      // A server from before fan-out answers ids only.
      results = res.eventIds.map((eventId) => ({ eventId, duplicate: false, fannedOut: false, routes: [] }));
    } else {
      throw new RivoraError(
        Code.Internal,
        `rivora publish batch: server answered ${res.eventIds.length} ids and ${res.results.length} results for ${events.length} events`,
      );
    }
    return { eventIds: results.map((r) => r.eventId), results };
  }
}

function resultOf(res: PublishResponse): PublishResult {
  return {
    eventId: res.eventId,
    duplicate: res.duplicate,
    fannedOut: res.fannedOut,
    routes: res.routes.map((r) => ({ subscriptionId: r.subscriptionId, destinationId: r.destinationId, eventId: r.eventId })),
  };
}

// plainObject: an object literal (or Object.create(null)), which is `{}`
// in JSON only when it is empty.
function plainObject(p: unknown): boolean {
  if (typeof p !== "object" || p === null) {
    return false;
  }
  const proto: unknown = Object.getPrototypeOf(p);
  return proto === Object.prototype || proto === null;
}

// LONE_SURROGATE matches a UTF-16 surrogate without its pair: no UTF-8
// form, so TextEncoder (and protobuf's string encoding) would send U+FFFD
// in its place without a word.
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

// unpaired says where s holds a lone surrogate, or "" when it has none.
function unpaired(s: string): string {
  const m = LONE_SURROGATE.exec(s);
  if (m === null) return "";
  return `a lone surrogate (U+${m[0].charCodeAt(0).toString(16).toUpperCase()} at index ${m.index}), which UTF-8 has no form for (it would be sent as U+FFFD)`;
}

// checkStrings refuses, as Go's client refuses invalid UTF-8, a string
// field the wire would change: Go names the field the same way.
function checkStrings(e: PublishEvent, what: string): void {
  const fields = { destinationId: e.destinationId, subscriptionId: e.subscriptionId, customerId: e.customerId, laneKey: e.laneKey, type: e.type, contentType: e.contentType, idempotencyKey: e.idempotencyKey };
  for (const [name, value] of Object.entries(fields)) {
    const why = typeof value === "string" ? unpaired(value) : "";
    if (why) throw new RivoraError(Code.InvalidArgument, `${what}: ${name} holds ${why}`);
  }
  if (typeof e.payload === "string") {
    const why = unpaired(e.payload);
    if (why) throw new RivoraError(Code.InvalidArgument, `${what}: payload holds ${why}; pass bytes to send what you mean`);
  }
}

function toRequest(e: PublishEvent, what: string): PublishRequest {
  checkStrings(e, what);
  const req = create(PublishRequestSchema, {
    destinationId: e.destinationId ?? "",
    subscriptionId: e.subscriptionId ?? "",
    customerId: e.customerId,
    laneKey: e.laneKey,
    type: e.type,
    contentType: e.contentType ?? "",
    idempotencyKey: e.idempotencyKey || newIdempotencyKey(),
  });
  const p = e.payload;
  if (typeof p === "string") {
    req.payload = new TextEncoder().encode(p);
  } else if (p instanceof Uint8Array) {
    req.payload = p;
  } else if (ArrayBuffer.isView(p)) {
    req.payload = new Uint8Array(p.buffer, p.byteOffset, p.byteLength);
  } else if (p instanceof ArrayBuffer || (typeof SharedArrayBuffer !== "undefined" && p instanceof SharedArrayBuffer)) {
    req.payload = new Uint8Array(p);
  } else {
    req.data = fromJson(ValueSchema, jsonOf(p, what));
  }
  return req;
}

/**
 * jsonOf is p as JSON.stringify makes it, refusing what JSON.stringify
 * would change without a word, wherever it is in p: a number JSON has no
 * form for (NaN and ±Infinity become null), an object that becomes `{}`
 * (a Map, a Set, an Error, a Blob), a typed array or ArrayBuffer (an
 * object of numbered keys, or {}), a function or a Symbol (dropped from an
 * object, null in an array), a string or key with a lone surrogate (sent
 * as U+FFFD), and a BigInt (on which it throws). The error names the
 * value's path, e.g. `payload.items[2]`.
 */
function jsonOf(p: unknown, what: string): JsonValue {
  const refuse = (msg: string) => new RivoraError(Code.InvalidArgument, `${what}: ${msg}`);
  // Each object's path, recorded before JSON.stringify walks into it; the
  // root's holder is one JSON.stringify makes, in no path.
  const paths = new WeakMap<object, string>();
  function check(this: unknown, key: string, value: unknown): unknown {
    const parent = paths.get(this as object);
    const path = parent === undefined ? "payload" : parent + accessor(this, key);
    const keyWhy = parent === undefined ? "" : unpaired(key);
    if (keyWhy) {
      throw refuse(`${path}: its key holds ${keyWhy}`);
    }
    if (typeof value === "string" && unpaired(value)) {
      throw refuse(`${path} holds ${unpaired(value)}`);
    }
    if (typeof value === "function" || typeof value === "symbol") {
      throw refuse(`${path} is a ${typeof value}, which JSON.stringify drops (or sends as null in an array); leave it out, or send a string`);
    }
    if (typeof value === "number" && !Number.isFinite(value)) {
      throw refuse(`${path} is ${String(value)}, which JSON has no number for (JSON.stringify sends null); send null or a string yourself`);
    }
    if (typeof value === "bigint") {
      throw refuse(`${path} is a BigInt, which JSON has no form for; send it as a string or a number`);
    }
    if (typeof value === "object" && value !== null) {
      if (ArrayBuffer.isView(value) || value instanceof ArrayBuffer) {
        const kind = value.constructor?.name || "binary buffer";
        throw refuse(
          `${path} is ${/^[AEIO]/.test(kind) ? "an" : "a"} ${kind}, which JSON.stringify turns into an object of numbered keys (or {}); pass the bytes as the whole payload, or an array of numbers, or a base64 string`,
        );
      }
      if (lostInJSON(value)) {
        const kind = (value as { constructor?: { name?: string } }).constructor?.name || "object";
        throw refuse(
          `${path} is ${/^[AEIOU]/.test(kind) ? "an" : "a"} ${kind}, which JSON.stringify turns into {} (its content lost); pass a plain object (for a Map: Object.fromEntries(map)), an array (for a Set: [...set]), a string or bytes`,
        );
      }
      paths.set(value, path);
    }
    return value;
  }
  let json: string | undefined;
  try {
    json = JSON.stringify(p, check);
  } catch (err) {
    if (err instanceof RivoraError) throw err;
    throw new RivoraError(Code.InvalidArgument, `${what}: payload is not JSON: ${String(err)}`, { cause: err });
  }
  if (json === undefined) {
    throw refuse(`payload ${typeof p} has no JSON form; pass a string, bytes or a JSON value`);
  }
  return JSON.parse(json) as JsonValue;
}

// accessor is how a path names holder[key]: [2], .name or ["odd key"].
function accessor(holder: unknown, key: string): string {
  if (Array.isArray(holder)) return `[${key}]`;
  return /^[A-Za-z_$][A-Za-z0-9_$]*$/.test(key) ? `.${key}` : `[${JSON.stringify(key)}]`;
}

// lostInJSON: an object JSON.stringify turns into {} though it holds
// something: a Map or a Set (whatever else it has), or an object that is
// neither plain, nor an array, nor a boxed primitive, and has no own
// enumerable keys (an Error, a Blob, a WeakMap).
function lostInJSON(value: object): boolean {
  if (value instanceof Map || value instanceof Set) return true;
  if (Array.isArray(value) || plainObject(value)) return false;
  if (value instanceof Number || value instanceof String || value instanceof Boolean) return false;
  return Object.keys(value).length === 0;
}
