import { Code, ConnectError, type Interceptor, type Transport } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-web";
import { propagation, type Context, type TextMapSetter } from "@opentelemetry/api";

import { errorInfo, isNetworkError, REQUEST_TOO_LARGE_REASON, RivoraError, toRivoraError } from "./errors.js";

// How every client of this package talks to Rivora: one transport per
// client (token, codec, fetch), and one Caller that bounds, retries and
// traces calls. Not exported from the package.

/** Retry defaults, as the Go SDK's: five tries spaced 100, 200, 400, 800 ms (jittered). */
export const DEFAULT_MAX_ATTEMPTS = 5;
export const DEFAULT_BASE_BACKOFF_MS = 100;
/** Each try is bounded by default, so a hung connection is retried, not waited on. */
export const DEFAULT_TIMEOUT_MS = 30_000;
const MAX_BACKOFF_MS = 10_000;
const MAX_TIMER_MS = 2 ** 31 - 1;

export interface RivoraClientOptions {
  /** Rivora's address, e.g. "http://127.0.0.1:7400": an agent to publish, the control plane for subscriptions (`rivora dev` is both). */
  baseUrl: string;
  /** Sent as `Authorization: Bearer <token>` (a publisher or customer token, usually). */
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

/** What one try is given: the trace headers, the caller's signal, the try's bound. */
export interface TryOptions {
  headers: Headers;
  signal?: AbortSignal;
  timeoutMs?: number;
}

const headerSetter: TextMapSetter<Headers> = {
  set(carrier, key, value) {
    carrier.set(key, value);
  },
};

const TRACEPARENT = /^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$/;

/** transportFor checks the options' base URL and builds the Connect transport. */
export function transportFor(options: RivoraClientOptions): Transport {
  let url: URL;
  try {
    url = new URL(options.baseUrl);
  } catch {
    throw new RivoraError(Code.InvalidArgument, `rivora: baseUrl ${JSON.stringify(options.baseUrl)} is not a URL; want e.g. http://127.0.0.1:7400`);
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    throw new RivoraError(Code.InvalidArgument, `rivora: baseUrl ${JSON.stringify(options.baseUrl)}: want an http:// or https:// URL`);
  }
  const interceptors: Interceptor[] = [];
  // A token read from a file ends with a line break: dropped. One with a
  // control character inside no header can carry: refused now, rather
  // than failing every call as if the server were unreachable.
  const token = options.token?.trim();
  if (token && /[\u0000-\u001f\u007f]/.test(token)) {
    throw new RivoraError(Code.InvalidArgument, "rivora: the token holds a control character: check how it was read");
  }
  if (token) {
    interceptors.push((next) => (req) => {
      req.header.set("Authorization", `Bearer ${token}`);
      return next(req);
    });
  }
  return createConnectTransport({
    baseUrl: options.baseUrl.replace(/\/+$/, ""),
    useBinaryFormat: !options.protoJson,
    interceptors,
    ...(options.fetch ? { fetch: options.fetch } : {}),
  });
}

/** Caller makes calls: each try bounded, retried (when asked) with backoff, traced. */
export class Caller {
  readonly #maxAttempts: number;
  readonly #baseBackoffMs: number;
  readonly #timeoutMs: number;

  constructor(options: RivoraClientOptions) {
    this.#maxAttempts = Math.max(1, Math.floor(numberOption(options, "maxAttempts", DEFAULT_MAX_ATTEMPTS)));
    this.#baseBackoffMs = Math.max(0, numberOption(options, "baseBackoffMs", DEFAULT_BASE_BACKOFF_MS));
    this.#timeoutMs = Math.max(0, numberOption(options, "timeoutMs", DEFAULT_TIMEOUT_MS));
  }

  /**
   * retry runs call until it succeeds, fails for good, runs out of tries or
   * the signal ends it. Every try sends the same request, so an idempotency
   * key set before the first makes a retry of a stored event harmless.
   */
  async retry<T>(what: string, ctx: Context, options: CallOptions, call: (o: TryOptions) => Promise<T>): Promise<T> {
    return this.#run(what, ctx, options, this.#maxAttempts, call);
  }

