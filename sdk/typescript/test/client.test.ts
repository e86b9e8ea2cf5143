// The client against a real HTTP server on 127.0.0.1 that records requests
// and answers as a Connect server would (success, or a chosen failure):
// what goes on the wire, and how failures are retried.
import { create, fromBinary, toBinary, toJson } from "@bufbuild/protobuf";
import { ValueSchema } from "@bufbuild/protobuf/wkt";
import { propagation, ROOT_CONTEXT, context, trace, TraceFlags } from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import { W3CTraceContextPropagator } from "@opentelemetry/core";
import type http from "node:http";
import { afterEach, describe, expect, it } from "vitest";
import {
  PublishBatchRequestSchema,
  PublishBatchResponseSchema,
  PublishRequestSchema,
  PublishResponseSchema,
} from "../src/gen/rivora/v1/ingest_pb.js";
import { ErrorInfoSchema } from "../src/errors.js";
import { ConnectError } from "@connectrpc/connect";
import { Code, edgeBufferFull, edgeBufferTooOld, invalidEvent, keyReused, RivoraClient, RivoraError, type PublishEvent } from "../src/index.js";
import { freePort, startPartner, type Partner, type Received } from "../../../testkit/ts/index.js";

const event: PublishEvent = { destinationId: "orders", customerId: "acme", laneKey: "u1", type: "order.created", payload: "{}" };
/** named is what publish resolves to for a destination-named event. */
const named = (eventId: string) => ({ eventId, duplicate: false, fannedOut: false, routes: [] });
const UUIDV7 = /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

function ok(req: Received, res: http.ServerResponse): void {
  res.setHeader("content-type", "application/proto");
  if (req.url.endsWith("/PublishBatch")) {
    const n = fromBinary(PublishBatchRequestSchema, req.body).events.length;
    res.end(toBinary(PublishBatchResponseSchema, create(PublishBatchResponseSchema, { eventIds: Array.from({ length: n }, (_, i) => `id-${i}`) })));
  } else {
    res.end(toBinary(PublishResponseSchema, create(PublishResponseSchema, { eventId: "id-1", duplicate: false })));
  }
}

function fail(res: http.ServerResponse, status: number, code: string, message = `test says ${code}`, details: ErrorInfoInit[] = []): void {
  res.statusCode = status;
  res.setHeader("content-type", "application/json");
  res.end(JSON.stringify({ code, message, details: details.map(detail) }));
}

type ErrorInfoInit = { reason: string; domain: string; metadata?: Record<string, string> };

// detail is a google.rpc.ErrorInfo as the Connect protocol carries it in
// an error: its type name and its binary encoding, base64 without padding.
function detail(info: ErrorInfoInit): { type: string; value: string } {
  const bytes = toBinary(ErrorInfoSchema, create(ErrorInfoSchema, info));
  return { type: "google.rpc.ErrorInfo", value: Buffer.from(bytes).toString("base64").replace(/=+$/, "") };
}

// failFirst answers the first n requests with a Connect error, then ok.
function failFirst(n: number, status = 503, code = "unavailable") {
  let seen = 0;
  return (req: Received, res: http.ServerResponse) => (seen++ < n ? fail(res, status, code) : ok(req, res));
}

async function rejection(p: Promise<unknown>): Promise<RivoraError> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(RivoraError);
  return err as RivoraError;
}

const servers: Partner[] = [];
async function server(answer: (req: Received, res: http.ServerResponse) => void = ok): Promise<Partner> {
  const s = await startPartner({ answer });
  servers.push(s);
  return s;
}
afterEach(async () => {
  await Promise.all(servers.splice(0).map((s) => s.close()));
  propagation.disable();
  context.disable();
});

