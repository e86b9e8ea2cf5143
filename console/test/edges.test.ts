import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { EdgeBufferSchema, EdgeStatusSchema } from "../../sdk/typescript/src/gen/rivora/v1/admin_pb.js";
import { bufferFigure } from "../src/format.js";

describe("bufferFigure", () => {
  it("says unknown before any report, marks a stale report, shows a fresh one as is", () => {
    expect(bufferFigure(create(EdgeStatusSchema, { name: "lyon" }), "0")).toBe("unknown");
    const buffer = create(EdgeBufferSchema, { bufferedEvents: 500n });
    expect(bufferFigure(create(EdgeStatusSchema, { name: "lyon", buffer, reportStale: true }), "500")).toBe("500 (stale)");
    expect(bufferFigure(create(EdgeStatusSchema, { name: "lyon", buffer }), "500")).toBe("500");
  });
});
