import { describe, expect, it } from "vitest";
import { parseRoute } from "../src/route.js";

describe("hash routes", () => {
  it("reads a page and its percent-decoded arguments", () => {
    expect(parseRoute("#/destination/orders")).toEqual({ name: "destination", args: ["orders"] });
    expect(parseRoute("#/events/acme%2Fcorp/user%201")).toEqual({ name: "events", args: ["acme/corp", "user 1"] });
    expect(parseRoute("#destinations")).toEqual({ name: "destinations", args: [] });
    expect(parseRoute("")).toEqual({ name: "", args: [] });
  });

  // Issue 22: decodeURIComponent throws URIError on a malformed escape; the
  // router must answer "bad address", not throw.
  it("answers undefined for a malformed percent-encoding instead of throwing", () => {
    for (const hash of ["#/%", "#/destinations/%E0%A4%A", "#/destination/%ZZ", "#/%E0%A4%A/x", "#/events/a/%"]) {
      expect(() => parseRoute(hash), hash).not.toThrow();
      expect(parseRoute(hash), hash).toBeUndefined();
    }
  });
});
