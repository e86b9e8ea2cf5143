import { describe, expect, it } from "vitest";
import {
  can,
  counted,
  deletedSubscriptionsText,
  displayState,
  formatBytes,
  formatDuration,
  formatRate,
  formatShare,
  inFlightText,
  noisiest,
  parseDuration,
  roleName,
  sortRows,
  utcInput,
  withoutCliHints,
  customerList,
  type DestinationRow,
} from "../src/format.js";

const row = (id: string, o: Partial<DestinationRow> = {}): DestinationRow => ({
  id,
  state: "healthy",
  configuredRate: 10,
  currentRate: 10,
  pending: 0,
  inFlight: 0,
  throttledShare: 0,
  serverErrorShare: 0,
  noAnswerShare: 0,
  clientErrorShare: 0,
  oldestPendingAge: undefined,
  drainTime: 0,
  ...o,
});

describe("formatting", () => {
  it("bytes", () => {
    expect(formatBytes(0)).toBe("0 B");
    expect(formatBytes(1023)).toBe("1023 B");
    expect(formatBytes(1024)).toBe("1.0 KiB");
    expect(formatBytes(1536)).toBe("1.5 KiB");
    expect(formatBytes(3 * 2 ** 20)).toBe("3.0 MiB");
    expect(formatBytes(2 ** 30)).toBe("1.0 GiB");
  });
  it("rates", () => {
    expect(formatRate(0)).toBe("0");
    expect(formatRate(-1)).toBe("0");
    expect(formatRate(Number.NaN)).toBe("0");
    expect(formatRate(0.25)).toBe("0.25/s");
    expect(formatRate(2.5)).toBe("2.5/s");
    expect(formatRate(12.4)).toBe("12/s");
    expect(formatRate(1234)).toBe("1.2k/s");
  });
  it("shares", () => {
    expect(formatShare(0)).toBe("0%");
    expect(formatShare(0.005)).toBe("0.5%");
    expect(formatShare(0.1234)).toBe("12%");
    expect(formatShare(1)).toBe("100%");
  });
  it("durations", () => {
    expect(formatDuration(undefined)).toBe("never");
    expect(formatDuration(0)).toBe("0s");
    expect(formatDuration(0.0414)).toBe("41ms");
    expect(formatDuration(0.0000414)).toBe("<1ms");
    expect(formatDuration(44.6)).toBe("45s");
    expect(formatDuration(200)).toBe("3m 20s");
    expect(formatDuration(180)).toBe("3m");
    expect(formatDuration(7500)).toBe("2h 5m");
    expect(formatDuration(3 * 86400 + 4 * 3600 + 59)).toBe("3d 4h");
    expect(formatDuration(Number.POSITIVE_INFINITY)).toBe("never");
  });
  it("parses durations", () => {
    expect(parseDuration("30s")).toBe(30);
    expect(parseDuration("15m")).toBe(900);
    expect(parseDuration("1h30m")).toBe(5400);
    expect(parseDuration("1d")).toBe(86400);
    expect(parseDuration("")).toBeUndefined();
    expect(parseDuration("15")).toBeUndefined();
    expect(parseDuration("15m x")).toBeUndefined();
  });
});

describe("state naming", () => {
  it("a pause outranks an unusable config, which outranks the budget's state; disabled outranks paused", () => {
    expect(displayState({ state: "parked", paused: false, disabled: false })).toBe("parked");
    expect(displayState({ state: "degraded", paused: false, disabled: false })).toBe("degraded");
    expect(displayState({ state: "parked", paused: true, disabled: false })).toBe("paused");
    expect(displayState({ state: "healthy", paused: true, disabled: true })).toBe("disabled");
    expect(displayState({ state: "", paused: false, disabled: false })).toBe("healthy");
    expect(displayState({ state: "unusable", paused: false, disabled: false, unusable: "bad key" })).toBe("unusable");
    expect(displayState({ state: "paused", paused: true, disabled: false, unusable: "bad key" })).toBe("paused");
  });
});

