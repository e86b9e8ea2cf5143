import { describe, expect, it } from "vitest";
import { commaList, isExact, parseHeaders, parseJSONData, parseTypes, testEventTypes, typeMatches } from "../src/subscriptions.js";

describe("parseTypes", () => {
  it("splits on commas, drops blanks and repeats, keeps order", () => {
    expect(parseTypes("order.*, invoice.paid")).toEqual(["order.*", "invoice.paid"]);
    expect(parseTypes(" a,,b ,\n c, a ")).toEqual(["a", "b", "c"]);
    expect(parseTypes("  ")).toEqual([]);
  });
  it("refuses a type with a space: types are comma-separated, never split on spaces", () => {
    expect(() => parseTypes("order created")).toThrow('event type "order created" has a space: separate types with commas');
    expect(() => parseTypes("order.created, invoice paid")).toThrow('"invoice paid"');
  });
});

describe("commaList", () => {
  it("trims, drops blanks and repeats", () => {
    expect(commaList(" X-A, x-b,,X-A ")).toEqual(["X-A", "x-b"]);
  });
});

describe("typeMatches, as routing.TypeMatches", () => {
  const cases: [string, string, boolean][] = [
    ["order.created", "order.created", true],
    ["order.created", "order.updated", false],
    ["order.*", "order.created", true],
    ["order.*", "order.", true],
    ["order.*", "invoice.paid", false],
    ["order.*", "order", false],
    ["*", "anything.at.all", true],
    ["*", "", true],
    ["*.paid", "invoice.paid", true],
    ["*.paid", "invoice.paid.late", false],
    ["a*b*c", "aXbYc", true],
    ["a*b*c", "abc", true],
    ["a*b*c", "acb", false],
    ["*a*a", "a", false],
    ["*a*a", "aa", true],
    ["ab*ba", "aba", false],
  ];
  for (const [p, t, want] of cases) it(`${p} ~ ${t}: ${want}`, () => expect(typeMatches(p, t)).toBe(want));
  it("tells exact names from globs", () => {
    expect([isExact("order.created"), isExact("order.*")]).toEqual([true, false]);
  });
});

describe("testEventTypes", () => {
  const cat = [
    { name: "invoice.paid", deprecated: false },
    { name: "order.created", deprecated: false },
    { name: "order.legacy", deprecated: true },
    { name: "order.updated", deprecated: false },
  ];
  it("offers the exact types first, then the catalogue's matching types, then the rest", () => {
    expect(testEventTypes(["order.shipped", "order.*"], cat, false)).toEqual(["order.shipped", "order.created", "order.updated", "invoice.paid"]);
  });
  it("on a strict cell offers only catalogued types", () => {
    expect(testEventTypes(["order.shipped", "order.created"], cat, true)).toEqual(["order.created", "invoice.paid", "order.updated"]);
  });
  it("never offers a deprecated type it was not asked for by name", () => {
    expect(testEventTypes(["order.*"], cat, true)).not.toContain("order.legacy");
    expect(testEventTypes(["order.legacy"], cat, true)[0]).toBe("order.legacy");
  });
  it("without a catalogue offers the exact types only", () => {
    expect(testEventTypes(["*", "a.b"], [], false)).toEqual(["a.b"]);
  });
});

describe("parseHeaders", () => {
  it("reads Name: value lines, values may hold colons", () => {
    expect(parseHeaders("X-Tenant: c1\n\n  Authorization: Bearer a:b  ")).toEqual([
      { name: "X-Tenant", value: "c1" },
      { name: "Authorization", value: "Bearer a:b" },
    ]);
  });
  it("names the line without a name", () => {
    expect(() => parseHeaders("X-A: 1\nno colon")).toThrow(/line 2 "no colon"/);
    expect(() => parseHeaders(": v")).toThrow(/line 1/);
  });
});

describe("parseJSONData", () => {
  it("reads JSON, empty is an empty object", () => {
    expect(parseJSONData(' {"a": 1} ')).toEqual({ a: 1 });
    expect(parseJSONData("")).toEqual({});
    expect(parseJSONData("[1]")).toEqual([1]);
  });
  it("says when it is not JSON", () => {
    expect(() => parseJSONData("{a:1}")).toThrow(/not JSON/);
  });
});
