import { once } from "node:events";
import http from "node:http";
import net from "node:net";
import vm from "node:vm";
import { Webhook } from "standardwebhooks";
import { describe, expect, it } from "vitest";
import { MAX_SIGNATURES, signWebhook, verifyWebhook, WebhookVerificationError, type WebhookVerificationReason } from "../src/index.js";

// The Standard Webhooks spec's own vector; the Go signer (sdk/webhook)
// produces the same signature for it, and "rotated" below is the Go
// signer's output during a rotation (new secret first, then the previous).
const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const previous = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";
const id = "msg_p5jXN8AQM9LWM0D4loKWxJek";
const ts = 1614265330;
const body = '{"test": 2432232314}';
const goSignature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";
const rotated = {
  id: "evt_1",
  body: "hello",
  signature: "v1,YlP3sB051cb7RH/XO5JvNm8LBl18TzSCLSjOwbPJAq0= v1,cbUBSvz4kmyYm2xPvq0ePE7sH2IEeqj2dCsEYhlkezA=",
};
const now = new Date(ts * 1000);

function headers(sig: string, over: Record<string, string> = {}): Record<string, string> {
  return { "webhook-id": id, "webhook-timestamp": String(ts), "webhook-signature": sig, ...over };
}

async function reason(p: Promise<unknown>): Promise<WebhookVerificationReason> {
  const err: unknown = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(WebhookVerificationError);
  return (err as WebhookVerificationError).reason;
}