describe("role gating", () => {
  it("viewer reads only; operator steers; admin does all", () => {
    expect(roleName(1)).toBe("admin");
    expect(roleName(2)).toBe("operator");
    expect(roleName(3)).toBe("viewer");
    expect(roleName(9)).toBe("unknown");
    expect([can("viewer", "read"), can("viewer", "steer"), can("viewer", "admin")]).toEqual([true, false, false]);
    expect([can("operator", "read"), can("operator", "steer"), can("operator", "admin")]).toEqual([true, true, false]);
    expect([can("admin", "read"), can("admin", "steer"), can("admin", "admin")]).toEqual([true, true, true]);
    expect(can("unknown", "read")).toBe(false);
    expect(can("publisher", "steer")).toBe(false);
    expect(roleName(5)).toBe("customer");
    // A customer token gets the portal, never the operators' console.
    expect([can("customer", "self-serve"), can("customer", "operate"), can("customer", "steer"), can("customer", "admin")]).toEqual([true, false, false, false]);
    expect(["admin", "operator", "viewer", "publisher"].map((r) => can(r as "admin", "operate"))).toEqual([true, true, true, false]);
    expect(["admin", "operator", "viewer", "publisher"].map((r) => can(r as "admin", "self-serve"))).toEqual([false, false, false, false]);
  });
});

describe("sorting", () => {
  const rows = [
    row("a", { pending: 5 }),
    row("b", { throttledShare: 0.2, serverErrorShare: 0.1, state: "degraded" }),
    row("c", { serverErrorShare: 0.9, state: "parked", drainTime: undefined }),
    row("d", { state: "parked", pending: 9 }),
  ];
  it("noise first, then the worse state, then backlog, then id", () => {
    expect(sortRows(rows, "noise", true).map((r) => r.id)).toEqual(["c", "b", "d", "a"]);
    // Unanswered attempts (a partner that is down) are noise too.
    expect(sortRows([...rows, row("e", { noAnswerShare: 1, state: "parked" })], "noise", true)[0]!.id).toBe("e");
    // So are other 4xx: a partner answering 400 to everything dead-letters it all.
    expect(sortRows([...rows, row("f", { clientErrorShare: 1 })], "noise", true)[0]!.id).toBe("f");
    expect(noisiest([row("x"), row("rejecting", { clientErrorShare: 0.5 })])).toBe("rejecting");
    expect(noisiest(rows)).toBe("c");
    expect(noisiest([row("x")])).toBeUndefined();
  });
  it("by a column, both ways; never drains sorts as longest", () => {
    expect(sortRows(rows, "id", false).map((r) => r.id)).toEqual(["a", "b", "c", "d"]);
    expect(sortRows(rows, "pending", true).map((r) => r.id)).toEqual(["d", "a", "b", "c"]);
    expect(sortRows(rows, "drainTime", true)[0]!.id).toBe("c");
    expect(sortRows(rows, "drainTime", false).at(-1)!.id).toBe("c");
    expect(sortRows(rows, "state", true).map((r) => r.id)).toEqual(["c", "d", "b", "a"]);
  });
  it("does not mutate its input", () => {
    const before = rows.map((r) => r.id);
    sortRows(rows, "pending", true);
    expect(rows.map((r) => r.id)).toEqual(before);
  });
});

describe("utcInput", () => {
  it("reads a datetime-local value as UTC, whatever the browser's zone", () => {
    expect(utcInput("2026-12-06T00:50")?.toISOString()).toBe("2026-12-06T00:50:00.000Z");
    expect(utcInput("2026-12-06T00:50:30")?.toISOString()).toBe("2026-12-06T00:50:30.000Z");
    expect(utcInput("")).toBeUndefined();
    expect(utcInput("yesterday")).toBeUndefined();
  });
});

describe("counted", () => {
  it("says one thing, and many", () => {
    expect([counted(1, "subscription"), counted(0, "agent"), counted(2n, "event"), counted(1n, "event")]).toEqual(["1 subscription", "0 agents", "2 events", "1 event"]);
  });
});

