// Test helpers: real processes and real HTTP servers on 127.0.0.1, polling
// with deadlines rather than sleeping.
import { spawn, type ChildProcess } from "node:child_process";
import { once } from "node:events";
import { readFile } from "node:fs/promises";
import http from "node:http";
import net from "node:net";
import path from "node:path";
import { createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-web";
import { AdminService } from "../src/gen/rivora/v1/admin_pb.js";

/** eventually polls check until it returns a value other than undefined. */
export async function eventually<T>(what: string, check: () => T | undefined | Promise<T | undefined>, timeoutMs = 60_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (let wait = 10; ; wait = Math.min(wait * 2, 250)) {
    try {
      const v = await check();
      if (v !== undefined) return v;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline) {
      throw new Error(`timed out after ${timeoutMs}ms waiting for ${what}${last ? `; last error: ${String(last)}` : ""}`);
    }
    await new Promise((r) => setTimeout(r, wait));
  }
}

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

export interface Received {
  method: string;
  url: string;
  headers: http.IncomingHttpHeaders;
  body: Buffer;
}

/** Server is a real HTTP server on 127.0.0.1 that records every request. */
export interface Server {
  url: string;
  received: Received[];
  close(): Promise<void>;
}

/** startServer answers every request with answer (default: 200, empty). */
export async function startServer(
  answer: (req: Received, res: http.ServerResponse) => void = (_, res) => res.end(),
): Promise<Server> {
  const received: Received[] = [];
  const srv = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const r = { method: req.method ?? "", url: req.url ?? "", headers: req.headers, body: Buffer.concat(chunks) };
      received.push(r);
      answer(r, res);
    });
  });
  srv.listen(0, "127.0.0.1");
  await once(srv, "listening");
  const port = (srv.address() as net.AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}`,
    received,
    close: async () => {
      srv.closeAllConnections();
      srv.close();
      await once(srv, "close");
    },
  };
}

const children = new Set<ChildProcess>();
process.on("exit", () => {
  for (const c of children) c.kill("SIGKILL");
});

/** Dev is a real `rivora dev` process. */
export class Dev {
  readonly url: string;
  #child: ChildProcess | undefined;
  #log = "";

  constructor(
    readonly bin: string,
    readonly dataDir: string,
    readonly port: number,
  ) {
    this.url = `http://127.0.0.1:${port}`;
  }

  /** start runs `rivora dev` and waits for /healthz to answer 200. */
  async start(): Promise<void> {
    const child = spawn(this.bin, ["dev", "--listen", `127.0.0.1:${this.port}`, "--data-dir", this.dataDir], {
      stdio: ["ignore", "pipe", "pipe"],
    });
    children.add(child);
    this.#child = child;
    const keep = (c: Buffer) => {
      this.#log = (this.#log + c.toString()).slice(-20_000);
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
      return res.status === 200 ? true : undefined;
    }, 90_000).catch((err: unknown) => {
      if (exited) throw err;
      throw new Error(`${String(err)}\nlog:\n${this.#log}`);
    });
  }

  /** stop ends the process (SIGTERM, then SIGKILL after 20 s) and waits for it. */
  async stop(): Promise<void> {
    const child = this.#child;
    this.#child = undefined;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const exit = once(child, "exit");
    child.kill("SIGTERM");
    const t = setTimeout(() => child.kill("SIGKILL"), 20_000);
    await exit;
    clearTimeout(t);
  }

  get log(): string {
    return this.#log;
  }

  async adminToken(): Promise<string> {
    return (await readFile(path.join(this.dataDir, "admin.token"), "utf8")).trim();
  }

  /** createDestination registers a destination and returns its secret. */
  async createDestination(id: string, url: string): Promise<string> {
    const token = await this.adminToken();
    const admin = createClient(
      AdminService,
      createConnectTransport({
        baseUrl: this.url,
        interceptors: [(next) => (req) => (req.header.set("Authorization", `Bearer ${token}`), next(req))],
      }),
    );
    const res = await admin.createDestination({ id, url, author: "sdk-ts-test" });
    const secret = res.destination?.secret;
    if (!secret) throw new Error("CreateDestination answered no secret");
    return secret;
  }
}
