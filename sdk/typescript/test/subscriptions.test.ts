// Fan-out publishing and the SubscriptionClient against a real HTTP server
// on 127.0.0.1 that answers as Rivora's Connect services would: what goes
// on the wire, what comes back, and which calls are retried.
import { create, fromBinary, toBinary, type DescMessage, type MessageShape } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type http from "node:http";
import { afterEach, describe, expect, it } from "vitest";
import {
  PublishBatchRequestSchema,
  PublishBatchResponseSchema,
  PublishRequestSchema,
  PublishResponseSchema,
  type PublishRequest,
} from "../src/gen/rivora/v1/ingest_pb.js";
import {
  CreateSubscriptionRequestSchema,
  CreateSubscriptionResponseSchema,
  DeleteSubscriptionRequestSchema,
  DeleteSubscriptionResponseSchema,
  GetEventTypeResponseSchema,
  GetSubscriptionResponseSchema,
  ListEventTypesRequestSchema,
  ListEventTypesResponseSchema,
  ListSubscriptionsRequestSchema,
  ListSubscriptionsResponseSchema,
  PauseSubscriptionRequestSchema,
  PauseSubscriptionResponseSchema,
  RotateSubscriptionSecretRequestSchema,
  RotateSubscriptionSecretResponseSchema,
  SubscriptionSchema,
  UpdateSubscriptionRequestSchema,
  UpdateSubscriptionResponseSchema,
} from "../src/gen/rivora/v1/subscriptions_pb.js";
import { Code, RivoraClient, RivoraError, SubscriptionClient, type PublishEvent } from "../src/index.js";
import { startPartner, type Partner, type Received } from "../../../testkit/ts/index.js";

const servers: Partner[] = [];
afterEach(async () => {
  await Promise.all(servers.splice(0).map((s) => s.close()));
});

/** serve answers each request with what answers[method] makes of it, or a Connect error. */
async function serve(answers: Record<string, (req: Received) => Uint8Array | { status: number; code: string }>): Promise<Partner> {
  const s = await startPartner({
    answer: (req: Received, res: http.ServerResponse) => {
      const method = req.url.split("/").at(-1)!;
      const out = answers[method]?.(req) ?? { status: 404, code: "unimplemented" };
      if (out instanceof Uint8Array) {
        res.setHeader("content-type", "application/proto");
        res.end(out);
        return;
      }
      res.statusCode = out.status;
      res.setHeader("content-type", "application/json");
      res.end(JSON.stringify({ code: out.code, message: `test says ${out.code}` }));
    },
  });
  servers.push(s);
  return s;
}

function bin<D extends DescMessage>(schema: D, init: Parameters<typeof create<D>>[1]): Uint8Array {
  return toBinary(schema, create(schema, init));
}

function sent<D extends DescMessage>(schema: D, r: Received): MessageShape<D> {
  return fromBinary(schema, r.body);
}

async function rejection(p: Promise<unknown>): Promise<RivoraError> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(RivoraError);
  return err as RivoraError;
}

// fanOut answers like an agent routing c1's order.* to sub_1 (d1) and
// order.created also to sub_2 (d2): event id "<sub>/<key>".
function fanOut(req: PublishRequest) {
  if (req.destinationId !== "") return create(PublishResponseSchema, { eventId: `${req.destinationId}/${req.idempotencyKey}` });
  const subs = req.subscriptionId ? [req.subscriptionId] : [...(req.type.startsWith("order.") ? ["sub_1"] : []), ...(req.type === "order.created" ? ["sub_2"] : [])];
  return create(PublishResponseSchema, {
    fannedOut: true,
    routes: subs.map((s) => ({ subscriptionId: s, destinationId: s === "sub_1" ? "d1" : "d2", eventId: `${s}/${req.idempotencyKey}` })),
  });
}

const ev: PublishEvent = { customerId: "c1", laneKey: "u1", type: "order.created", payload: { amount: 120 }, idempotencyKey: "k1" };

