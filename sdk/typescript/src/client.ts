import { create, fromJson, type JsonValue } from "@bufbuild/protobuf";
import { ValueSchema } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-web";
import { context, propagation, type Context, type TextMapSetter } from "@opentelemetry/api";

import { IngestService, PublishRequestSchema, type PublishRequest } from "./gen/rivora/v1/ingest_pb.js";
import { isNetworkError, RivoraError, toRivoraError } from "./errors.js";
import { newIdempotencyKey } from "./ids.js";

/** Retry defaults, as the Go SDK's: five tries spaced 100, 200, 400, 800 ms (jittered). */
export const DEFAULT_MAX_ATTEMPTS = 5;
export const DEFAULT_BASE_BACKOFF_MS = 100;
/** Each try is bounded by default, so a hung connection is retried, not waited on. */
export const DEFAULT_TIMEOUT_MS = 30_000;
const MAX_BACKOFF_MS = 10_000;

export interface RivoraClientOptions {
  /** The agent's address, e.g. "http://127.0.0.1:7400". */
  baseUrl: string;
  /** Sent as `Authorization: Bearer <token>` (a publisher token, usually). */
  token?: string;
  /** The fetch to send requests with (default: globalThis.fetch). */
  fetch?: typeof globalThis.fetch;
  /** Bound on each try in ms (default 30 000); 0 for none beyond the call's signal. */
  timeoutMs?: number;
  /** Tries in all, at least 1 (default 5). */
  maxAttempts?: number;
  /** First wait between tries in ms, doubled after each (capped at 10 s, jittered); default 100. */
  baseBackoffMs?: number;
  /** Encode messages as JSON instead of binary protobuf: readable on the wire when debugging. */
  protoJson?: boolean;
}

/**
 * A payload is delivered as the webhook's body: a string as its UTF-8 bytes
 * and a Uint8Array (or ArrayBuffer) as is, with `contentType` (default
 * application/json); anything else as JSON (what JSON.stringify makes of
 * it), compact, with content type application/json.
 */
export type Payload = string | Uint8Array | ArrayBuffer | JsonValue | object;

/** One event to publish. */
export interface PublishEvent {
  /** The registered destination the event is delivered to. */
  destinationId: string;
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
   * server's dedup window returns the same id and stores nothing twice. When
   * absent the client assigns a UUIDv7 before the first try, so its own
   * retries never store an event twice; set it yourself to make your own
   * retries (say, after a crash) idempotent too. The event id is
   * `eventId(destinationId, customerId, key)`.
   */
  idempotencyKey?: string;
}

/** Per-call options. */
export interface CallOptions {
  /** Ends the call, retries and waits included (AbortSignal.timeout bounds the total time). */
  signal?: AbortSignal;
  /**
   * A W3C traceparent to continue, for apps without OpenTelemetry; it wins
   * over the active OpenTelemetry context, which is otherwise injected.
   */
  traceparent?: string;
  /** The W3C tracestate to send with `traceparent`. */
  tracestate?: string;
}

export interface PublishResult {
  eventId: string;
  /** True when the event had already been accepted (same idempotency key). */
  duplicate: boolean;
}

export interface PublishBatchResult {
  /** eventIds[i] is the id of events[i]. */
  eventIds: string[];
}

const headerSetter: TextMapSetter<Headers> = {
  set(carrier, key, value) {
    carrier.set(key, value);
  },
};

const TRACEPARENT = /^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$/;

/**
 * RivoraClient publishes events to a Rivora agent over Connect (fetch-based,
 * so it runs in Node >= 20 and browsers). Create one per process and share
 * it. It never logs; every failure rejects with a {@link RivoraError}.
 */
export class RivoraClient {
  readonly #ingest: Client<typeof IngestService>;
  readonly #maxAttempts: number;
  readonly #baseBackoffMs: number;
  readonly #timeoutMs: number;

