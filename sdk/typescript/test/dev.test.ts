// Against a real `rivora dev` (built once by global-setup) delivering to a
// real receiver on 127.0.0.1: publish, batch, the example script, JSON data,
// and a publish that rides out a restart of the server.
import { execFile } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { Code, eventId, keyReused, RivoraClient, RivoraError, SubscriptionClient, subscriptionEventId, verifyWebhook, WebhookVerificationError, type PublishEvent } from "../src/index.js";
import { Dev, eventually, freePort, rpc, startDev, startPartner, type Partner, type Received } from "../../../testkit/ts/index.js";

const pkgDir = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");

let dir: string;
let dev: Dev;
let partner: Partner;
let secret: string;
let client: RivoraClient;

beforeAll(async () => {
  dir = await mkdtemp(path.join(tmpdir(), "rivora-dev-"));
  dev = new Dev(inject("rivoraBin"), path.join(dir, "data"), await freePort());
  await dev.start();
  partner = await startPartner();
  secret = await dev.createDestination("orders", partner.url, "sdk-ts-test");
  client = new RivoraClient({ baseUrl: dev.url, token: dev.token });
});

afterAll(async () => {
  await dev?.stop();
  await partner?.close();
  if (dir) await rm(dir, { recursive: true, force: true });
});

const ev = (over: Partial<PublishEvent> = {}): PublishEvent => ({
  destinationId: "orders",
  customerId: "acme",
  laneKey: "u1",
  type: "order.created",
  payload: "{}",
  ...over,
});

function deliveriesOf(id: string): Received[] {
  return partner.received.filter((r) => r.headers["webhook-id"] === id);
}

/** delivered waits for the event's first delivery. */
function delivered(id: string): Promise<Received> {
  return eventually(`delivery of ${id}`, () => deliveriesOf(id)[0]);
}

