import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { RateSampleSchema, type RateSample } from "../../sdk/typescript/src/gen/rivora/v1/admin_pb.js";
import { tryView } from "../src/format.js";
import { chartSamples, chartSince, chartSpan } from "../src/pages/chart.js";

// 90 samples of 10 s ending now, as GetDestinationHealth answers.
const now = Date.UTC(2026, 11, 3, 12, 0, 0);
const samples: RateSample[] = Array.from({ length: 90 }, (_, i) =>
  create(RateSampleSchema, { start: { seconds: BigInt((now - (90 - i) * 10_000) / 1000), nanos: 0 }, delivered: i }),
);

describe("the rate chart starts where the destination's data starts", () => {
  it("draws a destination created a minute ago over its minute", () => {
    const got = chartSamples(samples, new Date(now - 60_000));
    expect(got.length).toBe(6);
    expect(got[0]!.delivered).toBe(84);
    expect(chartSpan(got)).toBe("1m");
  });
  it("keeps the bucket it was created in", () => {
    expect(chartSamples(samples, new Date(now - 65_000)).length).toBe(7);
  });
  it("draws fifteen minutes for an older destination, or when its creation is unknown", () => {
    expect(chartSamples(samples, new Date(now - 3_600_000)).length).toBe(90);
    expect(chartSamples(samples, undefined).length).toBe(90);
    expect(chartSpan(samples)).toBe("15m");
  });
  it("keeps two samples, a line, for one created this instant", () => {
    expect(chartSamples(samples, new Date(now)).length).toBe(2);
  });
});

describe("the rate chart's caption says where a short chart starts", () => {
  it("says nothing of fifteen minutes", () => {
    expect(chartSince(samples, new Date(now - 3_600_000))).toBe("");
    expect(chartSince(samples, undefined)).toBe("");
  });
  it("says since it was created when the console cut a full history at its creation", () => {
    expect(chartSince(chartSamples(samples, new Date(now - 60_000)), new Date(now - 60_000))).toBe(" (since it was created)");
  });
  it("says since it was created when the agent's history starts there, as it does for a new destination", () => {
    // The agent took it up in the bucket after the one it was created in.
    const young = samples.slice(-4);
    expect(chartSamples(young, new Date(now - 41_000)).length).toBe(4);
    expect(chartSince(young, new Date(now - 41_000))).toBe(" (since it was created)");
  });
  it("says since its agent took it up when the history starts later (a restart, a moved partition)", () => {
    const restarted = samples.slice(-4);
    expect(chartSince(restarted, new Date(now - 3_600_000))).toBe(" (since its agent took it up)");
    expect(chartSince(restarted, undefined)).toBe(" (since its agent took it up)");
  });
});

describe("an event's tries read plainly", () => {
  it("numbers each try and says which attempt it used, or why none", () => {
    expect(tryView({ try: 7, number: 2, charged: false, notChargedReason: "destination down" }, 6)).toEqual({ try: 7, used: "not charged: destination down" });
    expect(tryView({ try: 8, number: 2, charged: true, notChargedReason: "" }, 7)).toEqual({ try: 8, used: "attempt 2" });
  });
  it("reads records from before Rivora recorded it", () => {
    expect(tryView({ try: 0, number: 1, charged: undefined, notChargedReason: "" }, 2)).toEqual({ try: 3, used: "attempt 1?" });
  });
});