  constructor(options: RivoraClientOptions) {
    let url: URL;
    try {
      url = new URL(options.baseUrl);
    } catch {
      throw new RivoraError(Code.InvalidArgument, `rivora: baseUrl ${JSON.stringify(options.baseUrl)} is not a URL; want e.g. http://127.0.0.1:7400`);
    }
    if (url.protocol !== "http:" && url.protocol !== "https:") {
      throw new RivoraError(Code.InvalidArgument, `rivora: baseUrl ${JSON.stringify(options.baseUrl)}: want an http:// or https:// URL`);
    }
    this.#maxAttempts = Math.max(1, Math.floor(options.maxAttempts ?? DEFAULT_MAX_ATTEMPTS));
    this.#baseBackoffMs = Math.max(0, options.baseBackoffMs ?? DEFAULT_BASE_BACKOFF_MS);
    this.#timeoutMs = Math.max(0, options.timeoutMs ?? DEFAULT_TIMEOUT_MS);
    const interceptors: Interceptor[] = [];
    const token = options.token;
    if (token) {
      interceptors.push((next) => (req) => {
        req.header.set("Authorization", `Bearer ${token}`);
        return next(req);
      });
    }
    const transport = createConnectTransport({
      baseUrl: options.baseUrl.replace(/\/+$/, ""),
      useBinaryFormat: !options.protoJson,
      interceptors,
      ...(options.fetch ? { fetch: options.fetch } : {}),
    });
    this.#ingest = createClient(IngestService, transport);
  }

  /** publish accepts one event; resolved means Rivora stored it durably. */
  async publish(event: PublishEvent, options: CallOptions = {}): Promise<PublishResult> {
    const ctx = context.active(); // before any await: the caller's span
    const req = toRequest(event, "rivora publish");
    const res = await this.#retry("rivora publish", ctx, options, (o) => this.#ingest.publish(req, o));
    return { eventId: res.eventId, duplicate: res.duplicate };
  }

  /**
   * publishBatch accepts events all or nothing: when one is invalid none is
   * stored and the error names its index. An empty batch sends nothing.
   */
  async publishBatch(events: readonly PublishEvent[], options: CallOptions = {}): Promise<PublishBatchResult> {
    const ctx = context.active();
    if (events.length === 0) return { eventIds: [] };
    const batch = events.map((e, i) => toRequest(e, `rivora publish batch: event ${i}`));
    const res = await this.#retry("rivora publish batch", ctx, options, (o) => this.#ingest.publishBatch({ events: batch }, o));
    if (res.eventIds.length !== events.length) {
      throw new RivoraError(Code.Internal, `rivora publish batch: server answered ${res.eventIds.length} ids for ${events.length} events`);
    }
    return { eventIds: res.eventIds };
  }

  // #retry runs call until it succeeds, fails for good, runs out of tries or
  // the signal ends it. Every try sends the same request, so the idempotency
  // key set before the first makes a retry of a stored event harmless.
  async #retry<T>(
    what: string,
    ctx: Context,
    options: CallOptions,
    call: (o: { headers: Headers; signal?: AbortSignal; timeoutMs?: number }) => Promise<T>,
  ): Promise<T> {
    const headers = traceHeaders(what, ctx, options);
    const signal = options.signal;
    for (let attempt = 1; ; attempt++) {
      if (signal?.aborted) throw aborted(what, signal, attempt - 1, "before trying", undefined);
      try {
        return await call({
          headers,
          ...(signal ? { signal } : {}),
          ...(this.#timeoutMs > 0 ? { timeoutMs: this.#timeoutMs } : {}),
        });
      } catch (err) {
        if (signal?.aborted) throw aborted(what, signal, attempt, "during the call", err);
        if (!retryable(err) || attempt >= this.#maxAttempts) {
          throw toRivoraError(what, err, attempt);
        }
        const wait = this.#backoff(attempt);
        if (wait > 0 && !(await sleep(wait, signal))) throw aborted(what, signal!, attempt, "while waiting to retry", err);
      }
    }
  }

  // #backoff is exponential with "equal jitter" (half fixed, half random) so
  // that many clients failing together do not retry together.
  #backoff(attempt: number): number {
    let d = this.#baseBackoffMs;
    if (d <= 0) return 0;
    const ceiling = Math.max(MAX_BACKOFF_MS, d);
    for (let i = 1; i < attempt && d < ceiling; i++) d *= 2;
    d = Math.min(d, ceiling);
    return d / 2 + Math.random() * (d / 2);
  }
}