describe("RivoraClient on the wire", () => {
  it("sends the token and the active OpenTelemetry trace context", async () => {
    const s = await server();
    // What an app's OpenTelemetry SDK registers (NodeSDK does both).
    context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
    propagation.setGlobalPropagator(new W3CTraceContextPropagator());
    const client = new RivoraClient({ baseUrl: s.base + "/", token: "tok_123" });
    const span = trace.wrapSpanContext({ traceId: "0af7651916cd43dd8448eb211c80319c", spanId: "b7ad6b7169203331", traceFlags: TraceFlags.SAMPLED });
    const ctx = trace.setSpan(ROOT_CONTEXT, span);
    const res = await context.with(ctx, async () => {
      await new Promise((r) => setTimeout(r, 1)); // the context survives awaits
      return client.publish(event);
    });
    expect(res).toEqual(named("id-1"));
    const r = s.received[0]!;
    expect(r.url).toBe("/rivora.v1.IngestService/Publish");
    expect(r.headers.authorization).toBe("Bearer tok_123");
    expect(r.headers.traceparent).toBe("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
    await context.with(ctx, () => client.publishBatch([event, event]));
    expect(s.received[1]!.headers.traceparent).toBe("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
  });

  it("drops the line break a token read from a file ends with, and refuses one with a control character inside", async () => {
    const s = await server();
    await new RivoraClient({ baseUrl: s.base, token: "tok_123\n" }).publish(event);
    expect(s.received[0]!.headers.authorization).toBe("Bearer tok_123");
    let err: unknown;
    try {
      new RivoraClient({ baseUrl: s.base, token: "tok\n123" });
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(RivoraError);
    expect((err as RivoraError).code).toBe(Code.InvalidArgument);
    expect(String(err)).toContain("control character");
    expect(s.received).toHaveLength(1);
  });

  it("sends an explicit traceparent, and none without one or OpenTelemetry", async () => {
    const s = await server();
    const client = new RivoraClient({ baseUrl: s.base });
    await client.publish(event);
    expect(s.received[0]!.headers.traceparent).toBeUndefined();
    expect(s.received[0]!.headers.authorization).toBeUndefined();
    const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    await client.publish(event, { traceparent: tp, tracestate: "vendor=1" });
    expect(s.received[1]!.headers.traceparent).toBe(tp);
    expect(s.received[1]!.headers.tracestate).toBe("vendor=1");
    const err = await rejection(client.publish(event, { traceparent: "00-nope" }));
    expect(err.code).toBe(Code.InvalidArgument);
    const injected = await rejection(client.publish(event, { traceparent: tp, tracestate: "a=1\r\nx-injected: 1" }));
    expect(injected.code).toBe(Code.InvalidArgument);
    expect(s.received).toHaveLength(2);
  });

  it("encodes strings and bytes as payload, and anything else as JSON data", async () => {
    const s = await server();
    const client = new RivoraClient({ baseUrl: s.base });
    const sent = () => fromBinary(PublishRequestSchema, s.received.at(-1)!.body);

    await client.publish({ ...event, payload: "héllo", contentType: "text/plain" });
    expect(new TextDecoder().decode(sent().payload)).toBe("héllo");
    expect(sent().contentType).toBe("text/plain");
    expect(sent().data).toBeUndefined();

    await client.publish({ ...event, payload: new Uint8Array([0, 1, 255]) });
    expect(Array.from(sent().payload)).toEqual([0, 1, 255]);
    expect(sent().contentType).toBe("");

    const obj = { order: 1, tags: ["a", "b"], nested: { ok: true, none: null }, at: new Date(0), skip: undefined };
    await client.publish({ ...event, payload: obj });
    expect(sent().payload).toHaveLength(0);
    expect(toJson(ValueSchema, sent().data!)).toEqual(JSON.parse(JSON.stringify(obj)));
    for (const p of [42, null, [1, "x"], false]) {
      await client.publish({ ...event, payload: p });
      expect(toJson(ValueSchema, sent().data!)).toEqual(p);
    }

    for (const bad of [10n, undefined, () => 1]) {
      const err = await rejection(client.publish({ ...event, payload: bad as unknown as object }));
      expect(err.code).toBe(Code.InvalidArgument);
      expect(err.message).toMatch(/payload/);
    }
    expect(s.received).toHaveLength(7);

    // Any typed array or DataView is bytes, as they are in memory.
    await client.publish({ ...event, payload: new Uint16Array([1, 2]) });
    expect(Array.from(sent().payload)).toEqual(Array.from(new Uint8Array(new Uint16Array([1, 2]).buffer)));
    await client.publish({ ...event, payload: new DataView(new Uint8Array([9, 8, 7]).buffer, 1, 2) });
    expect(Array.from(sent().payload)).toEqual([8, 7]);
    // An empty plain object is {}; a Map or a Set would lose its content.
    await client.publish({ ...event, payload: {} });
    expect(toJson(ValueSchema, sent().data!)).toEqual({});
    for (const lossy of [new Map([["a", 1]]), new Set([1])]) {
      const err = await rejection(client.publish({ ...event, payload: lossy }));
      expect(err.code).toBe(Code.InvalidArgument);
      expect(err.message).toMatch(/turns into \{\}/);
    }
    expect(s.received).toHaveLength(10);
  });

  it("refuses a JSON payload JSON.stringify would change, anywhere in it, naming where", async () => {
    const s = await server();
    const client = new RivoraClient({ baseUrl: s.base });
    const cases: [unknown, string][] = [
      [{ order: { tags: new Set(["a"]) } }, "payload.order.tags is a Set, which JSON.stringify turns into {}"],
      [{ items: [1, new Map([["a", 1]])] }, "payload.items[1] is a Map, which JSON.stringify turns into {}"],
      [{ at: { "odd key": new Map() } }, 'payload.at["odd key"] is a Map'],
      [{ failure: new Error("boom") }, "payload.failure is an Error, which JSON.stringify turns into {}"],
      [{ total: Number.NaN }, "payload.total is NaN, which JSON has no number for (JSON.stringify sends null)"],
      [[1, [2, Infinity]], "payload[1][1] is Infinity"],
      [{ a: { b: -Infinity } }, "payload.a.b is -Infinity"],
      [Number.NaN, "payload is NaN"],
      [{ n: 10n }, "payload.n is a BigInt, which JSON has no form for"],
      [{ file: { bytes: new Uint8Array([1, 2]) } }, "payload.file.bytes is a Uint8Array, which JSON.stringify turns into an object of numbered keys"],
      [{ raw: new ArrayBuffer(4) }, "payload.raw is an ArrayBuffer"],
      // What toJSON returns is what is checked.
      [{ v: { toJSON: () => new Set([1]) } }, "payload.v is a Set"],
      // Dropped (or null in an array), and sent as U+FFFD, without a word.
      [{ onPaid: () => 1 }, "payload.onPaid is a function, which JSON.stringify drops"],
      [{ list: [1, Symbol("s")] }, "payload.list[1] is a symbol, which JSON.stringify drops"],
      [{ name: "caf\uD83D!" }, "payload.name holds a lone surrogate (U+D83D at index 3)"],
      [{ deep: ["ok", "\uDE00"] }, "payload.deep[1] holds a lone surrogate (U+DE00 at index 0)"],
      [{ nest: { "k\uD800": 1 } }, 'payload.nest["k\\ud800"]: its key holds a lone surrogate (U+D800 at index 1)'],
    ];
    for (const [payload, want] of cases) {
      const err = await rejection(client.publish({ ...event, payload: payload as object }));
      expect(err.code).toBe(Code.InvalidArgument);
      expect(err.rawMessage).toContain(`rivora publish: ${want}`);
    }
    // A string payload and the event's string fields, as Go refuses invalid UTF-8.
    expect((await rejection(client.publish({ ...event, payload: "x\uDC00" }))).rawMessage).toContain("rivora publish: payload holds a lone surrogate (U+DC00 at index 1)");
    const field = await rejection(client.publish({ ...event, customerId: "acme\uD83D" }));
    expect(field.code).toBe(Code.InvalidArgument);
    expect(field.rawMessage).toContain("rivora publish: customerId holds a lone surrogate (U+D83D at index 4)");
    expect((await rejection(client.publishBatch([event, { ...event, type: "\uDFFF" }]))).rawMessage).toContain("rivora publish batch: event 1: type holds a lone surrogate");
    const batch = await rejection(client.publishBatch([event, { ...event, payload: { ok: 1, bad: [new Set()] } }]));
    expect(batch.code).toBe(Code.InvalidArgument);
    expect(batch.rawMessage).toContain("rivora publish batch: event 1: payload.bad[0] is a Set");
    expect(s.received).toHaveLength(0);

    // What JSON keeps: plain and null-prototype objects, class instances
    // with fields, a Date (its toJSON), boxed primitives, an object seen
    // twice (not a cycle), an empty array or object.
    class Point {
      constructor(
        readonly x: number,
        readonly y: number,
      ) {}
    }
    const shared = { k: 1 };
    const fine = { p: new Point(1, 2), at: new Date(0), n: Object.create(null) as object, boxed: [new Number(1), new String("s"), new Boolean(false)], twice: [shared, shared], e: [], o: {}, neg: -0, emoji: "😀 \uD83D\uDE00" };
    await client.publish({ ...event, payload: fine });
    expect(toJson(ValueSchema, fromBinary(PublishRequestSchema, s.received.at(-1)!.body).data!)).toEqual(JSON.parse(JSON.stringify(fine)));
    // A cycle is not JSON.
    const cyclic: { self?: unknown } = {};
    cyclic.self = cyclic;
    expect((await rejection(client.publish({ ...event, payload: cyclic }))).rawMessage).toMatch(/payload is not JSON/);
    expect(s.received).toHaveLength(1);
  });

  it("assigns a UUIDv7 idempotency key per event, keeps a given one, and batches", async () => {
    const s = await server();
    const client = new RivoraClient({ baseUrl: s.base });
    await client.publish(event);
    await client.publish({ ...event, idempotencyKey: "order-7" });
    const [a, b] = s.received.map((r) => fromBinary(PublishRequestSchema, r.body).idempotencyKey);
    expect(a).toMatch(UUIDV7);
    expect(b).toBe("order-7");

    await expect(client.publishBatch([])).resolves.toEqual({ eventIds: [], results: [] });
    expect(s.received).toHaveLength(2);
    await expect(client.publishBatch([event, { ...event, idempotencyKey: "k2" }, event])).resolves.toEqual({
      eventIds: ["id-0", "id-1", "id-2"],
      results: ["id-0", "id-1", "id-2"].map(named),
    });
    const keys = fromBinary(PublishBatchRequestSchema, s.received[2]!.body).events.map((e) => e.idempotencyKey);
    expect(keys[1]).toBe("k2");
    expect(new Set(keys).size).toBe(3);
    expect(keys[0]).toMatch(UUIDV7);
  });

  it("refuses a batch answer with the wrong number of ids", async () => {
    const s = await server((_, res) => {
      res.setHeader("content-type", "application/proto");
      res.end(toBinary(PublishBatchResponseSchema, create(PublishBatchResponseSchema, { eventIds: ["only-one"] })));
    });
    const err = await rejection(new RivoraClient({ baseUrl: s.base }).publishBatch([event, event]));
    expect(err.code).toBe(Code.Internal);
  });

  it("refuses an answer without the event's id for a destination-named event, naming the key to publish it again with", async () => {
    const s = await server((_, res) => {
      res.setHeader("content-type", "application/proto");
      res.end(toBinary(PublishResponseSchema, create(PublishResponseSchema, {})));
    });
    const err = await rejection(new RivoraClient({ baseUrl: s.base }).publish({ ...event, idempotencyKey: "k-7" }));
    expect(err.code).toBe(Code.Internal);
    expect(err.message).toContain('without the event\'s id');
    expect(err.message).toContain('idempotency key "k-7"');
    // A fan-out's answer names no single event: an empty id is its answer.
    const { destinationId: _, ...fanOut } = event;
    await expect(new RivoraClient({ baseUrl: s.base }).publish(fanOut)).resolves.toEqual(named(""));
  });

  it("refuses a base URL that is not http(s)", () => {
    expect(() => new RivoraClient({ baseUrl: "127.0.0.1:7400" })).toThrow(RivoraError);
    expect(() => new RivoraClient({ baseUrl: "ftp://x" })).toThrow(/http/);
  });

  it("refuses a retry or timeout option that is not a finite number, naming it", () => {
    // NaN slipped through Math.max: no attempt limit, no backoff, no per-try bound.
    const bad: [string, unknown][] = [
      ["maxAttempts", NaN],
      ["maxAttempts", Infinity],
      ["baseBackoffMs", NaN],
      ["baseBackoffMs", 2 ** 31],
      ["timeoutMs", NaN],
      ["timeoutMs", -Infinity],
      ["timeoutMs", "30000"],
    ];
    for (const [name, value] of bad) {
      expect(() => new RivoraClient({ baseUrl: "http://127.0.0.1:1", [name]: value }), `${name}: ${String(value)}`).toThrow(
        expect.objectContaining({ name: "TypeError", message: expect.stringContaining(`option ${name} `) }),
      );
    }
    expect(() => new RivoraClient({ baseUrl: "http://127.0.0.1:1", maxAttempts: undefined, baseBackoffMs: 0, timeoutMs: 0 })).not.toThrow();
  });
});

describe("RivoraClient retries", () => {
  it("retries Unavailable with the same idempotency key", async () => {
    const s = await server(failFirst(2));
    const client = new RivoraClient({ baseUrl: s.base, baseBackoffMs: 1 });
    await expect(client.publish(event)).resolves.toEqual(named("id-1"));
    expect(s.received).toHaveLength(3);
    const keys = new Set(s.received.map((r) => fromBinary(PublishRequestSchema, r.body).idempotencyKey));
    expect(keys.size).toBe(1);

    const b = await server(failFirst(1, 429, "resource_exhausted"));
    await new RivoraClient({ baseUrl: b.base, baseBackoffMs: 1 }).publishBatch([event, event]);
    expect(b.received).toHaveLength(2);
    expect(b.received[0]!.body).toEqual(b.received[1]!.body);
  });

  it("does not retry a request over the server's size limit", async () => {
    const s = await server((_, res) => fail(res, 429, "resource_exhausted", "message size 9000000 is larger than configured max 8388608"));
    const err = await rejection(new RivoraClient({ baseUrl: s.base, baseBackoffMs: 1 }).publishBatch([event, event]));
    expect(err.code).toBe(Code.ResourceExhausted);
    expect(err.attempts).toBe(1);
    expect(s.received).toHaveLength(1);
  });

  it("does not retry what Rivora refuses as too large (its ErrorInfo) nor net/http's body limit, and retries back-pressure", async () => {
    const wouldStore = "this request would store 408 deliveries, about 98135424 bytes in all (its events fan out to their subscriptions); the limit is 33554432 bytes: publish fewer or smaller events at once";
    const tooLarge: [string, ErrorInfoInit[]][] = [
      [wouldStore, [{ reason: "REQUEST_TOO_LARGE", domain: "rivora.dev" }]],
      ["read first 5 bytes of message: exceeded 1048576 byte http.MaxBytesReader limit", []],
      ["http: request body too large", []],
    ];
    for (const [message, details] of tooLarge) {
      const s = await server((_, res) => fail(res, 429, "resource_exhausted", message, details));
      const err = await rejection(new RivoraClient({ baseUrl: s.base, baseBackoffMs: 1 }).publishBatch([event, event]));
      expect(err.code).toBe(Code.ResourceExhausted);
      expect(err.rawMessage).toBe(`rivora publish batch: ${message}`);
      expect(err.attempts).toBe(1);
      expect(s.received).toHaveLength(1);
    }
    const backPressure: [string, ErrorInfoInit[]][] = [
      ["this server is at --max-inflight-requests; retry with back-off", []],
      ["INGEST_EDGE of edge e1 is full (--max-buffer 1024 bytes): the cell is unreachable; nothing it acknowledged is discarded, and it accepts again as the cell takes events", []],
      ["busy", [{ reason: "SOMETHING_ELSE", domain: "rivora.dev" }]],
      ["busy", [{ reason: "REQUEST_TOO_LARGE", domain: "example.com" }]],
    ];
    for (const [message, details] of backPressure) {
      let n = 0;
      const s = await server((req, res) => (n++ < 2 ? fail(res, 429, "resource_exhausted", message, details) : ok(req, res)));
      await new RivoraClient({ baseUrl: s.base, baseBackoffMs: 1 }).publishBatch([event, event]);
      expect(s.received, message).toHaveLength(3);
    }
  });

  it("does not retry what retrying cannot fix, and says why", async () => {
    for (const [status, code, want] of [
      [400, "invalid_argument", Code.InvalidArgument],
      [401, "unauthenticated", Code.Unauthenticated],
      [403, "permission_denied", Code.PermissionDenied],
      [409, "already_exists", Code.AlreadyExists],
    ] as const) {
      const s = await server((_, res) => fail(res, status, code));
      const err = await rejection(new RivoraClient({ baseUrl: s.base, baseBackoffMs: 1 }).publish(event));
      expect(err.code).toBe(want);
      expect(err.codeName).toBe(code);
      expect(err.attempts).toBe(1);
      expect(err.message).toBe(`[${code}] rivora publish: test says ${code}`);
      expect(s.received).toHaveLength(1);
    }
  });

  it("gives up after maxAttempts on network errors, as Unavailable", async () => {
    const port = await freePort(); // nothing listens there
    const client = new RivoraClient({ baseUrl: `http://127.0.0.1:${port}`, maxAttempts: 3, baseBackoffMs: 1 });
    const err = await rejection(client.publish(event));
    expect(err.code).toBe(Code.Unavailable);
    expect(err.attempts).toBe(3);
    expect(err.message).toMatch(/ECONNREFUSED/);
  });

  it("retries an answer cut short (headers sent, body truncated, then a close), with the same key", async () => {
    // As Go's TestPublishRetriesTruncatedAnswer: the event may be stored,
    // and only the client's own retry (same key) keeps it stored once.
    let n = 0;
    const s = await server((req, res) => {
      if (n++ > 0) return ok(req, res);
      const full = toBinary(PublishResponseSchema, create(PublishResponseSchema, { eventId: "id-0", duplicate: false }));
      res.writeHead(200, { "content-type": "application/proto", "content-length": String(full.length) });
      res.write(full.subarray(0, full.length >> 1), () => res.socket?.end());
    });
    const client = new RivoraClient({ baseUrl: s.base, baseBackoffMs: 1 });
    await expect(client.publish(event)).resolves.toEqual(named("id-1"));
    expect(s.received).toHaveLength(2);
    const [first, second] = s.received.map((r) => fromBinary(PublishRequestSchema, r.body).idempotencyKey);
    expect(second).toBe(first);
  });

  it("retries a try that timed out", async () => {
    let n = 0;
    const s = await server((req, res) => {
      if (n++ === 0) return; // never answered: the try's timeout ends it
      ok(req, res);
    });
    const client = new RivoraClient({ baseUrl: s.base, timeoutMs: 300, baseBackoffMs: 1 });
    await expect(client.publish(event)).resolves.toEqual(named("id-1"));
    expect(s.received).toHaveLength(2);
  });

  it("stops at the caller's signal: canceled, or deadline exceeded", async () => {
    const s = await server((_, res) => fail(res, 503, "unavailable"));
    const client = new RivoraClient({ baseUrl: s.base, maxAttempts: 100, baseBackoffMs: 50 });
    const err = await rejection(client.publish(event, { signal: AbortSignal.timeout(300) }));
    expect(err.code).toBe(Code.DeadlineExceeded);
    expect(err.message).toMatch(/test says unavailable/);
    expect(s.received.length).toBeGreaterThan(1);
    expect(s.received.length).toBeLessThan(100);

    const ac = new AbortController();
    ac.abort();
    const canceled = await rejection(client.publish(event, { signal: ac.signal }));
    expect(canceled.code).toBe(Code.Canceled);
    expect(canceled.attempts).toBe(0);
  });
});

describe("invalidEvent", () => {
  it("reads the index of a batch's invalid event, and nothing from another error", async () => {
    const details: ErrorInfoInit[] = [{ reason: "INVALID_EVENT", domain: "rivora.dev", metadata: { index: "2" } }];
    const batch = await server((_, res) => fail(res, 400, "invalid_argument", "events[2]: event type must be 1–128 bytes", details));
    const err = await rejection(new RivoraClient({ baseUrl: batch.base }).publishBatch([event, event, event]));
    expect(invalidEvent(err)).toBe(2);
    const plain = await server((_, res) => fail(res, 400, "invalid_argument", "no detail"));
    expect(invalidEvent(await rejection(new RivoraClient({ baseUrl: plain.base }).publish(event)))).toBeUndefined();
    expect(invalidEvent(new Error("not connect"))).toBeUndefined();
  });
});

describe("keyReused", () => {
  const reused = (metadata: Record<string, string>): ErrorInfoInit[] => [{ reason: "IDEMPOTENCY_KEY_REUSED", domain: "rivora.dev", metadata }];

  it("reads the ErrorInfo of a key reused for another event, in a publish and in a batch", async () => {
    const one = await server((_, res) => fail(res, 409, "already_exists", "idempotency key taken", reused({ original_event_id: "e1", idempotency_key: "order-9" })));
    const err = await rejection(new RivoraClient({ baseUrl: one.base }).publish(event));
    expect(keyReused(err)).toEqual({ originalEventId: "e1", idempotencyKey: "order-9", index: -1 });
    expect(keyReused(err.cause)).toEqual({ originalEventId: "e1", idempotencyKey: "order-9", index: -1 });

    const batch = await server((_, res) => fail(res, 409, "already_exists", "events[3]: taken", reused({ original_event_id: "e2", idempotency_key: "k", index: "3" })));
    const berr = await rejection(new RivoraClient({ baseUrl: batch.base }).publishBatch([event, event, event, event]));
    expect(keyReused(berr)).toEqual({ originalEventId: "e2", idempotencyKey: "k", index: 3 });
  });

  it("is undefined for any other error", async () => {
    const plain = await server((_, res) => fail(res, 409, "already_exists", "exists, no detail"));
    expect(keyReused(await rejection(new RivoraClient({ baseUrl: plain.base }).publish(event)))).toBeUndefined();
    // The detail on another code, or of another domain or reason.
    for (const [status, code, details] of [
      [400, "invalid_argument", reused({ original_event_id: "e1" })],
      [409, "already_exists", [{ reason: "IDEMPOTENCY_KEY_REUSED", domain: "example.com", metadata: { original_event_id: "e1" } }]],
      [409, "already_exists", [{ reason: "OTHER", domain: "rivora.dev", metadata: { original_event_id: "e1" } }]],
    ] as const) {
      const s = await server((_, res) => fail(res, status, code, "no", [...details]));
      expect(keyReused(await rejection(new RivoraClient({ baseUrl: s.base }).publish(event))), `${code} ${JSON.stringify(details)}`).toBeUndefined();
    }
    expect(keyReused(new Error("not connect"))).toBeUndefined();
    expect(keyReused(new ConnectError("bare", Code.AlreadyExists))).toBeUndefined();
    expect(keyReused(undefined)).toBeUndefined();
  });
});

describe("edgeBufferFull and edgeBufferTooOld", () => {
  const full: ErrorInfoInit[] = [{ reason: "EDGE_BUFFER_FULL", domain: "rivora.dev", metadata: { edge: "lyon", max_buffer_bytes: "1048576" } }];
  const tooOld: ErrorInfoInit[] = [
    { reason: "EDGE_BUFFER_TOO_OLD", domain: "rivora.dev", metadata: { edge: "oslo", buffer_max_age_seconds: "259200", oldest_unforwarded_seconds: "259201" } },
  ];

  it("name the edge of a full or an over-age buffer's refusal, once the retries (back-pressure) ran out", async () => {
    for (const [details, wantFull, wantTooOld] of [
      [full, "lyon", undefined],
      [tooOld, undefined, "oslo"],
    ] as const) {
      const s = await server((_, res) => fail(res, 429, "resource_exhausted", "EDGE_BUFFER of the edge takes no more", [...details]));
      const err = await rejection(new RivoraClient({ baseUrl: s.base, maxAttempts: 3, baseBackoffMs: 1 }).publishBatch([event, event]));
      expect(err.attempts).toBe(3);
      expect(s.received).toHaveLength(3);
      expect(edgeBufferFull(err)).toBe(wantFull);
      expect(edgeBufferTooOld(err)).toBe(wantTooOld);
      expect(edgeBufferFull(err.cause)).toBe(wantFull);
    }
  });

  it("are undefined for any other error", async () => {
    for (const [status, code, details] of [
      [429, "resource_exhausted", []],
      [429, "resource_exhausted", [{ reason: "DISK_LOW", domain: "rivora.dev" }]],
      [429, "resource_exhausted", [{ reason: "EDGE_BUFFER_FULL", domain: "example.com", metadata: { edge: "lyon" } }]],
      [503, "unavailable", [...full, ...tooOld]],
    ] as const) {
      const s = await server((_, res) => fail(res, status, code, "no", [...details]));
      const err = await rejection(new RivoraClient({ baseUrl: s.base, maxAttempts: 1 }).publish(event));
      expect(edgeBufferFull(err), `${code} ${JSON.stringify(details)}`).toBeUndefined();
      expect(edgeBufferTooOld(err), `${code} ${JSON.stringify(details)}`).toBeUndefined();
    }
    expect(edgeBufferFull(new Error("EDGE_BUFFER_FULL"))).toBeUndefined();
    expect(edgeBufferTooOld(new ConnectError("bare", Code.ResourceExhausted))).toBeUndefined();
    expect(edgeBufferFull(undefined)).toBeUndefined();
  });
});