describe("against rivora dev", () => {
  it("publishes one event and a batch, delivered with valid signatures", async () => {
    const key = `order-${Date.now()}`;
    const one = await client.publish(ev({ payload: '{"order":1}', idempotencyKey: key }));
    expect(one).toEqual({ eventId: await eventId("orders", "acme", key), duplicate: false, fannedOut: false, routes: [] });
    await expect(client.publish(ev({ payload: '{"order":1}', idempotencyKey: key }))).resolves.toEqual({ ...one, duplicate: true });

    const bodies = ["first", "second", "third"];
    const { eventIds } = await client.publishBatch([
      ev({ laneKey: "u2", payload: bodies[0]!, contentType: "text/plain" }),
      ev({ laneKey: "u2", payload: new TextEncoder().encode(bodies[1]), contentType: "text/plain" }),
      ev({ laneKey: "u3", payload: bodies[2]!, contentType: "text/plain", idempotencyKey: `${key}-b` }),
    ]);
    expect(eventIds).toHaveLength(3);
    expect(new Set(eventIds).size).toBe(3);
    expect(eventIds[2]).toBe(await eventId("orders", "acme", `${key}-b`));

    const first = await delivered(one.eventId);
    expect(first.body.toString()).toBe('{"order":1}');
    expect(first.headers["content-type"]).toBe("application/json");
    await expect(verifyWebhook(secret, first.headers, first.body)).resolves.toMatchObject({ id: one.eventId });
    for (const [i, id] of eventIds.entries()) {
      const d = await delivered(id);
      expect(d.body.toString()).toBe(bodies[i]);
      expect(d.headers["content-type"]).toBe("text/plain");
      await expect(verifyWebhook(secret, d.headers, d.body)).resolves.toMatchObject({ id });
      // A forged delivery: the real headers over another body, or another signature.
      await expect(verifyWebhook(secret, d.headers, d.body.toString() + "!")).rejects.toBeInstanceOf(WebhookVerificationError);
      const forged = { ...d.headers, "webhook-signature": "v1," + Buffer.alloc(32).toString("base64") };
      await expect(verifyWebhook(secret, forged, d.body)).rejects.toMatchObject({ reason: "bad_signature" });
    }
  });

  it("names the original event of a key reused for another event (keyReused)", async () => {
    const key = `reused-${Date.now()}`;
    const first = await client.publish(ev({ payload: '{"order":1}', idempotencyKey: key }));
    const again: unknown = await client.publish(ev({ payload: '{"order":2}', idempotencyKey: key })).then(() => undefined, (e: unknown) => e);
    expect(again).toBeInstanceOf(RivoraError);
    expect((again as RivoraError).code).toBe(Code.AlreadyExists);
    expect(keyReused(again)).toEqual({ originalEventId: first.eventId, idempotencyKey: key, index: -1 });
    const inBatch: unknown = await client
      .publishBatch([ev({ idempotencyKey: `${key}-other` }), ev({ payload: '{"order":3}', idempotencyKey: key })])
      .then(() => undefined, (e: unknown) => e);
    expect(keyReused(inBatch)).toEqual({ originalEventId: first.eventId, idempotencyKey: key, index: 1 });
  });

  it("runs the example script: only the built package's public exports", async () => {
    const { stdout } = await promisify(execFile)(process.execPath, [path.join(pkgDir, "examples/publish.mjs")], {
      cwd: pkgDir,
      env: { ...process.env, RIVORA_URL: dev.url, RIVORA_TOKEN: dev.token, RIVORA_DESTINATION: "orders" },
    });
    const out = JSON.parse(stdout) as { eventId: string; eventIds: string[] };
    expect(out.eventIds).toHaveLength(2);
    for (const id of [out.eventId, ...out.eventIds]) {
      const d = await delivered(id);
      await expect(verifyWebhook(secret, d.headers, d.body)).resolves.toMatchObject({ id });
    }
  });

  // Needs the server side of PublishRequest.data (issue 15, "JSON payloads").
  it("delivers an object payload as compact JSON (PublishRequest.data)", async () => {
    const { eventId: id } = await client.publish(ev({ laneKey: "json", payload: { b: 1, a: { d: [1, "x<y"], c: null }, e: "é" } }));
    const d = await delivered(id);
    expect(d.body.toString()).toBe('{"a":{"c":null,"d":[1,"x<y"]},"b":1,"e":"é"}');
    expect(d.headers["content-type"]).toBe("application/json");
    await expect(verifyWebhook(secret, d.headers, d.body)).resolves.toMatchObject({ id });
  });

  it("verifies ed25519 (v1a) deliveries of a destination signing both schemes", async () => {
    const res = await rpc<{ destination?: { secret?: string; publicKey?: string; signatureScheme?: string; signingKey?: string } }>(
      dev, dev.token, "rivora.v1.AdminService/CreateDestination", { id: "ed", url: partner.url, signatureScheme: "both", author: "sdk-ts-test" });
    const d = res.destination ?? {};
    expect(d.signatureScheme).toBe("both");
    expect(d.publicKey).toMatch(/^whpk_/);
    expect(d.signingKey ?? "").toBe(""); // the secret key is never answered
    const { eventId: id } = await client.publish(ev({ destinationId: "ed", payload: '{"signed":"twice"}' }));
    const got = await delivered(id);
    expect(got.headers["webhook-signature"]).toMatch(/^v1,\S+ v1a,\S+$/);
    await expect(verifyWebhook(d.publicKey!, got.headers, got.body)).resolves.toMatchObject({ id });
    await expect(verifyWebhook(d.secret!, got.headers, got.body)).resolves.toMatchObject({ id });
    const tampered = Buffer.from('{"signed":"twice!"}');
    await expect(verifyWebhook(d.publicKey!, got.headers, tampered)).rejects.toBeInstanceOf(WebhookVerificationError);
  });

  it("a publish rides out a restart of rivora dev, and is delivered once", async () => {
    await dev.stop();
    let tries = 0;
    const counting: typeof fetch = (input, init) => {
      tries++;
      return fetch(input, init);
    };
    const patient = new RivoraClient({ baseUrl: dev.url, token: dev.token, fetch: counting, maxAttempts: 40, baseBackoffMs: 100 });
    const publishing = patient.publish(ev({ laneKey: "restart", payload: '{"restart":true}' }), { signal: AbortSignal.timeout(100_000) });
    await eventually("two refused tries while rivora dev is down", () => (tries >= 2 ? true : undefined));
    await dev.start();
    const { eventId: id, duplicate } = await publishing;
    expect(duplicate).toBe(false);
    const d = await delivered(id);
    await expect(verifyWebhook(secret, d.headers, d.body)).resolves.toMatchObject({ id });
    // A later event on the same lane is delivered after it: once that one
    // arrived, a second delivery of the first would have too.
    const { eventId: next } = await patient.publish(ev({ laneKey: "restart", payload: "{}" }));
    await delivered(next);
    expect(deliveriesOf(id)).toHaveLength(1);
  });
});

/** configApplied waits until every connected agent applied the control plane's config (subscriptions included). */
async function configApplied(d: Dev = dev): Promise<void> {
  type Status = { version?: string; agents?: { connected?: boolean; appliedVersion?: string }[] };
  await eventually("every agent applied the control plane's config", async () => {
    const s = await rpc<Status>(d, d.token, "rivora.v1.AdminService/GetConfigStatus", {});
    const agents = (s.agents ?? []).filter((a) => a.connected);
    return agents.length > 0 && agents.every((a) => BigInt(a.appliedVersion ?? "0") >= BigInt(s.version ?? "0"));
  });
}

