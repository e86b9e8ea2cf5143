import { describe, expect, it } from "vitest";
import { archiveNotice, foldStats, partitionsText, type StatCount } from "../src/deadletterstats.js";

const c = (o: Partial<StatCount>): StatCount => ({
  destinationId: "d1",
  customerId: "c1",
  subscriptionId: "",
  reason: "max attempts",
  count: 1,
  replayed: 0,
  oldestMs: 1000,
  newestMs: 2000,
  ...o,
});

describe("foldStats", () => {
  it("folds customers and reasons into one row per destination, newest first", () => {
    const rows = foldStats(
      [
        c({ destinationId: "old", count: 50, newestMs: 100, oldestMs: 10 }),
        c({ destinationId: "d1", customerId: "c2", reason: "window", count: 2, oldestMs: 500, newestMs: 3000 }),
        c({ destinationId: "d1", customerId: "c1", count: 3, replayed: 2 }),
        c({ destinationId: "d1", customerId: "c1", reason: "window", count: 4, replayed: 1, oldestMs: 700, newestMs: 900 }),
      ],
      "destination",
    );
    expect(rows.map((r) => r.destinationId)).toEqual(["d1", "old"]);
    expect(rows[0]).toMatchObject({ count: 9, replayed: 3, customers: ["c1", "c2"], oldestMs: 500, newestMs: 3000, subscriptionId: "" });
    expect(rows[0]!.reasons).toEqual([["window", 6], ["max attempts", 3]]);
  });

  it("groups by subscription and destination for a customer", () => {
    const rows = foldStats(
      [
        c({ subscriptionId: "sub_a", destinationId: "d1", count: 1, newestMs: 10 }),
        c({ subscriptionId: "sub_b", destinationId: "d1", count: 2, newestMs: 20 }),
        c({ subscriptionId: "sub_a", destinationId: "d1", reason: "deleted", count: 5, newestMs: 5 }),
        c({ subscriptionId: "", destinationId: "d2", count: 1, newestMs: 30 }),
      ],
      "subscription",
    );
    expect(rows.map((r) => [r.subscriptionId, r.destinationId, r.count])).toEqual([
      ["", "d2", 1],
      ["sub_b", "d1", 2],
      ["sub_a", "d1", 6],
    ]);
  });

  it("orders ties by count then key, and rows without times last", () => {
    const rows = foldStats(
      [c({ destinationId: "b", newestMs: undefined, oldestMs: undefined }), c({ destinationId: "a", count: 1 }), c({ destinationId: "z", count: 7 })],
      "destination",
    );
    expect(rows.map((r) => r.destinationId)).toEqual(["z", "a", "b"]);
    expect(rows[2]).toMatchObject({ oldestMs: undefined, newestMs: undefined });
  });

  it("answers nothing for no counts", () => {
    expect(foldStats([], "destination")).toEqual([]);
  });
});

describe("archiveNotice", () => {
  it("says nothing for an answer from the archive", () => {
    expect(archiveNotice("", [])).toEqual([]);
  });

  it("says the dead letters come from the ledgers, and names the ledgers not read", () => {
    const lines = archiveNotice("list archive deadletter/: connection refused", [
      { partitions: [12, 13, 14, 15], agent: "a3", reason: "its owner did not answer" },
      { partitions: [4], agent: "", reason: "no agent owns it right now" },
    ]);
    expect(lines[0]).toContain("The archive is unreachable (list archive deadletter/: connection refused): the dead letters shown are those still waiting in the agents' ledgers.");
    expect(lines[1]).toBe("Not read: partitions 12–15 (agent a3): its owner did not answer. Their dead letters are missing here.");
    expect(lines[2]).toBe("Not read: partition 4 (no owner): no agent owns it right now. Their dead letters are missing here.");
  });

  it("names partitions the short way", () => {
    expect(partitionsText([0, 1, 2, 3, 5])).toBe("partitions 0–3, 5");
  });
});
