// The console's actions as a person uses them on a slow network and from
// the keyboard, in real Chromium against a real `rivora dev` and real
// partners: a call held by the test (a Playwright route) shows its button
// busy and takes no second press; pages say they load; Back returns to the
// row it was left from; the keyboard stays on something after a button
// disables itself; a destination refusing everything with 400 is noisy;
// nothing spills off a phone's screen.
import { mkdir, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { chromium, type BrowserContext, type Page, type Route } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { eventually, rpc, startDev, startPartner, type Dev, type Partner } from "../../testkit/ts/index.js";
import { buildBinaries, chromiumPath, redrawn, signIn } from "./harness.js";

const artifacts = resolve(import.meta.dirname, "../test-artifacts");

let dev: Dev;
let ok: Partner;
let rejecting: Partner;
let ctx: BrowserContext;
let page: Page;
let profile: string;
let binDir: string;
const pageErrors: string[] = [];
const fills = 60; // destinations enough to scroll the list

/**
 * hold routes calls to method and keeps each until release; calls counts
 * them. Connect calls are POSTs to /<service>/<method>.
 */
async function hold(method: string): Promise<{ calls: () => number; release: () => Promise<void> }> {
  let open!: () => void;
  const released = new Promise<void>((r) => (open = r));
  const pattern = `**/rivora.v1.${method}`;
  const held: Promise<void>[] = [];
  const handler = (route: Route): Promise<void> => {
    const p = released.then(() => route.continue());
    held.push(p);
    return p;
  };
  await page.route(pattern, handler);
  return {
    calls: () => held.length,
    // The held calls go on before the route is removed (unrouting first
    // would let them through and fail their continue).
    release: async () => {
      open();
      await Promise.all(held);
      await page.unroute(pattern, handler);
    },
  };
}

const focused = (): Promise<string> => page.evaluate(() => `${document.activeElement?.tagName} ${document.activeElement?.textContent ?? ""}`.trim());

async function publish(destinationId: string, laneKey: string, n = 1): Promise<string[]> {
  const events = [...Array(n).keys()].map((i) => ({ destinationId, customerId: "acme", laneKey, type: "t", data: { i } }));
  return (await rpc<{ eventIds: string[] }>(dev, dev.token, "rivora.v1.IngestService/PublishBatch", { events })).eventIds;
}

beforeAll(async () => {
  await mkdir(artifacts, { recursive: true });
  binDir = await mkdtemp(join(tmpdir(), "rivora-steering-bin-"));
  const bins = await buildBinaries(binDir);
  dev = await startDev(bins.rivora);
  ok = await startPartner({ status: 200 });
  rejecting = await startPartner({ status: 400 });
  await dev.createDestination("ok", ok.url);
  await dev.createDestination("rejecting", rejecting.url);
  for (let i = 0; i < fills; i++) await dev.createDestination(`fill-${String(i).padStart(2, "0")}`, ok.url);
  profile = await mkdtemp(join(tmpdir(), "rivora-steering-chromium-"));
  ctx = await chromium.launchPersistentContext(profile, { executablePath: chromiumPath, headless: true, viewport: { width: 1280, height: 800 } });
  page = ctx.pages()[0] ?? (await ctx.newPage());
  page.on("pageerror", (e) => pageErrors.push(String(e)));
  page.on("console", (m) => {
    if (m.type() === "error") pageErrors.push(m.text());
  });
  await signIn(page, dev, dev.token, "bootstrap");
});

afterAll(async () => {
  await ctx?.close();
  await ok?.close();
  await rejecting?.close();
  await dev?.stop();
  if (profile) await rm(profile, { recursive: true, force: true });
  if (binDir) await rm(binDir, { recursive: true, force: true });
});

describe("console actions on a slow network and from the keyboard", () => {
  it("a double-click on Resend sends one call, its button saying Resending… meanwhile", async () => {
    const [id] = await publish("ok", "r-1");
    await eventually("the event delivered", () => ok.received.some((r) => r.id === id && r.status === 200));
    await page.goto(`${dev.url}/console/#/destination/ok`);
    await page.getByTestId("state").waitFor();
    const resend = await hold("EventService/ResendEvent");
    await page.locator('input[name="resend-event"]').fill(id!);
    await page.locator('input[name="resend-reason"]').fill("partner lost it");
    await page.getByRole("button", { name: "Resend", exact: true }).dblclick();
    const busy = page.getByRole("button", { name: "Resending…" });
    await busy.waitFor();
    expect(await busy.getAttribute("aria-disabled")).toBe("true");
    // Enter in its field while the call runs does nothing either.
    await page.locator('input[name="resend-reason"]').press("Enter");
    expect(resend.calls()).toBe(1);
    await resend.release();
    await page.getByText(`Event ${id} sent again.`).waitFor();
    expect(resend.calls()).toBe(1);
    await page.getByRole("button", { name: "Resend", exact: true }).waitFor();
    // Accepted twice: published, and resent once.
    const got = await rpc<{ episodes?: unknown[] }>(dev, dev.token, "rivora.v1.EventService/GetEvent", { eventId: id });
    expect(got.episodes).toHaveLength(2);
  });

  it("a double Pause pauses once and says nothing failed", async () => {
    const pause = await hold("AdminService/PauseDestination");
    await page.locator('input[name="pause-reason"]').fill("slow network pause");
    await page.getByRole("button", { name: "Pause", exact: true }).dblclick();
    await page.getByRole("button", { name: "Pausing…" }).waitFor();
    expect(pause.calls()).toBe(1);
    await pause.release();
    await page.getByText("Paused ok.").waitFor();
    await page.getByTestId("state").getByText("paused").waitFor({ timeout: 10_000 });
    expect(pause.calls()).toBe(1);
    expect(await page.getByText(/Pause failed/).count()).toBe(0);
  });

  it("offers no Remove OAuth2 without OAuth2, and a later success clears an earlier error", async () => {
    // ok is paused (above): its events wait in a lane with a Skip head.
    await publish("ok", "held", 3);
    await page.getByRole("button", { name: /^Skip head of lane held/ }).waitFor({ timeout: 15_000 });
    expect(await page.getByRole("button", { name: "Remove OAuth2", exact: true }).isDisabled()).toBe(true);
    expect(await page.getByRole("button", { name: "Remove certificate", exact: true }).isDisabled()).toBe(true);
    expect(await page.getByRole("button", { name: "Remove legacy signature", exact: true }).isDisabled()).toBe(true);
    // A Skip head without a reason is refused, in the lanes' section.
    await page.getByRole("button", { name: /^Skip head of lane held/ }).click();
    const refused = page.getByRole("alert").getByText("Skipping a lane's head needs a reason");
    await refused.waitFor();
    // Another section's action succeeds: the old error goes.
    await page.locator('select[name="class"]').selectOption({ label: "low" });
    await page.getByRole("button", { name: "Set class" }).click();
    await page.getByText("Priority class set to low.").waitFor();
    expect(await refused.count()).toBe(0);
    expect(await page.getByRole("alert").count()).toBe(0);
  });

  it("Resume and Set limit from the keyboard leave it on the button that applies next", async () => {
    // ok is paused: Resume, pressed with Enter, disables itself.
    await page.getByRole("button", { name: "Resume", exact: true }).focus();
    await page.keyboard.press("Enter");
    await page.getByTestId("state").getByText(/healthy|degraded/).waitFor({ timeout: 10_000 });
    expect(await focused()).toBe("BUTTON Pause");
    // Set limit is pressable once checked, and disables itself when done.
    await page.locator('input[name="rate"]').fill("50");
    await page.locator('input[name="limit-reason"]').fill("keyboard test");
    await page.locator('input[name="limit-reason"]').press("Enter");
    await page.getByTestId("limit-preview").getByText("Nothing changed yet").waitFor();
    await page.getByRole("button", { name: "Set limit" }).focus();
    await page.keyboard.press("Enter");
    await page.getByText(/^Limit set \(config version \d+\)\.$/).waitFor();
    expect(await focused()).toBe("BUTTON Check");
  });

  it("opens a destination at its top, and Back returns to the row it was opened from", async () => {
    await page.goto(`${dev.url}/console/#/destinations`);
    const last = `fill-${fills - 1}`;
    const link = page.locator(`tr[data-id="${last}"] a`);
    await link.waitFor();
    await link.scrollIntoViewIfNeeded();
    const y = await page.evaluate(() => scrollY);
    expect(y).toBeGreaterThan(500);
    await link.click();
    const heading = page.getByRole("heading", { name: `Destination ${last}` });
    await heading.waitFor();
    expect(await page.evaluate(() => scrollY)).toBe(0);
    expect(await heading.evaluate((e) => e.getBoundingClientRect().top)).toBeGreaterThanOrEqual(0);
    await page.getByTestId("state").waitFor();
    await page.goBack();
    await page.getByRole("heading", { name: "Destinations" }).waitFor();
    await eventually("the list scrolled back to the row", async () => Math.abs((await page.evaluate(() => scrollY)) - y) <= 1, 10_000);
    expect(await page.evaluate(() => document.activeElement?.getAttribute("href"))).toBe(`#/destination/${last}`);
  });

  it("the limit preview says why nothing drains, and a 0 is told its real bound", async () => {
    await rpc(dev, dev.token, "rivora.v1.AdminService/PauseDestination", { destinationId: "ok", reason: "hold for the preview" });
    await publish("ok", "held-2", 3);
    await page.goto(`${dev.url}/console/#/destination/ok`);
    await page.getByTestId("state").getByText("paused").waitFor({ timeout: 10_000 });
    await page.locator('input[name="limit-reason"]').fill("preview test");
    await page.locator('input[name="rate"]').fill("0");
    await page.getByRole("button", { name: "Check" }).click();
    await page.getByRole("alert").getByText('Check failed: Rate per second "0": a number of events per second from 0.001 (one event in 1,000 s) to 1,000,000; an override cannot set 0').waitFor();
    await page.locator('input[name="rate"]').fill("");
    await page.locator('input[name="max-attempts"]').fill("0");
    await page.getByRole("button", { name: "Check" }).click();
    await page.getByRole("alert").getByText('Check failed: Max attempts "0": a whole number from 1 to 10,000').waitFor();
    await page.locator('input[name="max-attempts"]').fill("");
    await page.locator('input[name="rate"]').fill("5");
    await page.getByRole("button", { name: "Check" }).click();
    await page.getByTestId("limit-preview").getByText("Nothing changed yet").waitFor();
    expect(await page.getByTestId("limit-preview").textContent()).toMatch(
      /^With these limits \(rate 5\/s\), \d+ pending events do not drain now: the destination is paused: nothing goes out until it is resumed\. Nothing changed yet\.$/,
    );
  });

  it("says it loads, offering no action, until the destination is read", async () => {
    const get = await hold("AdminService/GetDestination");
    await page.goto(`${dev.url}/console/#/agents`);
    await page.getByRole("heading", { name: "Agents" }).waitFor();
    await page.goto(`${dev.url}/console/#/destination/ok`);
    await page.getByTestId("loading").getByText("Loading destination ok…").waitFor();
    for (const name of ["Pause", "Resume", "Clear limit", "Set class"]) expect(await page.getByRole("button", { name, exact: true }).isDisabled(), name).toBe(true);
    expect(await page.locator('select[name="class"]').isDisabled()).toBe(true);
    await get.release();
    await page.getByTestId("state").getByText("paused").waitFor();
    expect(await page.getByTestId("loading").count()).toBe(0);
    // The class the destination has (low, set above), not the first option.
    expect(await page.locator('select[name="class"]').inputValue()).toBe("3");
    expect(await page.getByRole("button", { name: "Resume", exact: true }).isEnabled()).toBe(true);
    await rpc(dev, dev.token, "rivora.v1.AdminService/ResumeDestination", { destinationId: "ok" });
  });

  it("a destination refusing everything with 400 shows its other 4xx and is the noisiest; a filter narrows the list", async () => {
    await publish("rejecting", "x", 2);
    await eventually("rejecting's other 4xx share", async () => {
      const r = await rpc<{ destinations?: { clientErrorShare?: number }[] }>(dev, dev.token, "rivora.v1.AdminService/GetDestinationHealth", { destinationId: "rejecting" });
      return (r.destinations?.[0]?.clientErrorShare ?? 0) > 0;
    });
    await page.goto(`${dev.url}/console/#/destinations`);
    const row = page.locator('tr[data-id="rejecting"]');
    await eventually("rejecting marked noisiest", async () => (await row.getAttribute("class")) === "noisiest", 15_000);
    const headers = await page.locator("thead th").allTextContents();
    const col = headers.findIndex((t) => t.startsWith("Other 4xx"));
    expect(col).toBeGreaterThan(0);
    expect(await row.locator("td").nth(col).textContent()).toBe("100%");
    const filter = page.getByRole("searchbox", { name: "Filter by id" });
    await filter.fill("fill-1");
    await eventually("the rows of fill-1*", async () => (await page.locator("tbody tr[data-id]").count()) === 10, 5_000);
    expect(await page.locator("tbody tr[data-id]").evaluateAll((rows) => rows.every((r) => r.getAttribute("data-id")!.startsWith("fill-1")))).toBe(true);
    expect(await page.locator("caption").first().textContent()).toMatch(/^10 of \d+ destinations \(id contains “fill-1”\)/);
    // A refresh keeps the filter and what is typed.
    await redrawn(page, "tbody tr[data-id]", 10_000);
    expect(await page.locator("tbody tr[data-id]").count()).toBe(10);
    expect(await filter.inputValue()).toBe("fill-1");
    await filter.fill("");
  });

  it("on a phone, the Destination page is no wider than the screen: its tables scroll in their box", async () => {
    // Paused with an event: a backlog row (six columns) and a lane.
    await rpc(dev, dev.token, "rivora.v1.AdminService/PauseDestination", { destinationId: "fill-00", reason: "hold a backlog" });
    await publish("fill-00", "p", 1);
    await page.setViewportSize({ width: 390, height: 844 });
    try {
      await page.goto(`${dev.url}/console/#/destination/fill-00`);
      await page.locator("tr[data-lane]").waitFor({ timeout: 15_000 });
      await page.getByText("Pending events per customer").locator("xpath=ancestor::table").locator("tbody td").getByText("acme").waitFor({ timeout: 15_000 });
      const [scroll, client] = await page.evaluate(() => [document.documentElement.scrollWidth, document.documentElement.clientWidth]);
      expect(scroll).toBeLessThanOrEqual(client);
      await page.screenshot({ path: join(artifacts, "destination-phone.png"), fullPage: true });
    } finally {
      await page.setViewportSize({ width: 1280, height: 800 });
    }
  });

  it("signing in says so while it waits, and a second press sends nothing", async () => {
    await page.getByRole("button", { name: "Sign out" }).click();
    await page.getByLabel("Token").fill(dev.token);
    const who = await hold("TokenService/WhoAmI");
    await page.getByRole("button", { name: "Sign in" }).click();
    await page.getByRole("button", { name: "Signing in…" }).waitFor();
    await page.getByLabel("Token").press("Enter");
    expect(who.calls()).toBe(1);
    await who.release();
    await page.getByTestId("who").waitFor();
    expect(who.calls()).toBe(1);
  });

  it("a reload while Rivora cannot be reached says why, keeps the token, and signs in once it answers", async () => {
    const pattern = "**/rivora.v1.TokenService/WhoAmI";
    await page.route(pattern, (route) => route.abort("connectionrefused"));
    await page.reload();
    await page.getByRole("alert").getByText(/^Could not check the token this tab kept: cannot reach Rivora/).waitFor();
    expect(await page.evaluate(() => sessionStorage.getItem("rivora.token"))).toBe(dev.token);
    await page.unroute(pattern);
    await page.getByTestId("who").waitFor({ timeout: 15_000 });
  });

  it("logged no error in the page", () => {
    // The refused and aborted calls the scenario provokes are logged by Chromium as failed resources.
    expect(pageErrors.filter((e) => !/^Failed to load resource/.test(e))).toEqual([]);
  });
});