function toRequest(e: PublishEvent, what: string): PublishRequest {
  const req = create(PublishRequestSchema, {
    destinationId: e.destinationId,
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
  } else if (p instanceof ArrayBuffer) {
    req.payload = new Uint8Array(p);
  } else {
    let json: string | undefined;
    try {
      json = JSON.stringify(p);
    } catch (err) {
      throw new RivoraError(Code.InvalidArgument, `${what}: payload is not JSON: ${String(err)}`, { cause: err });
    }
    if (json === undefined) {
      throw new RivoraError(Code.InvalidArgument, `${what}: payload ${typeof p} has no JSON form; pass a string, bytes or a JSON value`);
    }
    req.data = fromJson(ValueSchema, JSON.parse(json) as JsonValue);
  }
  return req;
}

function traceHeaders(what: string, ctx: Context, options: CallOptions): Headers {
  const headers = new Headers();
  if (options.traceparent === undefined) {
    propagation.inject(ctx, headers, headerSetter); // a no-op without an OpenTelemetry SDK
    return headers;
  }
  if (!TRACEPARENT.test(options.traceparent)) {
    throw new RivoraError(Code.InvalidArgument, `${what}: traceparent ${JSON.stringify(options.traceparent.slice(0, 64))} is not W3C (00-<32 hex>-<16 hex>-<2 hex>)`);
  }
  headers.set("traceparent", options.traceparent);
  if (options.tracestate) {
    // W3C: printable ASCII list members; CR, LF or other controls would
    // make Headers throw (or inject a header).
    if (!/^[\x20-\x7e]{1,512}$/.test(options.tracestate)) {
      throw new RivoraError(Code.InvalidArgument, `${what}: tracestate must be 1–512 printable ASCII characters (W3C)`);
    }
    headers.set("tracestate", options.tracestate);
  }
  return headers;
}

// retryable mirrors the Go SDK: Unavailable, DeadlineExceeded (of one try),
// ResourceExhausted and Aborted, and transport failures. The caller's own
// cancellation is checked before.
function retryable(err: unknown): boolean {
  const ce = ConnectError.from(err);
  switch (ce.code) {
    case Code.Unavailable:
    case Code.DeadlineExceeded:
    case Code.ResourceExhausted:
    case Code.Aborted:
    case Code.Canceled:
      return true;
    case Code.Unknown:
      return isNetworkError(ce);
    default:
      return false;
  }
}

// aborted reports the caller's signal ending the call: DeadlineExceeded for
// a timeout (AbortSignal.timeout), Canceled otherwise.
function aborted(what: string, signal: AbortSignal, attempts: number, when: string, last: unknown): RivoraError {
  const reason: unknown = signal.reason;
  const timeout = reason instanceof Error && reason.name === "TimeoutError";
  const lastMsg = last === undefined ? "" : `; last error: ${ConnectError.from(last).message}`;
  return new RivoraError(
    timeout ? Code.DeadlineExceeded : Code.Canceled,
    `${what}: ${timeout ? "deadline exceeded" : "canceled"} ${when} (after ${attempts} attempts${lastMsg})`,
    { cause: last ?? reason, attempts },
  );
}

// sleep resolves true after ms, or false as soon as signal aborts.
function sleep(ms: number, signal: AbortSignal | undefined): Promise<boolean> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve(false);
    const onAbort = () => {
      clearTimeout(t);
      resolve(false);
    };
    const t = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve(true);
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}
