import { readFile } from "node:fs/promises";
import { describe, expect, it } from "vitest";
import { eventId, newIdempotencyKey, subscriptionEventId } from "../src/index.js";

// The Go test internal/ids TestEventIDVectors checks the same file.
const vectorsFile = new URL("../../eventid/testdata/eventid_vectors.json", import.meta.url);
const subscriptionVectorsFile = new URL("../../eventid/testdata/subscription_eventid_vectors.json", import.meta.url);

describe("eventId", () => {
  it("computes the ids Go computes", async () => {
    const vectors = JSON.parse(await readFile(vectorsFile, "utf8")) as { destination: string; customer: string; key: string; eventId: string }[];
    expect(vectors.length).toBeGreaterThan(10);
    for (const v of vectors) {
      expect(await eventId(v.destination, v.customer, v.key), JSON.stringify(v)).toBe(v.eventId);
    }
  });

  it("computes the fan-out delivery ids Go computes, never an eventId", async () => {
    const vectors = JSON.parse(await readFile(subscriptionVectorsFile, "utf8")) as { subscription: string; customer: string; key: string; eventId: string }[];
    expect(vectors.length).toBeGreaterThan(3);
    for (const v of vectors) {
      expect(await subscriptionEventId(v.subscription, v.customer, v.key), JSON.stringify(v)).toBe(v.eventId);
      expect(await eventId(v.subscription, v.customer, v.key)).not.toBe(v.eventId);
    }
  });

  it("keeps a UUIDv7 key's time", async () => {
    const key = newIdempotencyKey(Date.UTC(2026, 0, 2, 3, 4, 5, 678));
    const id = await eventId("orders", "acme", key);
    expect(id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    expect(id.slice(0, 13)).toBe(key.slice(0, 13));
    expect(id).not.toBe(key);
  });
});

describe("newIdempotencyKey", () => {
  it("makes distinct UUIDv7s carrying the time", () => {
    const ms = 1_700_000_000_123;
    const keys = new Set(Array.from({ length: 1000 }, () => newIdempotencyKey(ms)));
    expect(keys.size).toBe(1000);
    for (const k of keys) {
      expect(k).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
      expect(parseInt(k.replace(/-/g, "").slice(0, 12), 16)).toBe(ms);
    }
  });
});