describe("publishing without a destination", () => {
  it("fans out: one route per subscription, each with its event id", async () => {
    const s = await serve({
      Publish: (r) => toBinary(PublishResponseSchema, fanOut(sent(PublishRequestSchema, r))),
      PublishBatch: (r) =>
        bin(PublishBatchResponseSchema, {
          results: sent(PublishBatchRequestSchema, r).events.map(fanOut),
          eventIds: sent(PublishBatchRequestSchema, r).events.map((e) => fanOut(e).eventId),
        }),
    });
    const client = new RivoraClient({ baseUrl: s.base });
    await expect(client.publish(ev)).resolves.toEqual({
      eventId: "",
      duplicate: false,
      fannedOut: true,
      routes: [
        { subscriptionId: "sub_1", destinationId: "d1", eventId: "sub_1/k1" },
        { subscriptionId: "sub_2", destinationId: "d2", eventId: "sub_2/k1" },
      ],
    });
    const req = sent(PublishRequestSchema, s.received[0]!);
    expect(req.destinationId).toBe("");
    expect(req.subscriptionId).toBe("");
    expect(req.customerId).toBe("c1");

    // No match is not an error.
    await expect(client.publish({ ...ev, type: "invoice.paid" })).resolves.toEqual({ eventId: "", duplicate: false, fannedOut: true, routes: [] });
    // A test event to one subscription.
    const test = await client.publish({ ...ev, type: "invoice.paid", subscriptionId: "sub_9" });
    expect(test.routes).toEqual([{ subscriptionId: "sub_9", destinationId: "d2", eventId: "sub_9/k1" }]);
    expect(sent(PublishRequestSchema, s.received[2]!).subscriptionId).toBe("sub_9");

    const batch = await client.publishBatch([{ ...ev, destinationId: "orders" }, { ...ev, type: "order.updated" }]);
    expect(batch.eventIds).toEqual(["orders/k1", ""]);
    expect(batch.results[1]).toEqual({
      eventId: "",
      duplicate: false,
      fannedOut: true,
      routes: [{ subscriptionId: "sub_1", destinationId: "d1", eventId: "sub_1/k1" }],
    });
  });

  it("refuses a batch answer whose results do not match the events", async () => {
    const s = await serve({ PublishBatch: () => bin(PublishBatchResponseSchema, { eventIds: ["", ""], results: [{ fannedOut: true }] }) });
    const err = await rejection(new RivoraClient({ baseUrl: s.base }).publishBatch([ev, ev]));
    expect(err.code).toBe(Code.Internal);
  });
});

const at = timestampFromDate(new Date("2026-03-01T12:00:00Z"));
const subscription = (secret = "") =>
  create(SubscriptionSchema, {
    id: "sub_0000000000000001",
    customerId: "c1",
    destinationId: "d2",
    types: ["order.*"],
    path: "/in/c1",
    deliveryUrl: "https://d2.example/in/c1",
    secret,
    secretFingerprint: secret ? "" : "fp",
    createdAt: at,
  });

