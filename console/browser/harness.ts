// Real processes for the browser tests: rivora dev and rivoractl built from
// this repository, partner HTTP servers on 127.0.0.1, Chromium. No mocks,
// and no fixed sleeps: every wait polls a condition until a deadline.
import { execFile, spawn, type ChildProcess } from "node:child_process";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { createServer as createHttpServer, type IncomingMessage, type Server } from "node:http";
import { createServer as createNetServer } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { promisify } from "node:util";

const run = promisify(execFile);
export const repoRoot = resolve(import.meta.dirname, "../..");

/** waitFor polls cond until it returns a truthy value or the deadline passes. */
export async function waitFor<T>(what: string, cond: () => Promise<T | undefined | false> | T | undefined | false, timeoutMs = 60_000, everyMs = 200): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const v = await cond();
      if (v) return v;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${last ? `: ${String(last)}` : ""}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

export async function freePort(): Promise<number> {
  return new Promise((ok, fail) => {
    const s = createNetServer();
    s.once("error", fail);
    s.listen(0, "127.0.0.1", () => {
      const a = s.address();
      s.close(() => (typeof a === "object" && a ? ok(a.port) : fail(new Error("no port"))));
    });
  });
}

/** Builds rivora and rivoractl (or uses RIVORA_BIN_DIR, already built). */
export async function buildBinaries(dir: string): Promise<{ rivora: string; rivoractl: string }> {
  const pre = process.env.RIVORA_BIN_DIR;
  if (pre) return { rivora: join(pre, "rivora"), rivoractl: join(pre, "rivoractl") };
  const rivora = join(dir, "rivora");
  const rivoractl = join(dir, "rivoractl");
  await run("go", ["build", "-o", rivora, "./cmd/rivora"], { cwd: repoRoot });
  await run("go", ["build", "-o", rivoractl, "./cmd/rivoractl"], { cwd: repoRoot });
  return { rivora, rivoractl };
}

export interface Dev {
  url: string;
  dataDir: string;
  adminToken: string;
  log: () => string;
  stop: () => Promise<void>;
}

/** Starts `rivora dev` on a free port and waits for GET /healthz 200. */
export async function startDev(rivora: string, extra: string[] = []): Promise<Dev> {
  const dataDir = await mkdtemp(join(tmpdir(), "rivora-console-"));
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const proc: ChildProcess = spawn(rivora, ["dev", "--listen", `127.0.0.1:${port}`, "--data-dir", dataDir, ...extra], { stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  const keep = (b: Buffer): void => {
    out = (out + b.toString()).slice(-64_000);
  };
  proc.stdout!.on("data", keep);
  proc.stderr!.on("data", keep);
  let exited = false;
  proc.on("exit", () => (exited = true));
  await waitFor("rivora dev /healthz 200", async () => {
    if (exited) throw new Error(`rivora dev exited:\n${out}`);
    const r = await fetch(`${url}/healthz`);
    return r.status === 200;
  }, 90_000);
  const adminToken = (await readFile(join(dataDir, "admin.token"), "utf8")).trim();
  return {
    url,
    dataDir,
    adminToken,
    log: () => out,
    stop: async () => {
      if (!exited) {
        const gone = new Promise((r) => proc.once("exit", r));
        proc.kill("SIGTERM");
        await gone;
      }
      await rm(dataDir, { recursive: true, force: true });
    },
  };
}

/** rivoractl against the dev server, with the token in RIVORA_TOKEN. */
export async function rivoractl(bin: string, dev: Dev, token: string, ...args: string[]): Promise<string> {
  try {
    const { stdout } = await run(bin, ["--server", dev.url, ...args], { env: { ...process.env, RIVORA_TOKEN: token } });
    return stdout;
  } catch (err) {
    const e = err as { stderr?: string; message: string };
    throw new Error(`rivoractl ${args.join(" ")}: ${e.stderr || e.message}`);
  }
}

/** One Connect JSON call. */
export async function rpc<T = unknown>(dev: Dev, token: string, method: string, body: unknown): Promise<T> {
  const r = await fetch(`${dev.url}/${method}`, {
    method: "POST",
    headers: { "Content-Type": "application/json", Authorization: `Bearer ${token}` },
    body: JSON.stringify(body),
  });
  const text = await r.text();
  if (!r.ok) throw new Error(`${method}: ${r.status} ${text}`);
  return JSON.parse(text) as T;
}

export interface Received {
  id: string;
  lane: string;
  replay: boolean;
  status: number;
  body: string;
}

/** A partner endpoint answering `status` (changeable), recording every request. */
export interface Partner {
  url: string;
  status: number;
  received: Received[];
  close: () => Promise<void>;
}

export async function startPartner(status: number): Promise<Partner> {
  const p: Partner = { url: "", status, received: [], close: async () => {} };
  const srv: Server = createHttpServer((req: IncomingMessage, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      p.received.push({
        id: String(req.headers["webhook-id"] ?? ""),
        lane: String(req.headers["rivora-lane"] ?? ""),
        replay: req.headers["rivora-replay"] !== undefined,
        status: p.status,
        body: Buffer.concat(chunks).toString(),
      });
      res.writeHead(p.status, { "Content-Type": "text/plain" });
      res.end(p.status < 300 ? "ok" : "unavailable");
    });
  });
  await new Promise<void>((ok) => srv.listen(0, "127.0.0.1", ok));
  const a = srv.address();
  p.url = `http://127.0.0.1:${typeof a === "object" && a ? a.port : 0}/hook`;
  p.close = () => new Promise((ok) => (srv.closeAllConnections(), srv.close(() => ok())));
  return p;
}