describe("verifyWebhook", () => {
  it("accepts a Go-signed delivery, in every header and body form", async () => {
    const want = { id, timestamp: ts };
    await expect(verifyWebhook(secret, headers(goSignature), body, { now })).resolves.toEqual(want);
    await expect(verifyWebhook(secret, new Headers(headers(goSignature)), body, { now })).resolves.toEqual(want);
    const mixedCase = { "Webhook-Id": id, "WEBHOOK-TIMESTAMP": String(ts), "webhook-signature": [goSignature] };
    await expect(verifyWebhook(secret, mixedCase, Buffer.from(body), { now })).resolves.toEqual(want);
    const bytes = new TextEncoder().encode(body);
    await expect(verifyWebhook(secret, headers(goSignature), bytes.buffer, { now: ts * 1000 + 299_000 })).resolves.toEqual(want);
  });

  it("signs as Go does", async () => {
    expect(await signWebhook(secret, { id, timestamp: ts, body })).toBe(goSignature);
  });

  it("rejects a forged signature, a tampered body or id, and the wrong secret", async () => {
    const forged = "v1," + Buffer.alloc(32, 7).toString("base64");
    expect(await reason(verifyWebhook(secret, headers(forged), body, { now }))).toBe("bad_signature");
    expect(await reason(verifyWebhook(secret, headers(goSignature), body + " ", { now }))).toBe("bad_signature");
    expect(await reason(verifyWebhook(secret, headers(goSignature, { "webhook-id": "msg_other" }), body, { now }))).toBe("bad_signature");
    expect(await reason(verifyWebhook(previous, headers(goSignature), body, { now }))).toBe("bad_signature");
    // Not v1, not base64, truncated: skipped, never a match.
    for (const sig of ["v2," + goSignature.slice(3), "v1,not base64!", goSignature.slice(0, 20), "v1", "v1a,xyz"]) {
      expect(await reason(verifyWebhook(secret, headers(sig), body, { now }))).toBe("bad_signature");
    }
  });

  it("rejects stale and future timestamps, honouring the tolerance", async () => {
    expect(await reason(verifyWebhook(secret, headers(goSignature), body, { now: ts * 1000 + 301_000 }))).toBe("stale");
    expect(await reason(verifyWebhook(secret, headers(goSignature), body, { now: ts * 1000 - 301_000 }))).toBe("future");
    await expect(verifyWebhook(secret, headers(goSignature), body, { now: ts * 1000 + 3_000_000, toleranceSeconds: 3600 })).resolves.toBeTruthy();
    expect(await reason(verifyWebhook(secret, headers(goSignature), body, { now: ts * 1000 + 11_000, toleranceSeconds: 10 }))).toBe("stale");
    // Against the real clock, a 2021 timestamp is stale.
    expect(await reason(verifyWebhook(secret, headers(goSignature), body))).toBe("stale");
  });

  it("names a timestamp far ahead as not Unix seconds, as Go's verifier", async () => {
    const at = 1765000000;
    for (const [t, want] of [
      ["1765000000000", "webhook: timestamp 1765000000000 is not Unix seconds (milliseconds?)"],
      ["1765000000000000", "webhook: timestamp 1765000000000000 is not Unix seconds (microseconds?)"],
      ["1765000000000000000", "webhook: timestamp 1765000000000000000 is not Unix seconds (nanoseconds?)"],
      ["20000000000", "webhook: timestamp 20000000000 is not Unix seconds (year 2603?)"],
      ["253402300800", "webhook: timestamp 253402300800 is not Unix seconds (milliseconds?)"],
    ] as const) {
      const err = await verifyWebhook(secret, headers(goSignature, { "webhook-timestamp": t }), body, { now: at * 1000 }).catch((e: unknown) => e);
      expect(err, t).toBeInstanceOf(WebhookVerificationError);
      expect((err as WebhookVerificationError).reason, t).toBe("bad_timestamp");
      expect((err as Error).message, t).toBe(want);
    }
    // An hour ahead is a clock off, not another unit.
    const err = await verifyWebhook(secret, headers(goSignature, { "webhook-timestamp": String(at + 3600) }), body, { now: at * 1000 }).catch((e: unknown) => e);
    expect((err as WebhookVerificationError).reason).toBe("future");
    expect((err as Error).message).toBe("webhook: timestamp is 3600s ahead; the tolerance is 300s");
  });

  it("rejects missing headers and a timestamp that is not Unix seconds", async () => {
    for (const h of ["webhook-id", "webhook-timestamp", "webhook-signature"]) {
      const hs = headers(goSignature);
      delete hs[h];
      const err = await verifyWebhook(secret, hs, body, { now }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(WebhookVerificationError);
      expect((err as WebhookVerificationError).reason).toBe("missing_header");
      expect((err as Error).message).toContain(h);
    }
    expect(await reason(verifyWebhook(secret, headers(goSignature, { "webhook-id": "" }), body, { now }))).toBe("missing_header");
    for (const t of ["1614265330.5", "soon", "0x60", "99999999999999999999", " 1614265330"]) {
      expect(await reason(verifyWebhook(secret, headers(goSignature, { "webhook-timestamp": t }), body, { now }))).toBe("bad_timestamp");
    }
    // As Go's verifier: digits only, no sign, no leading zero ("0" alone
    // is Unix seconds), within int64. The signed text is the header's, so
    // "+1614265330" would be checked against another text than was signed.
    for (const t of ["+" + ts, "0" + ts, "+0" + ts, "-" + ts, "00", "-0", "9223372036854775808"]) {
      expect(await reason(verifyWebhook(secret, headers(goSignature, { "webhook-timestamp": t }), body, { now })), t).toBe("bad_timestamp");
    }
    expect(await reason(verifyWebhook(secret, headers(goSignature, { "webhook-timestamp": "0" }), body, { now }))).toBe("stale");
  });

  it("accepts any one of several signatures (secret rotation)", async () => {
    const h = { "webhook-id": rotated.id, "webhook-timestamp": String(ts), "webhook-signature": rotated.signature };
    await expect(verifyWebhook(secret, h, rotated.body, { now })).resolves.toEqual({ id: rotated.id, timestamp: ts });
    await expect(verifyWebhook(previous, h, rotated.body, { now })).resolves.toEqual({ id: rotated.id, timestamp: ts });
    const third = "whsec_" + Buffer.alloc(24, 1).toString("base64");
    expect(await reason(verifyWebhook(third, h, rotated.body, { now }))).toBe("bad_signature");
    // Extra spaces and unknown versions around a good one.
    const noisy = `  v2,abc   v1,${"A".repeat(44)}  ${goSignature} `;
    await expect(verifyWebhook(secret, headers(noisy), body, { now })).resolves.toBeTruthy();
    // Two header lines joined with ", " (a proxy, or fetch's Headers).
    await expect(verifyWebhook(secret, headers(`v1,${"A".repeat(44)}, ${goSignature}`), body, { now })).resolves.toBeTruthy();
    // The match first, and stray commas: as Go's TestVerifyReadsCommaJoinedLines.
    await expect(verifyWebhook(secret, headers(`${goSignature}, v1,AAAA`), body, { now })).resolves.toBeTruthy();
    await expect(verifyWebhook(secret, headers(`v1,AAAA,, ${goSignature},`), body, { now })).resolves.toBeTruthy();
  });

  it("reads every signature of every header line, as Go does", async () => {
    const forged = "v1," + Buffer.alloc(32, 7).toString("base64");
    const want = { id, timestamp: ts };
    // A record holding the lines as an array (Node's req.headersDistinct).
    await expect(verifyWebhook(secret, { ...headers(""), "webhook-signature": [forged, goSignature] }, body, { now })).resolves.toEqual(want);
    await expect(verifyWebhook(secret, { ...headers(""), "webhook-signature": [`${forged} v2,x`, `v1a,y ${goSignature}`] }, body, { now })).resolves.toEqual(want);
    const both = new Headers(headers(forged));
    both.append("webhook-signature", goSignature);
    await expect(verifyWebhook(secret, both, body, { now })).resolves.toEqual(want);
    // Lines that are all blank are no signature at all.
    expect(await reason(verifyWebhook(secret, { ...headers(""), "webhook-signature": ["", " "] }, body, { now }))).toBe("missing_header");
    expect(await reason(verifyWebhook(secret, { ...headers(""), "webhook-signature": [forged, forged] }, body, { now }))).toBe("bad_signature");

    // What a Node server is handed for two lines, the good one second.
    const got = await receiveRaw([`webhook-id: ${id}`, `webhook-timestamp: ${ts}`, `webhook-signature: ${forged}`, `webhook-signature: ${goSignature}`], body);
    expect(got.distinct["webhook-signature"]).toEqual([forged, goSignature]);
    await expect(verifyWebhook(secret, got.headers, got.body, { now })).resolves.toEqual(want);
    await expect(verifyWebhook(secret, got.distinct, got.body, { now })).resolves.toEqual(want);
  });

  it("refuses more than MAX_SIGNATURES entries before checking any, as Go's verifier", async () => {
    const want = { id, timestamp: ts };
    const bogus = "v1a,AAAA ".repeat(MAX_SIGNATURES - 1);
    await expect(verifyWebhook(secret, headers(bogus + goSignature), body, { now })).resolves.toEqual(want);
    // One more, the matching one last: refused all the same.
    expect(await reason(verifyWebhook(secret, headers(bogus + "v1,AAAA " + goSignature), body, { now }))).toBe("too_many_signatures");
    // Entries over several header lines count together.
    expect(await reason(verifyWebhook(secret, { ...headers(""), "webhook-signature": [bogus, "v1,AAAA " + goSignature] }, body, { now }))).toBe(
      "too_many_signatures",
    );
  });

  it("keeps the default tolerance for toleranceSeconds of 0 or below, as Go's WithTolerance", async () => {
    for (const toleranceSeconds of [0, -1, -0, -Infinity]) {
      await expect(verifyWebhook(secret, headers(goSignature), body, { now: ts * 1000 + 299_000, toleranceSeconds }), String(toleranceSeconds)).resolves.toEqual({ id, timestamp: ts });
      expect(await reason(verifyWebhook(secret, headers(goSignature), body, { now: ts * 1000 + 301_000, toleranceSeconds }))).toBe("stale");
      expect(await reason(verifyWebhook(secret, headers(goSignature), body, { now: ts * 1000 - 301_000, toleranceSeconds }))).toBe("future");
    }
  });

  it("throws a TypeError for options that would skip the timestamp check, and for a parsed body", async () => {
    for (const opts of [{ now, toleranceSeconds: Number.NaN }, { now, toleranceSeconds: "60" as unknown as number }, { now: new Date("not a date") }, { now: Number.NaN }]) {
      await expect(verifyWebhook(secret, headers(goSignature), body, opts)).rejects.toThrow(TypeError);
    }
    await expect(verifyWebhook(secret, headers(goSignature), { order: 1 } as unknown as string, { now })).rejects.toThrow(/raw body/);
  });

  it("accepts a body from another realm (a vm context, jsdom), as the client does", async () => {
    const want = { id, timestamp: ts };
    // The body is ASCII: its char codes are its bytes.
    const realm = vm.createContext({ text: body });
    vm.runInContext("var bytes = (s) => Uint8Array.from(s, (c) => c.charCodeAt(0));", realm);
    const foreign = vm.runInContext("bytes(text)", realm) as Uint8Array;
    expect(foreign instanceof Uint8Array).toBe(false); // what the check used to rely on
    await expect(verifyWebhook(secret, headers(goSignature), foreign, { now })).resolves.toEqual(want);
    const buffer = vm.runInContext("bytes(text).buffer", realm) as ArrayBuffer;
    expect(buffer instanceof ArrayBuffer).toBe(false);
    await expect(verifyWebhook(secret, headers(goSignature), buffer, { now })).resolves.toEqual(want);
    // A view of part of a buffer: its own bytes only.
    const part = vm.runInContext("new Uint8Array(bytes('xx' + text + 'yy').buffer, 2, text.length)", realm) as Uint8Array;
    await expect(verifyWebhook(secret, headers(goSignature), part, { now })).resolves.toEqual(want);
    // A parsed body from there is still refused.
    await expect(verifyWebhook(secret, headers(goSignature), vm.runInContext("({ test: 1 })", realm) as string, { now })).rejects.toThrow(/raw body/);
  });

  it("trims whitespace around the secret or public key, as Go's verifier", async () => {
    const want = { id, timestamp: ts };
    for (const [before, after] of [["", " "], [" ", ""], ["", "\n"], ["", "\r\n"], ["\t", "\t"], [" \n", "\n "]]) {
      await expect(verifyWebhook(before + secret + after, headers(goSignature), body, { now })).resolves.toEqual(want);
      await expect(verifyWebhook(before + publicKey + after, headers(goV1a), body, { now })).resolves.toEqual(want);
      expect(await signWebhook(before + secret + after, { id, timestamp: ts, body })).toBe(goSignature);
    }
    // Whitespace inside is still refused.
    await expect(verifyWebhook(secret.replace("_", "_ "), headers(goSignature), body, { now })).rejects.toThrow(TypeError);
  });

  it("throws a TypeError (not a verification error) for a bad secret", async () => {
    for (const bad of ["MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_not*base64", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaS", "whsec_c2hvcnQ="]) {
      await expect(verifyWebhook(bad, headers(goSignature), body, { now })).rejects.toThrow(TypeError);
    }
    // A signing key is told apart, as Go's NewVerifier tells it: the receiver wants the public key.
    const signing = "whsk_" + Buffer.alloc(64, 3).toString("base64");
    await expect(verifyWebhook(signing, headers(goV1a), body, { now })).rejects.toThrow(
      expect.objectContaining({ name: "TypeError", message: expect.stringContaining('a receiver verifies with its public key "whpk_"') }),
    );
  });
});

// The Go signer's v1a vector (sdk/webhook TestEd25519Vector): the spec's id,
// timestamp and body signed with ed25519, verified with the public key.
const publicKey = "whpk_ebVWLo/mVPlAeLES6KmLp5AfhTrmlb7X4OORC60ElmQ=";
const goV1a = "v1a,OVJuLC0iOuaBuQulpz9A/zDgvqV8z8miLUJk2j15ZMONwDNhOvPJ3rO4owAHFyjFq80+pUUjrNfTHAZs1RQnDw==";

describe("verifyWebhook with a public key (v1a, ed25519)", () => {
  it("accepts the Go signer's v1a signature, alone and beside a v1 one", async () => {
    const want = { id, timestamp: ts };
    await expect(verifyWebhook(publicKey, headers(goV1a), body, { now })).resolves.toEqual(want);
    await expect(verifyWebhook(publicKey, headers(`${goSignature} ${goV1a}`), body, { now })).resolves.toEqual(want);
    // The secret checks the v1 entry of the same header.
    await expect(verifyWebhook(secret, headers(`${goSignature} ${goV1a}`), body, { now })).resolves.toEqual(want);
  });

  it("refuses a changed body, a v1 signature alone, another key", async () => {
    expect(await reason(verifyWebhook(publicKey, headers(goV1a), body + " ", { now }))).toBe("bad_signature");
    expect(await reason(verifyWebhook(publicKey, headers(goSignature), body, { now }))).toBe("bad_signature");
    const other = "whpk_" + Buffer.alloc(32, 7).toString("base64");
    expect(await reason(verifyWebhook(other, headers(goV1a), body, { now }))).toBe("bad_signature");
  });

  it("throws a TypeError for a malformed public key", async () => {
    await expect(verifyWebhook("whpk_AAAA", headers(goV1a), body, { now })).rejects.toThrow(/32/);
  });
});

describe("standardwebhooks cross-check", () => {
  const wh = new Webhook(secret);

  it("our signature verifies with standardwebhooks", async () => {
    const t = Math.floor(Date.now() / 1000);
    const sig = await signWebhook(secret, { id: "msg_1", timestamp: t, body: '{"a":1}' });
    expect(wh.verify('{"a":1}', { "webhook-id": "msg_1", "webhook-timestamp": String(t), "webhook-signature": sig })).toEqual({ a: 1 });
    // A rotation header (new secret first, then the previous) verifies
    // there with either secret.
    const both = `${sig} ${await signWebhook(previous, { id: "msg_1", timestamp: t, body: '{"a":1}' })}`;
    const h = { "webhook-id": "msg_1", "webhook-timestamp": String(t), "webhook-signature": both };
    expect(wh.verify('{"a":1}', h)).toEqual({ a: 1 });
    expect(new Webhook(previous).verify('{"a":1}', h)).toEqual({ a: 1 });
    expect(() => wh.verify('{"a":2}', h)).toThrow();
  });

  it("a both-schemes header (v1 then v1a) verifies with standardwebhooks, which checks v1 only", async () => {
    const t = Math.floor(Date.now() / 1000);
    const sig = await signWebhook(secret, { id: "msg_3", timestamp: t, body: '{"a":3}' });
    const h = { "webhook-id": "msg_3", "webhook-timestamp": String(t), "webhook-signature": `${sig} ${goV1a}` };
    expect(wh.verify('{"a":3}', h)).toEqual({ a: 3 });
    // standardwebhooks 1.1.1 has no v1a: a v1a-only header is not for it.
    expect(() => wh.verify('{"a":3}', { ...h, "webhook-signature": goV1a })).toThrow();
  });

  it("standardwebhooks' signatures verify with verifyWebhook", async () => {
    const t = new Date();
    const payload = '{"order":{"id":42,"note":"ünïcødé"}}';
    const sig = wh.sign("msg_2", t, payload);
    const h = { "webhook-id": "msg_2", "webhook-timestamp": String(Math.floor(t.getTime() / 1000)), "webhook-signature": sig };
    await expect(verifyWebhook(secret, h, payload)).resolves.toEqual({ id: "msg_2", timestamp: Math.floor(t.getTime() / 1000) });
    // The spec vector, signed by standardwebhooks, is the Go signature.
    expect(wh.sign(id, now, body)).toBe(goSignature);
    await expect(verifyWebhook(secret, headers(wh.sign(id, now, body)), body, { now })).resolves.toBeTruthy();
    expect(await reason(verifyWebhook(secret, h, payload + "x"))).toBe("bad_signature");
  });
});

// receiveRaw sends one request with exactly these header lines to a Node
// http server on 127.0.0.1 and resolves what the server was handed:
// req.headers (repeated lines joined) and req.headersDistinct (arrays).
async function receiveRaw(lines: string[], body: string): Promise<{ headers: http.IncomingHttpHeaders; distinct: NodeJS.Dict<string[]>; body: Buffer }> {
  let resolve!: (v: { headers: http.IncomingHttpHeaders; distinct: NodeJS.Dict<string[]>; body: Buffer }) => void;
  const got = new Promise<{ headers: http.IncomingHttpHeaders; distinct: NodeJS.Dict<string[]>; body: Buffer }>((r) => (resolve = r));
  const srv = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      resolve({ headers: req.headers, distinct: req.headersDistinct, body: Buffer.concat(chunks) });
      res.writeHead(204, { connection: "close" }).end();
    });
  });
  srv.listen(0, "127.0.0.1");
  await once(srv, "listening");
  const { port } = srv.address() as net.AddressInfo;
  try {
    const sock = net.connect(port, "127.0.0.1");
    await once(sock, "connect");
    const raw = ["POST /hook HTTP/1.1", "host: 127.0.0.1", "connection: close", ...lines, `content-length: ${Buffer.byteLength(body)}`, "", body].join("\r\n");
    sock.end(raw);
    const r = await got;
    sock.destroy();
    return r;
  } finally {
    srv.close();
  }
}