describe("SubscriptionClient", () => {
  it("sends each call as the SubscriptionService expects and reads its answers", async () => {
    const s = await serve({
      CreateSubscription: () => bin(CreateSubscriptionResponseSchema, { subscription: subscription("whsec_new") }),
      GetSubscription: () => bin(GetSubscriptionResponseSchema, { subscription: subscription(), pending: 7n }),
      ListSubscriptions: () => bin(ListSubscriptionsResponseSchema, { subscriptions: [subscription(), subscription()] }),
      UpdateSubscription: () => bin(UpdateSubscriptionResponseSchema, { subscription: subscription() }),
      PauseSubscription: () => bin(PauseSubscriptionResponseSchema, { subscription: { ...subscription(), paused: true } }),
      RotateSubscriptionSecret: () => bin(RotateSubscriptionSecretResponseSchema, { subscription: subscription("whsec_rotated") }),
      DeleteSubscription: (r) =>
        sent(DeleteSubscriptionRequestSchema, r).force ? bin(DeleteSubscriptionResponseSchema, { archived: 3n }) : { status: 400, code: "failed_precondition" },
    });
    const subs = new SubscriptionClient({ baseUrl: s.base, token: "rvt_c1" });
    const last = <D extends DescMessage>(schema: D) => sent(schema, s.received.at(-1)!);

    const created = await subs.create({
      customerId: "c1",
      destinationId: "d2",
      types: ["order.*"],
      filter: "data.amount > 100",
      path: "/in/c1",
      generateSecret: true,
      headers: [{ name: "X-Tenant", value: "c1" }],
    });
    expect(created.secret).toBe("whsec_new");
    expect(created.deliveryUrl).toBe("https://d2.example/in/c1");
    const createReq = last(CreateSubscriptionRequestSchema);
    expect([createReq.customerId, createReq.destinationId, createReq.types, createReq.filter, createReq.path, createReq.generateSecret]).toEqual([
      "c1",
      "d2",
      ["order.*"],
      "data.amount > 100",
      "/in/c1",
      true,
    ]);
    expect(createReq.headers.map((h) => [h.name, h.value])).toEqual([["X-Tenant", "c1"]]);
    expect(s.received[0]!.url).toBe("/rivora.v1.SubscriptionService/CreateSubscription");
    expect(s.received[0]!.headers.authorization).toBe("Bearer rvt_c1");

    const detail = await subs.get("sub_0000000000000001");
    expect(detail.pending).toBe(7);
    expect(detail.subscription.secretFingerprint).toBe("fp");

    expect(await subs.list({ customerId: "c1" })).toHaveLength(2);
    expect(last(ListSubscriptionsRequestSchema).customerId).toBe("c1");

    // Only what is given: no types (setTypes false), a cleared filter.
    await subs.update("sub_0000000000000001", { filter: "", removeHeaders: ["X-Old"] });
    let upd = last(UpdateSubscriptionRequestSchema);
    expect([upd.setTypes, upd.filter, upd.path, upd.url, upd.description, upd.removeHeaders]).toEqual([false, "", undefined, undefined, undefined, ["X-Old"]]);
    await subs.update("sub_0000000000000001", { types: ["*"], path: "/in/v2" });
    upd = last(UpdateSubscriptionRequestSchema);
    expect([upd.setTypes, upd.types, upd.filter, upd.path]).toEqual([true, ["*"], undefined, "/in/v2"]);

    expect((await subs.pause("sub_0000000000000001", "maintenance")).paused).toBe(true);
    expect(last(PauseSubscriptionRequestSchema).reason).toBe("maintenance");

    expect((await subs.rotateSecret("sub_0000000000000001")).secret).toBe("whsec_rotated");
    expect(last(RotateSubscriptionSecretRequestSchema).grace).toBeUndefined();
    await subs.rotateSecret("sub_0000000000000001", { secret: "whsec_mine", graceMs: 90_500 });
    const rot = last(RotateSubscriptionSecretRequestSchema);
    expect([rot.secret, rot.grace?.seconds, rot.grace?.nanos]).toEqual(["whsec_mine", 90n, 500_000_000]);
    await subs.rotateSecret("sub_0000000000000001", { graceMs: 0 });
    expect(last(RotateSubscriptionSecretRequestSchema).grace?.seconds).toBe(0n);
    // A grace the server would refuse is refused here, as a RivoraError.
    for (const graceMs of [-5, Number.NaN, Number.POSITIVE_INFINITY]) {
      const err = await rejection(subs.rotateSecret("sub_0000000000000001", { graceMs }));
      expect(err).toBeInstanceOf(RivoraError);
      expect([err.code, err.message.includes("graceMs")]).toEqual([Code.InvalidArgument, true]);
    }

    expect((await rejection(subs.delete("sub_0000000000000001"))).code).toBe(Code.FailedPrecondition);
    await expect(subs.delete("sub_0000000000000001", { force: true })).resolves.toEqual({ archived: 3 });
  });

  it("retries reads and tries changes once", async () => {
    let calls = 0;
    const flaky = (ok: () => Uint8Array) => () => (calls++ % 2 === 0 ? { status: 503, code: "unavailable" } : ok());
    const s = await serve({
      ListEventTypes: flaky(() => bin(ListEventTypesResponseSchema, { eventTypes: [{ name: "order.created", schema: "{}" }], strict: true })),
      GetEventType: flaky(() => bin(GetEventTypeResponseSchema, { eventType: { name: "order.created", description: "An order" } })),
      ResumeSubscription: () => ({ status: 503, code: "unavailable" }),
    });
    const subs = new SubscriptionClient({ baseUrl: s.base, baseBackoffMs: 1 });
    const types = await subs.eventTypes({ includeDeprecated: true });
    expect(types.map((t) => t.name)).toEqual(["order.created"]);
    expect(sent(ListEventTypesRequestSchema, s.received[1]!).includeDeprecated).toBe(true);
    expect((await subs.eventType("order.created")).description).toBe("An order");
    expect(s.received).toHaveLength(4);

    const err = await rejection(subs.resume("sub_1"));
    expect(err.code).toBe(Code.Unavailable);
    expect(err.attempts).toBe(1);
    expect(s.received).toHaveLength(5);
  });
});
