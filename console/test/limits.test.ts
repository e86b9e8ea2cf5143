import { describe, expect, it } from "vitest";
import { bounds, countOf, drainPreview, durationOf, rateOf } from "../src/limits.js";

describe("a limit override as typed", () => {
  it("reads a rate within the control plane's bounds; empty is unset", () => {
    expect(rateOf("")).toBeUndefined();
    expect(rateOf(" 5 ")).toBe(5);
    expect(rateOf("0.001")).toBe(0.001);
    expect(rateOf("1000000")).toBe(1e6);
  });
  it("says the real bound of a rate of 0, not 'nothing to override'", () => {
    expect(() => rateOf("0")).toThrow('Rate per second "0": a number of events per second from 0.001 (one event in 1,000 s) to 1,000,000; an override cannot set 0: Pause holds every event, Clear limit drops the override');
    expect(() => rateOf("0.0001")).toThrow(/^Rate per second "0.0001": a number of events per second from 0.001/);
    expect(() => rateOf("2000000")).toThrow(/to 1,000,000$/);
    expect(() => rateOf("NaN")).toThrow(/from 0.001/);
  });
  it("reads counts from 1 to their bound; 0 is refused with the bound", () => {
    expect(countOf("", "Max attempts", bounds.maxAttempts)).toBeUndefined();
    expect(countOf("12", "Max attempts", bounds.maxAttempts)).toBe(12);
    expect(() => countOf("0", "Max attempts", bounds.maxAttempts)).toThrow('Max attempts "0": a whole number from 1 to 10,000; an override cannot set 0');
    expect(() => countOf("2.5", "Burst", bounds.maxBurst)).toThrow('Burst "2.5": a whole number from 1 to 1,000,000');
    expect(() => countOf("10001", "Max in flight", bounds.maxInFlight)).toThrow('Max in flight "10001": a whole number from 1 to 10,000');
  });
  it("reads durations within their bounds", () => {
    expect(durationOf("", "Retry window", 0, bounds.maxWindow)).toBeUndefined();
    expect(durationOf("72h", "Retry window", 0, bounds.maxWindow)).toBe(72 * 3600);
    expect(() => durationOf("0s", "Retry window", 0, bounds.maxWindow)).toThrow('Retry window "0s": a duration more than 0 and at most 90d');
    expect(() => durationOf("91d", "Retry window", 0, bounds.maxWindow)).toThrow('Retry window "91d": a duration more than 0 and at most 90d');
    expect(() => durationOf("0.05s", "Attempt timeout", bounds.minTimeout, bounds.maxTimeout)).toThrow('Attempt timeout "0.05s": a duration from 100ms to 5m');
    expect(() => durationOf("soon", "TTL", 0)).toThrow('TTL "soon": a duration more than 0, such as 30s, 15m, 2h');
    expect(durationOf("30m", "TTL", 0)).toBe(1800);
  });
});

describe("drainPreview", () => {
  it("says why nothing drains when the answer says so (paused, parked), never 'drain in never'", () => {
    expect(drainPreview({ pending: 79, drainSeconds: undefined, noDrainReason: "the destination is parked: only probes go out until its partner answers" })).toBe(
      "79 pending events do not drain now: the destination is parked: only probes go out until its partner answers",
    );
    expect(drainPreview({ pending: 1, drainSeconds: undefined, noDrainReason: "the destination is paused: nothing goes out until it is resumed" })).toBe(
      "1 pending event does not drain now: the destination is paused: nothing goes out until it is resumed",
    );
  });
  it("gives the drain time, or says nothing is pending", () => {
    expect(drainPreview({ pending: 1200, drainSeconds: 240, noDrainReason: "" })).toBe("1,200 pending events drain in 4m");
    expect(drainPreview({ pending: 0, drainSeconds: undefined, noDrainReason: "" })).toBe("nothing is pending");
    expect(drainPreview({ pending: 3, drainSeconds: undefined, noDrainReason: "" })).toBe("3 pending events do not drain at this rate");
  });
  it("counts the events still arriving, as the health's drain time does", () => {
    expect(drainPreview({ pending: 52, drainSeconds: 40, noDrainReason: "", arrivals: 0.7 })).toBe("52 pending events drain in 40s, less the 0.7/s arriving");
    expect(drainPreview({ pending: 52, drainSeconds: undefined, noDrainReason: "", arrivals: 4.13 })).toBe(
      "52 pending events never drain at this rate: events arrive at 4.13/s, no slower (the backlog grows)",
    );
  });
});