describe("withoutCliHints", () => {
  it("drops the command-line hints of server messages, and nothing else", () => {
    const cases: [string, string][] = [
      ['subscription "s1" does not exist; see `rivoractl subscriptions list`', 'subscription "s1" does not exist'],
      [
        'type "a.b" is deprecated: it is no longer offered for new subscriptions (see `rivoractl event-types list`)',
        'type "a.b" is deprecated: it is no longer offered for new subscriptions',
      ],
      ['subscription "s1" is already paused; resume it with `rivoractl subscriptions resume s1`', 'subscription "s1" is already paused'],
      ['destination "d" already exists; change it with `rivoractl destinations update d`', 'destination "d" already exists'],
      ["destination d: not found (see rivoractl destinations list)", "destination d: not found"],
      ["lane b-500/acme/u1: lane has no pending events here (nothing pending; see rivoractl lanes list --destination billing-500)", "lane b-500/acme/u1: lane has no pending events here (nothing pending)"],
      ["delete unused ones (`rivoractl subscriptions delete ID`) or widen one's types", "delete unused ones or widen one's types"],
      ["the payload is not valid JSON", "the payload is not valid JSON"],
      [
        'subscription "s1" has 5 pending events; wait for them, or delete with --force to archive them as dead letters',
        'subscription "s1" has 5 pending events; wait for them',
      ],
      [
        'destination "d" has 2 subscriptions (s1, s2): delete them first, or delete the destination with --force to delete them too',
        'destination "d" has 2 subscriptions (s1, s2): delete them first',
      ],
      [
        'url "http://x/in" is not on destination "d"\'s origin http://y: give a path (--path /in/c1) or subscribe to another destination',
        'url "http://x/in" is not on destination "d"\'s origin http://y: give a path or subscribe to another destination',
      ],
      ["a --force-less message keeps (its parentheses)", "a --force-less message keeps (its parentheses)"],
      [
        'subscription "s1", which routed event e1, was deleted: its dead letters cannot be delivered as it would have (its URL, secret and headers went with it), so nothing is replayed; narrow the replay (--customer, --lane, --subscription of one that exists) or leave them in the archive',
        'subscription "s1", which routed event e1, was deleted: its dead letters cannot be delivered as it would have (its URL, secret and headers went with it), so nothing is replayed; narrow the replay or leave them in the archive',
      ],
    ];
    for (const [message, want] of cases) expect(withoutCliHints(message), message).toBe(want);
  });
});

describe("deletedSubscriptionsText", () => {
  it("names one, a few, and how many more", () => {
    expect(deletedSubscriptionsText(["sub_a"], 1n)).toBe("subscription sub_a");
    expect(deletedSubscriptionsText(["sub_a", "sub_b"], 2n)).toBe("2 subscriptions (sub_a, sub_b)");
    expect(deletedSubscriptionsText(["a", "b", "c", "d"], 120n)).toBe("120 subscriptions (a, b, c and 117 more)");
  });
  it("reads the replay's refusal without its command-line hints", () => {
    const refused =
      "3 of the 5 dead letters to replay were routed by 2 subscriptions (sub_a, sub_b), which were deleted: a deleted subscription's dead letters cannot be delivered as they would have been (its URL, secret and headers went with it), so nothing is replayed; replay the others and leave those in the archive (`rivoractl replay --skip-deleted-subscriptions`), or narrow the replay (--customer, --lane, --subscription of one that exists)";
    expect(withoutCliHints(refused)).toBe(
      "3 of the 5 dead letters to replay were routed by 2 subscriptions (sub_a, sub_b), which were deleted: a deleted subscription's dead letters cannot be delivered as they would have been (its URL, secret and headers went with it), so nothing is replayed; replay the others and leave those in the archive, or narrow the replay",
    );
  });
});

describe("customerList", () => {
  it("splits on commas and spaces and drops empties", () => {
    expect(customerList(" acme, globex  initech,,")).toEqual(["acme", "globex", "initech"]);
    expect(customerList("   ")).toEqual([]);
    expect(customerList("*")).toEqual(["*"]);
  });
});

// A forced delete's answer counts the events left to attempts in flight apart
// from those archived; the console says so (it said "its 0 pending events went
// to the dead letters" while two more did once the attempt ended).
describe("inFlightText", () => {
  it("is empty when nothing was in flight", () => {
    expect(inFlightText(0n, 0n)).toBe("");
  });
  it("names the event in flight and those queued behind it", () => {
    expect(inFlightText(1n, 2n)).toBe(
      "; 1 event was in flight: its attempt goes on (the event becomes a dead letter too if it fails), and the 2 events queued behind it become dead letters once it ends",
    );
    expect(inFlightText(1n, 0n)).toBe("; 1 event was in flight: its attempt goes on (the event becomes a dead letter too if it fails)");
    expect(inFlightText(2n, 1n)).toBe(
      "; 2 events were in flight: their attempts go on (each event becomes a dead letter too if its attempt fails), and the 1 event queued behind them becomes a dead letter once they end",
    );
  });
});