  /** once makes a single try: for a change whose answer, if lost, may hide that it was applied. */
  async once<T>(what: string, ctx: Context, options: CallOptions, call: (o: TryOptions) => Promise<T>): Promise<T> {
    return this.#run(what, ctx, options, 1, call);
  }

  async #run<T>(what: string, ctx: Context, options: CallOptions, maxAttempts: number, call: (o: TryOptions) => Promise<T>): Promise<T> {
    const headers = traceHeaders(what, ctx, options);
    const signal = options.signal;
    // answered is the last try's error that was not the signal's own
    // abort: what the caller's error names as the last error.
    let answered: unknown;
    for (let attempt = 1; ; attempt++) {
      if (signal?.aborted) throw aborted(what, signal, attempt - 1, "before trying", undefined);
      try {
        return await call({
          headers,
          ...(signal ? { signal } : {}),
          ...(this.#timeoutMs > 0 ? { timeoutMs: this.#timeoutMs } : {}),
        });
      } catch (err) {
        // Aborted mid-try, the try's error is the abort itself: the last
        // answer is the try's before.
        if (signal?.aborted) throw aborted(what, signal, attempt, "during the call", answered ?? err);
        answered = err;
        if (!retryable(err) || attempt >= maxAttempts) {
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

// numberOption reads a numeric option: undefined means the default; a
// value that is not a finite number is refused, since NaN slips through
// Math.max (Math.max(1, NaN) is NaN) and would lift the attempt limit, the
// backoff or the per-try bound, turning failures into a retry storm.
// A wait over setTimeout's limit (2^31-1 ms, about 24.8 days) is refused
// too: timers cap it to 1 ms, so it would not wait at all. Below the floor
// (1 try, 0 ms) is still read as the floor, as in the Go SDK.
function numberOption(options: RivoraClientOptions, name: "maxAttempts" | "baseBackoffMs" | "timeoutMs", fallback: number): number {
  const v: unknown = options[name];
  if (v === undefined) return fallback;
  if (typeof v !== "number" || !Number.isFinite(v)) {
    throw new TypeError(`rivora: option ${name} must be a finite number (or undefined for the default), not ${typeof v === "number" ? String(v) : typeof v}`);
  }
  if (name !== "maxAttempts" && v > MAX_TIMER_MS) {
    throw new TypeError(`rivora: option ${name} is ${v} ms, over the most a timer can wait (${MAX_TIMER_MS} ms)`);
  }
  return v;
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
// ResourceExhausted (unless the request is over one of the server's size
// limits) and Aborted, and transport failures. The caller's own
// cancellation is checked before.
function retryable(err: unknown): boolean {
  const ce = ConnectError.from(err);
  switch (ce.code) {
    case Code.ResourceExhausted:
      // The server's back-pressure, but not a request over its size
      // limit: sent again, it is refused again.
      return !tooLarge(ce);
    case Code.Unavailable:
    case Code.DeadlineExceeded:
    case Code.Aborted:
    case Code.Canceled:
      return true;
    case Code.Unknown:
      return isNetworkError(ce);
    default:
      return false;
  }
}

// tooLarge, as the Go SDK's, tells a request refused for its size from
// back-pressure (--max-inflight-requests, an edge's full buffer), which
// a retry after a wait may get through: all answer ResourceExhausted.
// Rivora's own size refusals (a fan-out that would store too much) say
// so in an ErrorInfo; connect-go's read limit and net/http's body limit
// (MaxBytesReader), which answer before Rivora's code runs, only in
// their messages.
function tooLarge(ce: ConnectError): boolean {
  if (errorInfo(ce, REQUEST_TOO_LARGE_REASON) !== undefined) return true;
  const msg = ce.rawMessage;
  return msg.includes("larger than configured max") || msg.includes("request body too large") || msg.includes("MaxBytesReader limit");
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
