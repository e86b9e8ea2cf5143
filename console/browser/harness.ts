// Real processes for the browser tests: rivora dev and rivoractl built from
// this repository, partner HTTP servers on 127.0.0.1, Chromium. No mocks,
// and no fixed sleeps: every wait polls a condition until a deadline. The
// dev server, the partner and the poll loop are the shared TypeScript test
// kit's (testkit/ts); what is only the console's is here.
import { execFile } from "node:child_process";
import { once } from "node:events";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { join, resolve } from "node:path";
import { promisify } from "node:util";
import type { Page } from "playwright-core";
import { rpc, type Dev } from "../../testkit/ts/index.js";

const run = promisify(execFile);
export const repoRoot = resolve(import.meta.dirname, "../..");

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

/** Chromium as the browser tests use it: Debian's, or CHROMIUM. */
export const chromiumPath = process.env.CHROMIUM ?? "/usr/bin/chromium";

/** Signs in with token and waits until the console names the token. */
export async function signIn(page: Page, dev: { url: string }, token: string, name: string): Promise<void> {
  await page.goto(`${dev.url}/console/`);
  await page.getByLabel("Token").fill(token);
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.getByTestId("who").getByText(name).waitFor();
}

/** Creates an API token as the admin; customers scope a customer (or publisher) token. */
export async function createToken(dev: Dev, name: string, role: "ROLE_OPERATOR" | "ROLE_VIEWER" | "ROLE_CUSTOMER" | "ROLE_PUBLISHER", customers: string[] = []): Promise<string> {
  const r = await rpc<{ token: string }>(dev, dev.token, "rivora.v1.TokenService/CreateToken", { name, role, customers });
  return r.token;
}

/**
 * repeatedButtonNames lists the accessible names (aria-label, else the
 * text) more than one button of the page has: such a name does not say
 * what its button acts on (ten "Pause" in a table).
 */
export async function repeatedButtonNames(page: Page): Promise<string[]> {
  return page.evaluate(() => {
    const seen = new Map<string, number>();
    for (const b of document.querySelectorAll("button")) {
      const name = (b.getAttribute("aria-label") ?? b.textContent ?? "").trim();
      seen.set(name, (seen.get(name) ?? 0) + 1);
    }
    return [...seen].filter(([, n]) => n > 1).map(([name]) => name);
  });
}

/**
 * repeatedFieldNames lists the accessible names (aria-label, else the
 * text of its label) more than one input, select or textarea of the page
 * has: three fields named "Reason" do not say which action each is for.
 */
export async function repeatedFieldNames(page: Page): Promise<string[]> {
  return page.evaluate(() => {
    const seen = new Map<string, number>();
    for (const f of document.querySelectorAll<HTMLInputElement | HTMLSelectElement | HTMLTextAreaElement>("input, select, textarea")) {
      if (f instanceof HTMLInputElement && f.type === "hidden") continue;
      const name = (f.getAttribute("aria-label") ?? f.labels?.[0]?.textContent ?? "").trim();
      seen.set(name, (seen.get(name) ?? 0) + 1);
    }
    return [...seen].filter(([, n]) => n > 1).map(([name]) => name);
  });
}

/** redrawn waits until what selector matches now (its first match) is replaced by a refresh. */
export async function redrawn(page: Page, selector: string, timeoutMs = 30_000): Promise<void> {
  const el = await page.locator(selector).first().elementHandle();
  if (!el) throw new Error(`redrawn: nothing matches ${selector}`);
  await page.waitForFunction((e) => !e.isConnected, el, { timeout: timeoutMs });
}

/** A Gate holds the calls it matches at a SlowProxy until released. */
export interface Gate {
  /** held counts the calls the gate has held so far. */
  held(): number;
  /** release lets every held call (and every later one) through. */
  release(): void;
}

/**
 * SlowProxy is a real HTTP proxy on 127.0.0.1 in front of a server: the
 * browser loads the console from it, and a gate holds the calls it
 * names until the test releases them (a slow network, with nothing in the
 * page mocked). A call whose server does not answer is cut, as a refused
 * connection is.
 */
export interface SlowProxy {
  url: string;
  /** hold holds every call whose path matches, until the gate is released. */
  hold(matches: (path: string) => boolean): Gate;
  close(): Promise<void>;
}

export async function startProxy(target: string): Promise<SlowProxy> {
  const gates: { matches: (path: string) => boolean; open: Promise<void>; count: number }[] = [];
  const up = new URL(target);
  const srv = http.createServer((req, res) => {
    const forward = (): void => {
      const out = http.request({ host: up.hostname, port: up.port, method: req.method, path: req.url, headers: req.headers }, (answer) => {
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.pipe(res);
      });
      out.on("error", () => res.destroy());
      req.pipe(out);
    };
    const gate = gates.find((g) => g.matches(req.url ?? ""));
    if (!gate) return forward();
    gate.count++;
    void gate.open.then(forward);
  });
  srv.listen(0, "127.0.0.1");
  await once(srv, "listening");
  return {
    url: `http://127.0.0.1:${(srv.address() as AddressInfo).port}`,
    hold(matches) {
      let release!: () => void;
      const g = { matches, open: new Promise<void>((r) => (release = r)), count: 0 };
      gates.push(g);
      return {
        held: () => g.count,
        release: () => {
          const i = gates.indexOf(g);
          if (i >= 0) gates.splice(i, 1);
          release();
        },
      };
    },
    async close() {
      srv.closeAllConnections();
      srv.close();
      await once(srv, "close");
    },
  };
}
