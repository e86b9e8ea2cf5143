// The console's browser scenario (issue 16) in real Chromium against a real
// `rivora dev`, real partner servers and the real rivoractl: an operator
// watches a failing destination degrade, pauses it, sets an override with a
// reason, replays its dead letters in lane order, and a viewer sees no
// action. Screenshots of each page go to console/test-artifacts/.
import { execFile } from "node:child_process";
import { createHmac, randomBytes } from "node:crypto";
import { mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { promisify } from "node:util";
import { chromium, type BrowserContext, type Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { eventually, rpc, startDev, startPartner, type Dev, type Partner } from "../../testkit/ts/index.js";
import { buildBinaries, createToken, redrawn, repeatedButtonNames, repeatedFieldNames, rivoractl } from "./harness.js";

const artifacts = resolve(import.meta.dirname, "../test-artifacts");
const chromiumPath = process.env.CHROMIUM ?? "/usr/bin/chromium";

let bins: { rivora: string; rivoractl: string };
let dev: Dev;
let noisy: Partner;
let quiet: Partner;
let ctx: BrowserContext;
let page: Page;
let profile: string;
let binDir: string;
const tokens: Record<"operator" | "viewer", { name: string; token: string }> = {
  operator: { name: "alice-oncall", token: "" },
  viewer: { name: "victor-viewer", token: "" },
};
const lanes = ["user-1", "user-2", "user-3"];
const perLane = 4;
const published = new Map<string, string[]>(); // lane → event ids in publish order
const pageErrors: string[] = [];
// The cell token rivora dev runs with, so the test can follow the control
// plane as an edge does (EdgeService).
const cellToken = randomBytes(32).toString("hex");

// registerEdge opens an edge's WatchEdge (Connect's streaming JSON
// envelope), which registers it, and closes it after the first message.
async function registerEdge(name: string): Promise<void> {
  const json = new TextEncoder().encode(JSON.stringify({ edgeName: name }));
  const body = new Uint8Array(5 + json.length);
  new DataView(body.buffer).setUint32(1, json.length);
  body.set(json, 5);
  const abort = new AbortController();
  const res = await fetch(`${dev.url}/rivora.v1.EdgeService/WatchEdge`, {
    method: "POST",
    headers: { "Content-Type": "application/connect+json", Authorization: `Bearer ${cellToken}` },
    body,
    signal: abort.signal,
  });
  if (!res.ok || !res.body) throw new Error(`WatchEdge ${name}: ${res.status} ${await res.text()}`);
  await res.body.getReader().read();
  abort.abort();
}

async function shot(name: string): Promise<void> {
  await page.screenshot({ path: join(artifacts, name), fullPage: true });
}

async function signIn(who: "operator" | "viewer"): Promise<void> {
  await page.goto(`${dev.url}/console/`);
  await page.getByLabel("Token").fill(tokens[who].token);
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.getByTestId("who").getByText(tokens[who].name).waitFor();
}

// signInWith signs out whoever is signed in, then signs in with token.
async function signInWith(token: string): Promise<void> {
  await page.goto(`${dev.url}/console/`);
  await page.getByLabel("Token").or(page.getByRole("button", { name: "Sign out" })).waitFor();
  if (await page.getByRole("button", { name: "Sign out" }).isVisible()) await page.getByRole("button", { name: "Sign out" }).click();
  await page.getByLabel("Token").fill(token);
  await page.getByRole("button", { name: "Sign in" }).click();
  try {
    await page.getByTestId("who").waitFor({ timeout: 10_000 });
  } catch (e) {
    throw new Error(`sign-in did not finish at ${page.url()}; the page says: ${await page.locator("body").innerText()}`, { cause: e });
  }
}

function row(id: string) {
  return page.locator(`tr[data-id="${id}"]`);
}

beforeAll(async () => {
  await mkdir(artifacts, { recursive: true });
  binDir = await mkdtemp(join(tmpdir(), "rivora-console-bin-"));
  bins = await buildBinaries(binDir);
  const cellTokenFile = join(binDir, "cell.token");
  await writeFile(cellTokenFile, cellToken, { mode: 0o600 });
  dev = await startDev(bins.rivora, ["--cell-token-file", cellTokenFile]);
  noisy = await startPartner({ status: 503 });
  quiet = await startPartner({ status: 200 });
  await rivoractl(bins.rivoractl, dev, dev.token, "destinations", "create", "noisy", "--url", noisy.url, "--max-attempts", "2", "--window", "10s");
  await rivoractl(bins.rivoractl, dev, dev.token, "destinations", "create", "quiet", "--url", quiet.url);
  for (const [role, t] of Object.entries(tokens)) {
    const out = JSON.parse(await rivoractl(bins.rivoractl, dev, dev.token, "tokens", "create", "--name", t.name, "--role", role, "-o", "json")) as { token: string };
    t.token = out.token;
  }
  const events: { destinationId: string; customerId: string; laneKey: string; type: string; data: { lane: string; i: number } }[] = [];
  for (let i = 0; i < perLane; i++)
    for (const lane of lanes) events.push({ destinationId: "noisy", customerId: "acme", laneKey: lane, type: "order.created", data: { lane, i } });
  const res = await rpc<{ eventIds: string[] }>(dev, dev.token, "rivora.v1.IngestService/PublishBatch", { events });
  res.eventIds.forEach((id, k) => {
    const lane = events[k]!.laneKey;
    published.set(lane, [...(published.get(lane) ?? []), id]);
  });
  await rpc(dev, dev.token, "rivora.v1.IngestService/Publish", { destinationId: "quiet", customerId: "acme", laneKey: "u", type: "t", data: { ok: true } });

  profile = await mkdtemp(join(tmpdir(), "rivora-console-chromium-"));
  ctx = await chromium.launchPersistentContext(profile, { executablePath: chromiumPath, headless: true, viewport: { width: 1280, height: 800 } });
  page = ctx.pages()[0] ?? (await ctx.newPage());
  page.on("pageerror", (e) => pageErrors.push(String(e)));
  page.on("console", (m) => {
    if (m.type() === "error") pageErrors.push(m.text());
  });
});

afterAll(async () => {
  await ctx?.close();
  await noisy?.close();
  await quiet?.close();
  await dev?.stop();
  if (profile) await rm(profile, { recursive: true, force: true });
  if (binDir) await rm(binDir, { recursive: true, force: true });
});

describe("console in Chromium against rivora dev", () => {
  it("signs in and shows the failing destination degrade on the Destinations page", async () => {
    await signIn("operator");
    await page.getByRole("heading", { name: "Destinations" }).waitFor();
    await eventually("noisy degraded or parked", async () => ["degraded", "parked"].includes((await row("noisy").getAttribute("data-state")) ?? ""), 90_000);
    // The noisiest destination is marked and sorted first.
    await eventually("noisy marked noisiest", async () => (await row("noisy").getAttribute("class")) === "noisiest", 30_000);
    expect(await page.locator("tbody tr").first().getAttribute("data-id")).toBe("noisy");
    await expect(page.locator("table caption").first().textContent()).resolves.toContain("destinations");
    await shot("destinations.png");
    // Sorting from the keyboard keeps the keyboard on the header pressed
    // (the table is drawn anew), and again after a refresh.
    await page.getByRole("button", { name: /^Pending/ }).focus();
    await page.keyboard.press("Enter");
    await page.locator('th[aria-sort="descending"]').getByText("Pending").waitFor();
    const focused = (): Promise<string> => page.evaluate(() => `${document.activeElement?.tagName} ${document.activeElement?.closest("th")?.getAttribute("aria-sort")} ${document.activeElement?.textContent}`);
    expect(await focused()).toBe("BUTTON descending Pending ▼");
    await page.keyboard.press("Enter");
    expect(await focused()).toBe("BUTTON ascending Pending ▲");
    await redrawn(page, "th[aria-sort=ascending] button", 10_000);
    expect(await focused()).toBe("BUTTON ascending Pending ▲");
    await page.getByRole("button", { name: "Sort by noise" }).click();
    await page.locator('th[aria-sort="none"] button[data-key="sort-pending"]').waitFor();
    await page.setViewportSize({ width: 390, height: 844 });
    await shot("destinations-narrow.png");
    await page.setViewportSize({ width: 1280, height: 800 });
  });

  it("its events run out of attempts or window and become dead letters", async () => {
    const total = lanes.length * perLane;
    await eventually(`${total} dead letters`, async () => {
      const r = await rpc<{ deadLetters?: unknown[] }>(dev, dev.token, "rivora.v1.ArchiveService/ListDeadLetters", { filter: { destinationId: "noisy" } });
      return (r.deadLetters?.length ?? 0) === total;
    }, { timeoutMs: 120_000, everyMs: 500 });
  });

  it("pauses it from the UI and rivoractl agrees", async () => {
    await page.locator('a[href="#/destination/noisy"]').first().click();
    await page.getByRole("heading", { name: "Destination noisy" }).waitFor();
    await page.locator("svg.chart").waitFor();
    // The health transitions with their causes: healthy → degraded, from the 503s.
    await page.getByTestId("transitions").locator("tbody tr").first().waitFor();
    expect(await page.getByTestId("transitions").textContent()).toMatch(/healthy[\s\S]*degraded[\s\S]*503/);
    // Each field says which action it is for: three were named "Reason".
    expect(await repeatedFieldNames(page)).toEqual([]);
    await page.getByLabel("Reason for pausing").fill("partner down, incident 42");
    await page.getByRole("button", { name: "Pause", exact: true }).click();
    await page.getByTestId("state").getByText("paused").waitFor({ timeout: 10_000 });
    const got = JSON.parse(await rivoractl(bins.rivoractl, dev, dev.token, "destinations", "get", "noisy", "-o", "json")) as { destination: { paused?: boolean; pauseReason?: string } };
    expect(got.destination.paused).toBe(true);
    expect(got.destination.pauseReason).toBe("partner down, incident 42");
    const health = await rivoractl(bins.rivoractl, dev, dev.token, "destinations", "health", "noisy", "-o", "json");
    expect(JSON.parse(health)).toMatchObject([{ destinationId: "noisy", paused: true }]);
  });

  it("sets an override with a reason after a dry run, audited under the operator's name", async () => {
    await page.locator('input[name="rate"]').fill("5");
    await page.locator('input[name="burst"]').fill("5");
    await page.locator('input[name="timeout"]').fill("15s");
    await page.locator('input[name="ttl"]').fill("30m");
    await page.locator('input[name="limit-reason"]').fill("partner asked for 5/s");
    const before = JSON.parse(await rivoractl(bins.rivoractl, dev, dev.token, "audit", "-o", "json")) as unknown[];
    await page.getByRole("button", { name: "Check" }).click();
    await page.getByTestId("limit-preview").getByText("Nothing changed yet").waitFor();
    // noisy's events are dead letters by now: nothing of it is pending.
    expect(await page.getByTestId("limit-preview").textContent()).toMatch(/nothing is pending|pending events? (drains? in|do(es)? not drain now: the destination is paused)/);
    // The dry run changed nothing.
    expect(JSON.parse(await rivoractl(bins.rivoractl, dev, dev.token, "audit", "-o", "json"))).toHaveLength(before.length);
    await page.getByRole("button", { name: "Set limit" }).click();
    await page.locator('tr[data-limit="rate_per_second"]').getByText("override").waitFor({ timeout: 10_000 });
    await page.locator('tr[data-limit="burst"]').getByText("override").waitFor();
    expect(await page.locator('tr[data-limit="timeout"]').textContent()).toMatch(/15s[\s\S]*override/);
    await shot("destination.png");
  });

  it("replays the dead letters from the UI and the partner gets them in lane order", async () => {
    const total = lanes.length * perLane;
    noisy.status = 200;
    await page.getByRole("button", { name: "Resume" }).click();
    await page.getByTestId("state").getByText(/healthy|degraded|parked/).waitFor({ timeout: 10_000 });

    await page.getByRole("link", { name: "Dead letters", exact: true }).click();
    // The page opens on what there is: noisy's dead letters, counted.
    const stats = page.getByTestId("dead-letter-stats").locator('tr[data-destination="noisy"]');
    await stats.waitFor();
    expect(await stats.locator("td.num").first().textContent()).toBe(`${total}`);
    expect(await stats.textContent()).toContain("acme");
    await stats.getByRole("button", { name: "Show" }).click();
    await page.getByTestId("dead-letters").getByText(`${total} dead letters`).waitFor();
    await page.getByTestId("dead-letters").locator("button.link").last().click();
    await page.getByTestId("dead-letter").getByText("Payload").waitFor();
    // The dead letter opens below the list: it is brought into view, and
    // the keyboard moves to it.
    const detailTop = await page.getByTestId("dead-letter").evaluate((e) => e.getBoundingClientRect().top);
    expect(detailTop).toBeGreaterThanOrEqual(0);
    expect(detailTop).toBeLessThan(800 / 2);
    expect(await page.evaluate(() => document.activeElement?.closest('[data-testid="dead-letter"]')?.tagName)).toBe("SECTION");
    // The page refreshes (counts and list) without taking what is typed,
    // the keyboard's place, the scroll or the open dead letter.
    const laneInput = page.locator('input[name="lane"]');
    await laneInput.fill("user-1");
    const scrolled = await page.evaluate(() => scrollY);
    await Promise.all([redrawn(page, '[data-testid="dead-letters"] table'), redrawn(page, '[data-testid="dead-letter-stats"] table')]);
    expect(await laneInput.inputValue()).toBe("user-1");
    expect(await page.evaluate(() => document.activeElement?.getAttribute("name"))).toBe("lane");
    expect(await page.evaluate(() => scrollY)).toBe(scrolled);
    expect(await page.getByTestId("dead-letter").getByText("Payload").count()).toBe(1);
    expect(await page.getByTestId("dead-letters").getByText(`${total} dead letters`).count()).toBe(1);
    await laneInput.fill("");
    await page.getByRole("button", { name: "Count" }).click();
    await page.getByTestId("replay-result").getByText(`${total} dead letters would be replayed`).waitFor();
    await page.getByRole("button", { name: "Replay" }).click();
    await page.getByTestId("replay-result").getByText(/^Done:/).waitFor({ timeout: 60_000 });
    expect(await page.getByTestId("replay-result").textContent()).toContain(`${total} replayed`);
    await shot("dead-letters.png");

    const replayed = await eventually("partner received every replay", () => {
      const got = noisy.received.filter((r) => r.replay && r.status === 200);
      return got.length >= total ? got : undefined;
    }, 60_000);
    // Lane order: each lane's replays arrive in publish order (the payload
    // carries the event's index in its lane).
    for (const lane of lanes) {
      const order = replayed.filter((r) => r.lane === lane).map((r) => (JSON.parse(r.text) as { i: number }).i);
      expect(order, `lane ${lane} replay order`).toEqual([...Array(perLane).keys()]);
    }
  });

  it("skips a lane's head and resends an event from the UI", async () => {
    await page.goto(`${dev.url}/console/#/destination/noisy`);
    // Enter in a form's field submits it (Pause here, Resend below).
    await page.locator('input[name="pause-reason"]').fill("hold lane user-9");
    await page.locator('input[name="pause-reason"]').press("Enter");
    await page.getByTestId("state").getByText("paused").waitFor({ timeout: 10_000 });
    const held = await rpc<{ eventIds: string[] }>(dev, dev.token, "rivora.v1.IngestService/PublishBatch", {
      events: [0, 1].map((i) => ({ destinationId: "noisy", customerId: "acme", laneKey: "user-9", type: "t", data: { lane: "user-9", i } })),
    });
    const laneRow = page.locator("tr", { hasText: "user-9" });
    await laneRow.getByText(held.eventIds[0]!).waitFor({ timeout: 15_000 });
    await page.locator('input[name="skip-reason"]').fill("poison event");
    // The button names its lane: every row has one.
    await page.getByRole("button", { name: "Skip head of lane user-9 (customer acme)", exact: true }).click();
    await page.getByText(`Skipped ${held.eventIds[0]}`).waitFor();
    await laneRow.getByText(held.eventIds[1]!).waitFor({ timeout: 10_000 });
    const dead = published.get("user-2")![0]!;
    await page.locator('input[name="resend-event"]').fill(dead);
    await page.locator('input[name="resend-reason"]').fill("customer asked");
    await page.locator('input[name="resend-reason"]').press("Enter");
    await page.locator(".actions .status.ok, .actions .status.error").getByText(/Resend failed|sent again/).waitFor();
    expect(await page.locator(".actions .status").first().textContent()).toBe(`Event ${dead} sent again.`);
    await page.getByRole("button", { name: "Resume" }).click();
    await page.getByTestId("state").getByText(/healthy|degraded|parked/).waitFor({ timeout: 10_000 });
  });

  it("shows a destination's lanes 10 at a time, and more on demand", async () => {
    await rivoractl(bins.rivoractl, dev, dev.token, "destinations", "create", "many", "--url", quiet.url);
    await rivoractl(bins.rivoractl, dev, dev.token, "destinations", "pause", "many", "--reason", "hold its lanes");
    await rpc(dev, dev.token, "rivora.v1.IngestService/PublishBatch", {
      events: [...Array(12).keys()].map((i) => ({ destinationId: "many", customerId: "acme", laneKey: `m-${i}`, type: "t", data: { i } })),
    });
    await page.goto(`${dev.url}/console/#/destination/many`);
    const laneRows = page.locator("tr[data-lane]");
    await page.locator("caption").getByText("Longest-waiting lanes (10 of 12)").waitFor({ timeout: 15_000 });
    expect(await laneRows.count()).toBe(10);
    expect(await page.getByRole("button", { name: "Show the first 10" }).isDisabled()).toBe(true);
    await page.getByRole("button", { name: "Show 10 more" }).click();
    await page.locator("caption").getByText("Longest-waiting lanes (12 of 12)").waitFor();
    expect(await laneRows.count()).toBe(12);
    expect(await page.getByRole("button", { name: "Show 10 more" }).isDisabled()).toBe(true);
    // The refresh keeps the longer list.
    await redrawn(page, "tr[data-lane]", 10_000);
    expect(await laneRows.count()).toBe(12);
    await page.getByRole("button", { name: "Show the first 10" }).click();
    await page.locator("caption").getByText("Longest-waiting lanes (10 of 12)").waitFor();
    expect(await repeatedButtonNames(page)).toEqual([]);
  });

  it("every UI action is in rivoractl audit under the operator's name", async () => {
    const audit = JSON.parse(await rivoractl(bins.rivoractl, dev, dev.token, "audit", "--destination", "noisy", "-o", "json")) as { author: string; action: string; reason?: string }[];
    const mine = audit.filter((a) => a.author === tokens.operator.name).map((a) => a.action);
    expect(mine).toEqual(expect.arrayContaining(["destination.pause", "limits.override", "destination.resume", "deadletters.replay", "lane.skip", "event.resend"]));
    expect(audit.find((a) => a.action === "limits.override")).toMatchObject({ author: tokens.operator.name, reason: "partner asked for 5/s" });
    await page.getByRole("link", { name: "Audit", exact: true }).click();
    await page.getByTestId("audit").getByText("limits.override").waitFor();
    expect(await page.getByTestId("audit").textContent()).toContain(tokens.operator.name);
    await shot("audit.png");
  });

  it("shows events and agents", async () => {
    const id = published.get("user-1")![0]!;
    await page.goto(`${dev.url}/console/#/events/${id}`);
    await page.getByTestId("event").getByText(`Event ${id}`).waitFor();
    await page.getByTestId("event").getByText("dead").first().waitFor();
    await page.getByLabel("Destination").fill("noisy");
    await page.getByLabel("Customer").fill("acme");
    await page.getByLabel("Lane").fill("user-1");
    await page.getByRole("button", { name: "List events" }).click();
    await page.getByTestId("lane-events").locator("tbody tr").first().waitFor();
    // Both refresh, and what is typed meanwhile stays (it is asked for
    // only when submitted), as do the keyboard's place and the event shown.
    await page.getByLabel("Lane").fill("user-2");
    await Promise.all([redrawn(page, '[data-testid="event"] dl', 10_000), redrawn(page, '[data-testid="lane-events"] table', 10_000)]);
    expect(await page.getByLabel("Lane").inputValue()).toBe("user-2");
    expect(await page.evaluate(() => document.activeElement?.getAttribute("name"))).toBe("lane");
    expect(await page.getByTestId("event").getByText(`Event ${id}`).count()).toBe(1);
    expect(await page.getByTestId("lane-events").locator("tbody tr td:nth-child(4)").allTextContents()).toEqual(expect.arrayContaining(["user-1"]));
    expect(await page.getByTestId("lane-events").locator("tbody tr td:nth-child(4)").allTextContents()).not.toContain("user-2");
    await shot("events.png");
    await registerEdge("lyon-edge");
    await rpc(dev, cellToken, "rivora.v1.EdgeService/ReportEdge", {
      edgeName: "lyon-edge",
      buffer: { cellConnected: true, bufferedEvents: "1234", bufferedBytes: String(3 * 2 ** 20), oldestBuffered: new Date(Date.now() - 90_000).toISOString(), forwardedTotal: "99" },
    });
    await page.getByRole("link", { name: "Agents", exact: true }).click();
    await page.getByTestId("agents").getByText("healthy").first().waitFor();
    const edge = page.getByTestId("edges").locator('tr[data-edge="lyon-edge"]');
    await edge.waitFor();
    const cells = await edge.locator("td").allTextContents();
    expect(cells[0]).toBe("lyon-edge");
    expect(cells[1]).toBe("yes");
    expect(cells.slice(4)).toEqual(["1234", "3.0 MiB", expect.stringMatching(/^1m 3\ds$/), "99"]);
    await shot("agents.png");
  });

  // Issue 29: ten tries of a held event no longer all read "1".
  it("numbers an event's tries and says which used one of its attempts", async () => {
    const id = published.get("user-1")![0]!;
    await page.goto(`${dev.url}/console/#/events/${id}`);
    const tries = page.getByTestId("event").locator("tbody tr[data-try]");
    await tries.first().waitFor();
    const numbers = await tries.evaluateAll((rows) => rows.map((r) => r.getAttribute("data-try")));
    expect(numbers.length).toBeGreaterThanOrEqual(2);
    expect(numbers).toEqual(numbers.map((_, i) => String(i + 1)));
    // noisy answered 503 to every lane until it was resumed and replayed:
    // none of its 503s used an attempt.
    const cells = await tries.evaluateAll((rows) => rows.map((r) => [...r.querySelectorAll("td")].map((td) => td.textContent ?? "")));
    const failed = cells.filter((c) => c[3] === "503");
    expect(failed.length).toBeGreaterThanOrEqual(2);
    for (const c of failed) expect(c[1]).toBe("not charged: destination down");
    expect(cells[1]![0]).toBe("try 2");
    await shot("event-tries.png");
  });

  it("draws a destination's rate chart from when it was created, not 15 minutes back", async () => {
    await page.goto(`${dev.url}/console/#/destination/quiet`);
    const chart = page.locator("svg.chart");
    await chart.waitFor();
    const span = (await chart.getAttribute("data-span")) ?? "";
    // quiet was created when this file started, minutes ago at most.
    expect(span).toMatch(/^(\d+s|\d+m( \d+s)?)$/);
    expect(span).not.toBe("15m");
    expect(await page.locator("figure.chart-box figcaption").textContent()).toContain("(since it was created)");
    const points = ((await chart.locator("polyline.line-delivered").getAttribute("points")) ?? "").trim().split(" ");
    expect(points.length).toBeLessThan(90);
    expect(await chart.locator("text.axis").filter({ hasText: `-${span}` }).count()).toBe(1);
    await shot("destination-young-chart.png");
  });

  // Issue 22: a malformed %-escape in the hash threw URIError out of the
  // router and the console stopped redrawing.
  it("a malformed address shows Bad address and the console keeps working", async () => {
    await page.goto(`${dev.url}/console/#/destinations/%E0%A4%A`);
    await page.getByRole("heading", { name: "Bad address" }).waitFor();
    expect(await page.getByTestId("bad-address").textContent()).toContain("%E0%A4%A");
    await page.evaluate(() => (location.hash = "#/%"));
    await page.getByTestId("bad-address").getByText("“#/%”", { exact: false }).waitFor();
    await shot("bad-address.png");
    await page.getByRole("link", { name: "Agents", exact: true }).click();
    await page.getByTestId("agents").getByText("healthy").first().waitFor();
    expect(await page.title()).toBe("Agents · Rivora console");
  });

  it("a viewer sees no action buttons", async () => {
    await page.getByRole("button", { name: "Sign out" }).click();
    await page.getByLabel("Token").waitFor();
    await signIn("viewer");
    await row("noisy").waitFor();
    await page.goto(`${dev.url}/console/#/destination/noisy`);
    await page.getByTestId("read-only").waitFor();
    await page.locator("svg.chart").waitFor();
    for (const name of ["Pause", "Resume", "Set limit", "Clear limit", "Check", "Set class", "Set weight", "Resend", "Skip head"])
      expect(await page.getByRole("button", { name: new RegExp(`^${name}( |$)`) }).count(), `viewer sees ${name}`).toBe(0);
    await shot("viewer-destination.png");
    await page.getByRole("link", { name: "Dead letters", exact: true }).click();
    await page.getByRole("button", { name: "Search" }).waitFor();
    expect(await page.getByRole("button", { name: "Replay" }).count()).toBe(0);
    expect(await page.getByRole("button", { name: "Count" }).count()).toBe(0);
    // An admin's page says it is not the viewer's, above the one it opens.
    await page.goto(`${dev.url}/console/#/tokens`);
    await page.getByText("The Tokens page is not open to a viewer's token").waitFor();
    // A publisher's token opens no console page, and is told so (every
    // page answered "permission denied").
    await signInWith(await createToken(dev, "pia-publisher", "ROLE_PUBLISHER", ["acme"]));
    await page.getByTestId("no-console").waitFor();
    await signInWith(tokens.viewer.token); // the tests below run as the viewer
  });

  it("polls one health snapshot per interval, and none while the tab is hidden", async () => {
    await page.getByRole("link", { name: "Destinations", exact: true }).click();
    await row("noisy").waitFor();
    let calls = 0;
    const count = (r: { url(): string }): void => {
      if (r.url().endsWith("/GetDestinationHealth")) calls++;
    };
    page.on("request", count);
    // Measurement windows (how many calls happen in them), not synchronisation.
    await page.waitForTimeout(6_000);
    expect(calls).toBeGreaterThanOrEqual(2);
    expect(calls).toBeLessThanOrEqual(4);
    await page.evaluate(() => {
      Object.defineProperty(document, "hidden", { configurable: true, get: () => true });
      document.dispatchEvent(new Event("visibilitychange"));
    });
    await page.waitForTimeout(2_500); // a tick already under way may finish
    calls = 0;
    await page.waitForTimeout(5_000);
    expect(calls, "health requests while hidden").toBe(0);
    await page.evaluate(() => {
      Object.defineProperty(document, "hidden", { configurable: true, get: () => false });
      document.dispatchEvent(new Event("visibilitychange"));
    });
    await eventually("polling again when visible", () => calls > 0, 5_000);
    page.off("request", count);
  });

  it("an admin sets a client certificate and OAuth2 credentials; the page shows their summary, never the key or secret", async () => {
    // A throwaway certificate (openssl, as an operator would make one).
    const cert = join(binDir, "console-cert.pem");
    const key = join(binDir, "console-key.pem");
    await promisify(execFile)("openssl", ["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", key, "-out", cert, "-days", "2", "-subj", "/CN=console-test"]);
    const keyPem = await readFile(key, "utf8");
    const keyLine = keyPem.split("\n")[1]!;
    const secret = "console-oauth2-secret-5d1e";
    await page.getByRole("button", { name: "Sign out" }).click();
    await page.getByLabel("Token").waitFor();
    await page.getByLabel("Token").fill(dev.token);
    await page.getByRole("button", { name: "Sign in" }).click();
    await page.getByTestId("who").waitFor();
    // A client certificate goes with an https URL: a destination of its own
    // (nothing is published to it).
    await rivoractl(bins.rivoractl, dev, dev.token, "destinations", "create", "bank", "--url", "https://127.0.0.1:9/hook");
    await page.goto(`${dev.url}/console/#/destination/bank`);
    await page.getByTestId("endpoint-auth").getByText("Signature only").waitFor();
    await page.locator('input[name="oauth2-token-url"]').fill("http://127.0.0.1:9/token");
    await page.locator('input[name="oauth2-client-id"]').fill("console-client");
    await page.locator('input[name="oauth2-client-secret"]').fill(secret);
    await page.locator('input[name="oauth2-scopes"]').fill("hooks read");
    await page.getByRole("button", { name: "Set OAuth2", exact: true }).click();
    await page.getByTestId("endpoint-auth").getByText("console-client").waitFor({ timeout: 10_000 });
    await page.locator('textarea[name="client-cert"]').fill(await readFile(cert, "utf8"));
    await page.locator('textarea[name="client-key"]').fill(keyPem);
    await page.getByRole("button", { name: "Set certificate", exact: true }).click();
    await page.getByTestId("endpoint-auth").getByText(/CN=console-test/).first().waitFor({ timeout: 10_000 });
    const shown = (await page.getByTestId("endpoint-auth").textContent()) ?? "";
    expect(shown).toMatch(/OAuth2 client secret\s*sha256:[0-9a-f]{16}/);
    expect(shown).toMatch(/Client key\s*sha256:[0-9a-f]{16}/);
    expect(await page.content()).not.toContain(secret);
    expect(await page.content()).not.toContain(keyLine);
    const got = JSON.parse(await rivoractl(bins.rivoractl, dev, dev.token, "destinations", "get", "bank", "-o", "json")) as {
      destination: { oauth2?: { clientId?: string; clientSecret?: string; scopes?: string[] }; clientCertificate?: { subject?: string; keyPem?: string } };
    };
    expect(got.destination.oauth2).toMatchObject({ clientId: "console-client", scopes: ["hooks", "read"] });
    expect(got.destination.oauth2?.clientSecret).toBeUndefined();
    expect(got.destination.clientCertificate?.subject).toBe("CN=console-test");
    expect(got.destination.clientCertificate?.keyPem).toBeUndefined();
    await shot("destination-auth.png");
  });

  it("an admin switches a destination to ed25519 (v1a); the page shows the public key, never the secret key", async () => {
    await page.goto(`${dev.url}/console/#/destination/quiet`);
    await page.getByTestId("signing").getByText("v1", { exact: true }).waitFor();
    await page.locator('select[name="signature-scheme"]').selectOption("v1a");
    await page.getByRole("button", { name: "Set scheme", exact: true }).click();
    await page.getByTestId("signing").getByText(/^whpk_/).waitFor({ timeout: 10_000 });
    const shown = (await page.getByTestId("signing").textContent()) ?? "";
    const got = JSON.parse(await rivoractl(bins.rivoractl, dev, dev.token, "destinations", "get", "quiet", "-o", "json")) as {
      destination: { signatureScheme?: string; publicKey?: string; signingKey?: string; signingKeyFingerprint?: string };
    };
    expect(got.destination.signatureScheme).toBe("v1a");
    expect(got.destination.signingKey).toBeUndefined();
    expect(shown).toContain(got.destination.publicKey!);
    expect(shown).toContain(got.destination.signingKeyFingerprint!);
    expect(await page.content()).not.toContain("whsk_");
  });

  it("an admin gives the ed25519 key and a legacy signature; the partner gets it, the page shows fingerprints only", async () => {
    // The SDK's v1a test vector: the key whose seed is bytes 1 to 32 and its public key.
    const signingKey = "whsk_AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyB5tVYuj+ZU+UB4sRLoqYunkB+FOuaVvtfg45ELrQSWZA==";
    const publicKey = "whpk_ebVWLo/mVPlAeLES6KmLp5AfhTrmlb7X4OORC60ElmQ=";
    const legacySecret = "console-legacy-secret-8c2f";
    // bank's OAuth2 and certificate go: the page removes them.
    await page.goto(`${dev.url}/console/#/destination/bank`);
    await page.getByRole("button", { name: "Remove OAuth2", exact: true }).click();
    await page.getByText("OAuth2 credentials of bank removed.").waitFor({ timeout: 10_000 });
    await page.getByRole("button", { name: "Remove certificate", exact: true }).click();
    await page.getByTestId("endpoint-auth").getByText("Signature only").waitFor({ timeout: 10_000 });
    await page.goto(`${dev.url}/console/#/destination/quiet`);
    await page.getByTestId("endpoint-auth").getByText("Signature only").waitFor({ timeout: 10_000 });
    await page.getByTestId("signing").getByText(/^whpk_/).waitFor();
    await page.locator('input[name="signing-key"]').fill("sk_not-a-key");
    await page.getByRole("button", { name: "Set scheme", exact: true }).click();
    await page.getByRole("alert").getByText(/Set scheme failed: the signing key must start with "whsk_"/).waitFor();
    await page.locator('select[name="signature-scheme"]').selectOption("both");
    await page.locator('input[name="signing-key"]').fill(signingKey);
    await page.getByRole("button", { name: "Set scheme", exact: true }).click();
    await page.getByTestId("signing").getByText(publicKey).waitFor({ timeout: 10_000 });
    expect(await page.locator('input[name="signing-key"]').inputValue()).toBe("");

    await page.getByRole("button", { name: "Set legacy signature", exact: true }).click();
    await page.getByRole("alert").getByText(/needs the header name and the partner's secret/).waitFor();
    await page.locator('input[name="legacy-signature-header"]').fill("X-Partner-Sig");
    await page.locator('input[name="legacy-signature-template"]').fill("{timestamp}.{body}");
    await page.locator('select[name="legacy-signature-algorithm"]').selectOption("hmac-sha512");
    await page.locator('select[name="legacy-signature-encoding"]').selectOption("base64");
    await page.locator('input[name="legacy-signature-prefix"]').fill("sha512=");
    await page.locator('input[name="legacy-signature-secret"]').fill(legacySecret);
    await page.getByRole("button", { name: "Set legacy signature", exact: true }).click();
    await page.getByTestId("signing").getByText(/^X-Partner-Sig: /).waitFor({ timeout: 10_000 });
    const shown = (await page.getByTestId("signing").textContent()) ?? "";
    const got = JSON.parse(await rivoractl(bins.rivoractl, dev, dev.token, "destinations", "get", "quiet", "-o", "json")) as {
      destination: { signatureScheme?: string; publicKey?: string; signingKey?: string; legacySignature?: Record<string, unknown> };
    };
    expect(got.destination).toMatchObject({ signatureScheme: "both", publicKey: publicKey });
    expect(got.destination.signingKey).toBeUndefined();
    expect(got.destination.legacySignature).toMatchObject({ header: "X-Partner-Sig", template: "{timestamp}.{body}", algorithm: "hmac-sha512", encoding: "base64", prefix: "sha512=" });
    expect(got.destination.legacySignature?.secret).toBeUndefined();
    expect(shown).toContain(String(got.destination.legacySignature?.secretFingerprint));
    expect(await page.content()).not.toContain(legacySecret);
    expect(await page.content()).not.toContain("whsk_");

    // The partner gets the legacy header, computed as configured, beside webhook-signature.
    const before = quiet.received.length;
    await rpc(dev, dev.token, "rivora.v1.IngestService/Publish", { destinationId: "quiet", customerId: "acme", laneKey: "u", type: "t", data: { legacy: true } });
    const delivered = await eventually("quiet got an event with the legacy signature", () => quiet.received.slice(before).find((r) => r.headers["x-partner-sig"] !== undefined), 30_000);
    const want = "sha512=" + createHmac("sha512", legacySecret).update(`${String(delivered.headers["webhook-timestamp"])}.${delivered.text}`).digest("base64");
    expect(delivered.headers["x-partner-sig"]).toBe(want);
    expect(String(delivered.headers["webhook-signature"])).toMatch(/v1,.* v1a,|v1a,.* v1,/);

    await page.getByRole("button", { name: "Remove legacy signature", exact: true }).click();
    await page.getByText(`Legacy signature of quiet removed.`).waitFor({ timeout: 10_000 });
    await eventually("the summary drops the legacy signature", async () => !((await page.getByTestId("signing").textContent()) ?? "").includes("X-Partner-Sig"), 10_000);
    const after = JSON.parse(await rivoractl(bins.rivoractl, dev, dev.token, "destinations", "get", "quiet", "-o", "json")) as { destination: { legacySignature?: unknown } };
    expect(after.destination.legacySignature).toBeUndefined();
    await shot("destination-signing.png");
  });

  it("an admin creates a token, shown once, and revokes it; the new viewer has no Tokens page", async () => {
    await signInWith(dev.token);
    await page.goto(`${dev.url}/console/#/tokens`);
    await page.getByRole("heading", { name: "Tokens" }).waitFor();
    await page.locator('input[name="token-name"]').fill("tina-viewer");
    await page.locator('select[name="token-role"]').selectOption({ label: "viewer: every read, nothing else" });
    await page.locator('input[name="token-ttl"]').fill("2h");
    await page.getByRole("button", { name: "Create token" }).click();
    // The token is shown once, in a textbox a screen reader names.
    const secret = page.getByRole("textbox", { name: "New token tina-viewer (shown once)" });
    await secret.waitFor();
    const token = await secret.inputValue();
    expect(token.length).toBeGreaterThan(20);
    type Listed = { id: string; name: string; role: string; expiresAt?: string };
    const listed = JSON.parse(await rivoractl(bins.rivoractl, dev, dev.token, "tokens", "list", "-o", "json")) as Listed[];
    const tina = listed.find((t) => t.name === "tina-viewer");
    expect(tina).toMatchObject({ role: "viewer" });
    expect(tina?.expiresAt).toBeTruthy();
    await page.locator(`tr[data-token="${tina!.id}"]`).waitFor();
    // Each Revoke names its token.
    expect(await page.getByRole("button", { name: /^Revoke token / }).count()).toBeGreaterThan(2);
    expect(await repeatedButtonNames(page)).toEqual([]);
    await shot("tokens.png");

    // The new token signs in, as a viewer: no Tokens page in its navigation.
    await signInWith(token);
    await page.getByTestId("who").getByText("tina-viewer (viewer)").waitFor();
    expect(await page.getByRole("link", { name: "Tokens", exact: true }).count()).toBe(0);

    // Back as the admin: revoke it (confirmed), and rivoractl no longer lists it.
    await signInWith(dev.token);
    await page.getByRole("link", { name: "Tokens", exact: true }).click();
    page.once("dialog", (d) => void d.accept());
    await page.locator(`tr[data-token="${tina!.id}"]`).getByRole("button", { name: "Revoke" }).click();
    await page.getByText(`Revoked ${tina!.id} (tina-viewer).`).waitFor();
    const after = JSON.parse(await rivoractl(bins.rivoractl, dev, dev.token, "tokens", "list", "-o", "json")) as Listed[];
    expect(after.map((t) => t.id)).not.toContain(tina!.id);
  });

  it("an admin adds an event type with a schema and deprecates it; rivoractl agrees", async () => {
    await signInWith(dev.token);
    await page.getByRole("link", { name: "Event types", exact: true }).click();
    await page.getByTestId("catalogue-mode").getByText("Open catalogue").waitFor();
    await page.locator('input[name="type-name"]').fill("order.shipped");
    await page.locator('input[name="type-description"]').fill("An order left the warehouse");
    await page.locator('textarea[name="type-schema"]').fill('{"type": "object", "required": ["order_id"]}');
    await page.getByRole("button", { name: "Add type" }).click();
    const row = page.locator('tr[data-type="order.shipped"]');
    await row.getByText("offered").waitFor();
    type Listed = { name: string; description?: string; schema?: string; deprecated?: boolean };
    let listed = JSON.parse(await rivoractl(bins.rivoractl, dev, dev.token, "event-types", "list", "--include-deprecated", "-o", "json")) as Listed[];
    expect(listed.find((t) => t.name === "order.shipped")).toMatchObject({ description: "An order left the warehouse" });
    expect(listed.find((t) => t.name === "order.shipped")?.schema).toContain("order_id");
    await row.getByRole("button", { name: "Deprecate" }).click();
    await row.getByText("deprecated").waitFor();
    listed = JSON.parse(await rivoractl(bins.rivoractl, dev, dev.token, "event-types", "list", "--include-deprecated", "-o", "json")) as Listed[];
    expect(listed.find((t) => t.name === "order.shipped")?.deprecated).toBe(true);
    await shot("event-types.png");
  });

  it("logged no error in the page", () => {
    expect(pageErrors).toEqual([]);
  });
});
