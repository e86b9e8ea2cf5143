import { Code, ConnectError, createClient, createRouterTransport } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { ArchiveService } from "../../sdk/typescript/src/gen/rivora/v1/deadletters_pb.js";
import { bearerAuth } from "../src/bearer.js";

// A service whose every call is refused as unauthenticated, for the token
// it was given: a count (unary) and a replay (streaming, refused once its
// messages are read).
function refusingArchive(seen: string[]) {
  return createRouterTransport(
    ({ service }) =>
      service(ArchiveService, {
        deadLetterStats(_req, ctx) {
          seen.push(ctx.requestHeader.get("Authorization") ?? "");
          throw new ConnectError("token revoked", Code.Unauthenticated);
        },
        async *replay(_req, ctx) {
          seen.push(ctx.requestHeader.get("Authorization") ?? "");
          yield* [];
          throw new ConnectError("token revoked", Code.Unauthenticated);
        },
      }),
    { transport: { interceptors: [bearerAuth(() => current, (why) => refusals.push(why))] } },
  );
}

let current: string | null = "tok_1";
const refusals: string[] = [];

describe("bearerAuth", () => {
  it("sends the token and tells of a refused unary or streaming call", async () => {
    const seen: string[] = [];
    const client = createClient(ArchiveService, refusingArchive(seen));
    await expect(client.deadLetterStats({})).rejects.toThrow(/token revoked/);
    expect(refusals).toEqual(["token revoked"]);
    await expect(
      (async () => {
        for await (const _ of client.replay({})) {
          // nothing comes before the refusal
        }
      })(),
    ).rejects.toThrow(/token revoked/);
    expect(refusals).toEqual(["token revoked", "token revoked"]);
    expect(seen).toEqual(["Bearer tok_1", "Bearer tok_1"]);
  });

  it("says nothing once the session has another token (or none)", async () => {
    refusals.length = 0;
    const client = createClient(ArchiveService, refusingArchive([]));
    const stream = client.replay({});
    current = "tok_2"; // signed in again while the call was out
    await expect(
      (async () => {
        for await (const _ of stream) {
          // nothing
        }
      })(),
    ).rejects.toThrow(/token revoked/);
    expect(refusals).toEqual([]);
  });
});