// Needs the server side of subscriptions (issue 24): fan-out publish,
// SubscriptionService.
describe("fan-out against rivora dev", () => {
  it("routes one publish to every matching subscription, with its path, secret and filter", async () => {
    const other = await startPartner();
    try {
      const secret1 = await dev.createDestination("fan-d1", partner.url, "sdk-ts-test");
      await dev.createDestination("fan-d2", other.url, "sdk-ts-test");
      const subs = new SubscriptionClient({ baseUrl: dev.url, token: dev.token });
      const s1 = await subs.create({ customerId: "fan-c1", destinationId: "fan-d1", types: ["order.*"] });
      const s2 = await subs.create({ customerId: "fan-c1", destinationId: "fan-d2", types: ["order.created"], path: "/in/c1", generateSecret: true });
      expect(s2.secret).toMatch(/^whsec_/);
      expect((await subs.list({ customerId: "fan-c1" })).map((s) => s.id).sort()).toEqual([s1.id, s2.id].sort());
      await configApplied();

      const fan = (over: Partial<PublishEvent>): PublishEvent => ({ customerId: "fan-c1", laneKey: "u1", type: "order.created", payload: { amount: 120 }, ...over });
      const key = `fan-${Date.now()}`;
      const created = await client.publish(fan({ idempotencyKey: key }));
      expect(created.fannedOut).toBe(true);
      expect(created.routes.map((r) => [r.subscriptionId, r.destinationId]).sort()).toEqual([[s1.id, "fan-d1"], [s2.id, "fan-d2"]].sort());
      const to = (sub: string) => created.routes.find((r) => r.subscriptionId === sub)!.eventId;
      for (const r of created.routes) expect(r.eventId).toBe(await subscriptionEventId(r.subscriptionId, "fan-c1", key));
      const d1 = await delivered(to(s1.id));
      await expect(verifyWebhook(secret1, d1.headers, d1.body)).resolves.toMatchObject({ id: to(s1.id) });
      const d2 = await eventually(`delivery of ${to(s2.id)} at /in/c1`, () => other.received.find((r) => r.headers["webhook-id"] === to(s2.id)));
      expect(d2.url).toBe("/in/c1");
      await expect(verifyWebhook(s2.secret, d2.headers, d2.body)).resolves.toMatchObject({ id: to(s2.id) });

      // The same key again stores nothing new.
      const again = await client.publish(fan({ idempotencyKey: key }));
      expect(again.duplicate).toBe(true);
      expect(again.routes.map((r) => r.eventId).sort()).toEqual(created.routes.map((r) => r.eventId).sort());

      const updated = await client.publish(fan({ type: "order.updated" }));
      expect(updated.routes.map((r) => r.subscriptionId)).toEqual([s1.id]);
      await expect(client.publish(fan({ type: "invoice.paid" }))).resolves.toMatchObject({ fannedOut: true, routes: [] });

      // A test event to one subscription, whatever its types.
      const test = await client.publish(fan({ type: "invoice.paid", subscriptionId: s2.id }));
      expect(test.routes.map((r) => r.subscriptionId)).toEqual([s2.id]);
      await eventually("the test event's delivery", () => other.received.find((r) => r.headers["webhook-id"] === test.routes[0]!.eventId));

      // A filter routes only the events it is true for.
      const s3 = await subs.create({ customerId: "fan-c2", destinationId: "fan-d1", types: ["*"], filter: "data.amount > 100" });
      await configApplied();
      await expect(client.publish(fan({ customerId: "fan-c2", payload: { amount: 50 } }))).resolves.toMatchObject({ routes: [] });
      const big = await client.publish(fan({ customerId: "fan-c2", payload: { amount: 150 } }));
      expect(big.routes.map((r) => r.subscriptionId)).toEqual([s3.id]);
      await delivered(big.routes[0]!.eventId);
    } finally {
      await other.close();
    }
  });
});


describe("size limits against rivora dev", () => {
  it("a batch whose fan-outs would store too much is refused once, not retried", async () => {
    // Small limits: a request message of at most 90 112 bytes (one event
    // of 4 KiB in any encoding), and as much stored by one request.
    const small = await startDev(inject("rivoraBin"), ["--max-payload", "4096", "--max-batch-bytes", "4096"]);
    try {
      await small.createDestination("big-d1", partner.url, "sdk-ts-test");
      await small.createDestination("big-d2", partner.url, "sdk-ts-test");
      const subs = new SubscriptionClient({ baseUrl: small.url, token: small.token });
      await subs.create({ customerId: "big-c", destinationId: "big-d1", types: ["order.*"] });
      await subs.create({ customerId: "big-c", destinationId: "big-d2", types: ["order.*"] });
      await configApplied(small);

      const payload = JSON.stringify("x".repeat(4000));
      const batch = Array.from({ length: 20 }, (): PublishEvent => ({ customerId: "big-c", laneKey: "u1", type: "order.created", payload }));
      const c = new RivoraClient({ baseUrl: small.url, token: small.token, baseBackoffMs: 1 });
      const err: unknown = await c.publishBatch(batch).then(() => undefined, (e: unknown) => e);
      expect(err).toBeInstanceOf(RivoraError);
      const re = err as RivoraError;
      expect(re.code).toBe(Code.ResourceExhausted);
      expect(re.rawMessage).toMatch(/would store 40 deliveries/);
      expect(re.attempts).toBe(1);
      // The same events in smaller batches fit.
      const half = await c.publishBatch(batch.slice(0, 5));
      expect(half.results.every((r) => r.routes.length === 2)).toBe(true);
    } finally {
      await small.stop();
    }
  });
});
