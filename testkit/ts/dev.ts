// A real `rivora dev` process on 127.0.0.1 for the TypeScript tests, and
// one Connect JSON call to it. No mocks: the binary is built from this
// repository by the caller (go build ./cmd/rivora).
import { spawn, type ChildProcess } from "node:child_process";
import { once } from "node:events";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import net from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { eventually } from "./poll.js";

/** freePort returns a port on 127.0.0.1 that was free a moment ago. */
export async function freePort(): Promise<number> {
  const srv = net.createServer();
  srv.listen(0, "127.0.0.1");
  await once(srv, "listening");
  const port = (srv.address() as net.AddressInfo).port;
  srv.close();
  await once(srv, "close");
  return port;
}

const children = new Set<ChildProcess>();
process.on("exit", () => {
  for (const c of children) c.kill("SIGKILL");
});

/** Dev is a real `rivora dev` process; start and stop it (again) at will. */
export class Dev {
  readonly url: string;
  /** The bootstrap admin token, read once started. */
  token = "";
  #child: ChildProcess | undefined;
  #log = "";
  #ownsDir = false;

  constructor(
    readonly bin: string,
    readonly dataDir: string,
    readonly port: number,
    readonly args: string[] = [],
  ) {
    this.url = `http://127.0.0.1:${port}`;
  }

  /** start runs `rivora dev` and waits for /healthz to answer 200. */
  async start(): Promise<void> {
    const child = spawn(this.bin, ["dev", "--listen", `127.0.0.1:${this.port}`, "--data-dir", this.dataDir, ...this.args], {
      stdio: ["ignore", "pipe", "pipe"],
    });
    children.add(child);
    this.#child = child;
    const keep = (c: Buffer): void => {
      this.#log = (this.#log + c.toString()).slice(-64_000);
    };
    child.stdout?.on("data", keep);
    child.stderr?.on("data", keep);
    let exited: string | undefined;
    child.on("exit", (code, sig) => {
      children.delete(child);
      exited = `rivora dev exited (${code ?? sig})`;
    });
    await eventually(`rivora dev on ${this.url}/healthz`, async () => {
      if (exited) throw new Error(`${exited}:\n${this.#log}`);
      const res = await fetch(`${this.url}/healthz`);
      await res.arrayBuffer();
      return res.status === 200;
    }, 90_000).catch((err: unknown) => {
      if (exited) throw err;
      throw new Error(`${String(err)}\nlog:\n${this.#log}`);
    });
    this.token = (await readFile(path.join(this.dataDir, "admin.token"), "utf8")).trim();
  }

  /**
   * stop ends the process (SIGTERM, then SIGKILL after 20 s) and waits for
   * it; a Dev made by startDev also removes its data directory.
   */
  async stop(): Promise<void> {
    const child = this.#child;
    this.#child = undefined;
    if (child && child.exitCode === null && child.signalCode === null) {
      const exit = once(child, "exit");
      child.kill("SIGTERM");
      const t = setTimeout(() => child.kill("SIGKILL"), 20_000);
      await exit;
      clearTimeout(t);
    }
    if (this.#ownsDir) await rm(this.dataDir, { recursive: true, force: true });
  }

  /** The process's output (its last 64 kB). */
  get log(): string {
    return this.#log;
  }

  /** createDestination registers a destination as the admin and returns its secret. */
  async createDestination(id: string, url: string, author = "test"): Promise<string> {
    const res = await rpc<{ destination?: { secret?: string } }>(this, this.token, "rivora.v1.AdminService/CreateDestination", { id, url, author });
    const secret = res.destination?.secret;
    if (!secret) throw new Error("CreateDestination answered no secret");
    return secret;
  }

  /** startDev runs a Dev on a free port in a fresh temp directory (removed by stop). */
  static async startDev(bin: string, args: string[] = []): Promise<Dev> {
    const dataDir = await mkdtemp(path.join(tmpdir(), "rivora-dev-"));
    const dev = new Dev(bin, dataDir, await freePort(), args);
    dev.#ownsDir = true;
    await dev.start();
    return dev;
  }
}

/** startDev is Dev.startDev. */
export const startDev = (bin: string, args: string[] = []): Promise<Dev> => Dev.startDev(bin, args);

/** rpc makes one Connect JSON call to dev with token, and returns the answer. */
export async function rpc<T = unknown>(dev: { url: string }, token: string, method: string, body: unknown): Promise<T> {
  const r = await fetch(`${dev.url}/${method}`, {
    method: "POST",
    headers: { "Content-Type": "application/json", Authorization: `Bearer ${token}` },
    body: JSON.stringify(body),
  });
  const text = await r.text();
  if (!r.ok) throw new Error(`${method}: ${r.status} ${text}`);
  return JSON.parse(text) as T;
}
