import { Code, ConnectError } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { answered, clock, failed, idle, line, loading, unreachable, type Failure } from "../src/freshness.js";

const origin = "http://127.0.0.1:7070";
const away: Failure = { unreachable: true, reason: "no answer (it may be stopped or restarting, or the network is down)" };
const refused: Failure = { unreachable: false, text: "destination alpha not found (not found)" };
// 14:02:09 on the local clock, whatever the machine's zone.
const at = new Date(2026, 0, 5, 14, 2, 9, 750).getTime();

describe("line", () => {
  it("says the view loads until its first answer, and nothing while answers come", () => {
    expect(line(loading, "destinations", origin)).toEqual({ state: "loading", text: "Loading destinations…" });
    expect(line(answered(at), "destinations", origin)).toEqual({ state: "fresh", text: "" });
    expect(line(answered(at + 2000), "destinations", origin).state).toBe("fresh");
  });

  it("says nothing for a view with no question yet", () => {
    expect(line(idle, "the event", origin)).toEqual({ state: "idle", text: "" });
  });

  it("a first read that fails is an error, not a loading state nor an empty one", () => {
    expect(line(failed(loading, away), "the audit log", origin)).toEqual({
      state: "error",
      text: `Could not load the audit log: cannot reach Rivora at ${origin}: no answer (it may be stopped or restarting, or the network is down); retrying`,
    });
    expect(line(failed(loading, refused), "destination alpha", origin)).toEqual({ state: "error", text: "Could not load destination alpha: destination alpha not found (not found); retrying" });
    // A view read once does not say it retries.
    expect(line(failed(loading, away), "your endpoints", origin, false).text).toBe(`Could not load your endpoints: cannot reach Rivora at ${origin}: ${away.reason}`);
  });

  it("a refresh that fails after data was shown keeps it, saying as of when and why", () => {
    const stale = failed(answered(at), away);
    expect(stale.shownAt).toBe(at);
    expect(line(stale, "destinations", origin)).toEqual({ state: "stale", text: `Destinations as of 14:02:09 — cannot reach Rivora at ${origin}: ${away.reason}; retrying` });
    // Failing again keeps the time of the last answer, not of the failure.
    expect(line(failed(stale, away), "destinations", origin).text).toBe(line(stale, "destinations", origin).text);
    expect(line(failed(answered(at), refused), "destination alpha", origin)).toEqual({
      state: "stale",
      text: "Destination alpha as of 14:02:09 — the refresh failed: destination alpha not found (not found); retrying",
    });
  });

  it("an answer after a failure clears the notice", () => {
    const back = answered(at + 60_000);
    expect(line(back, "destinations", origin)).toEqual({ state: "fresh", text: "" });
    expect(failed(back, away).shownAt).toBe(at + 60_000);
  });
});

describe("clock", () => {
  it("is the local HH:MM:SS, zero-padded, 24-hour", () => {
    expect(clock(at)).toBe("14:02:09");
    expect(clock(new Date(2026, 0, 5, 0, 0, 0).getTime())).toBe("00:00:00");
    expect(clock(new Date(2026, 0, 5, 9, 5, 7).getTime())).toBe("09:05:07");
    expect(clock(new Date(2026, 0, 5, 23, 59, 59, 999).getTime())).toBe("23:59:59");
  });
});

describe("unreachable", () => {
  it("names a request that got no answer, and an offline browser", () => {
    const fetchFailed = ConnectError.from(new TypeError("Failed to fetch"));
    expect(unreachable(fetchFailed)).toBe("no answer (it may be stopped or restarting, or the network is down)");
    expect(unreachable(ConnectError.from(new TypeError("NetworkError when attempting to fetch resource.")))).toBe("no answer (it may be stopped or restarting, or the network is down)");
    expect(unreachable(fetchFailed, false)).toBe("this browser is offline");
  });

  it("names a proxy's bare 502, 503 or 504 in front of Rivora", () => {
    expect(unreachable(new ConnectError("HTTP 502", Code.Unavailable))).toBe("the address answered HTTP 502 Bad Gateway for it");
    expect(unreachable(new ConnectError("HTTP 503", Code.Unavailable))).toBe("the address answered HTTP 503 Service Unavailable for it");
    expect(unreachable(new ConnectError("HTTP 504", Code.Unavailable))).toBe("the address answered HTTP 504 Gateway Timeout for it");
  });

  it("is undefined when Rivora answered, even with an error", () => {
    expect(unreachable(new ConnectError("no agent owns partition 3", Code.Unavailable))).toBeUndefined();
    expect(unreachable(new ConnectError("destination alpha not found", Code.NotFound))).toBeUndefined();
    expect(unreachable(new ConnectError("HTTP 500", Code.Unknown))).toBeUndefined();
    expect(unreachable(new ConnectError("token revoked", Code.Unauthenticated))).toBeUndefined();
  });
});
