// What a page says about its data, in real Chromium against a real
// `rivora dev`: while its first answer is on its way (a real proxy holds
// the calls: nothing in the page is mocked) it says it loads, not that
// there is nothing; when Rivora stops after a page showed its data, the
// page keeps the data and says since when it is old and why, and once
// Rivora is started again the notice goes.
import { mkdir, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { chromium, type BrowserContext, type Locator, type Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Dev, eventually, freePort, rpc, startPartner, type Partner } from "../../testkit/ts/index.js";
import { buildBinaries, chromiumPath, createToken, signIn, startProxy, type SlowProxy } from "./harness.js";

const artifacts = resolve(import.meta.dirname, "../test-artifacts");

let dev: Dev;
let proxy: SlowProxy;
let ok: Partner;
let refusing: Partner;
let ctx: BrowserContext;
let page: Page;
let dir: string;
let profile: string;
let customerToken = "";
let subId = "";
let laneEvent = "";
const pageErrors: string[] = [];

beforeAll(async () => {
  await mkdir(artifacts, { recursive: true });
  dir = await mkdtemp(join(tmpdir(), "rivora-states-"));
  const bins = await buildBinaries(dir);
  // Made here, not by startDev: its data (and tokens) outlive a stop, so
  // the test can start the same Rivora again.
  dev = new Dev(bins.rivora, join(dir, "data"), await freePort());
  await dev.start();
  ok = await startPartner({ status: 200 });
  refusing = await startPartner({ status: 400 });
  await dev.createDestination("alpha", ok.url);
  // One attempt: its event is a dead letter at once.
  await rpc(dev, dev.token, "rivora.v1.AdminService/CreateDestination", { id: "rejecting", url: refusing.url, limits: { maxAttempts: 1 } });
  await rpc(dev, dev.token, "rivora.v1.EventTypeService/CreateEventType", { name: "order.created", description: "An order was placed" });
  subId = (await rpc<{ subscription: { id: string } }>(dev, dev.token, "rivora.v1.SubscriptionService/CreateSubscription", { customerId: "c1", destinationId: "alpha", types: ["order.created"] })).subscription.id;
  const r = await rpc<{ eventIds: string[] }>(dev, dev.token, "rivora.v1.IngestService/PublishBatch", {
    events: [
      { destinationId: "alpha", customerId: "acme", laneKey: "l1", type: "t", data: { i: 1 } },
      { customerId: "c1", laneKey: "c1-lane", type: "order.created", data: { i: 2 } },
      { destinationId: "rejecting", customerId: "c1", laneKey: "r1", type: "t", data: { i: 3 } },
    ],
  });
  laneEvent = r.eventIds[0]!;
  await eventually("a dead letter of rejecting", async () => {
    const s = await rpc<{ total?: string }>(dev, dev.token, "rivora.v1.ArchiveService/DeadLetterStats", { filter: {} });
    return Number(s.total ?? 0) > 0;
  }, { timeoutMs: 120_000, everyMs: 500 });
  customerToken = await createToken(dev, "c1-portal", "ROLE_CUSTOMER", ["c1"]);
  proxy = await startProxy(dev.url);
  profile = await mkdtemp(join(tmpdir(), "rivora-states-chromium-"));
  ctx = await chromium.launchPersistentContext(profile, { executablePath: chromiumPath, headless: true, viewport: { width: 1280, height: 800 } });
  page = ctx.pages()[0] ?? (await ctx.newPage());
  watchErrors(page);
});

afterAll(async () => {
  await ctx?.close();
  await proxy?.close();
  await ok?.close();
  await refusing?.close();
  await dev?.stop();
  if (profile) await rm(profile, { recursive: true, force: true });
  if (dir) await rm(dir, { recursive: true, force: true });
});

function watchErrors(p: Page): void {
  p.on("pageerror", (e) => pageErrors.push(String(e)));
  p.on("console", (m) => {
    if (m.type() === "error") pageErrors.push(m.text());
  });
}

/** A page as it loads: what it says meanwhile, what it shows once answered, and the empty states it must not show before. */
interface Loads {
  hash: string;
  loading: string[];
  data: (p: Page) => Locator;
  /** Empty states the page shows once answered, never while it loads. */
  empty?: string[];
}

/**
 * slowly opens a page through the proxy with every call but WhoAmI held:
 * it must say it loads (and neither show data nor say there is none);
 * released, it shows its data and no longer says it loads.
 */
async function slowly(l: Loads): Promise<void> {
  const gate = proxy.hold((path) => path.startsWith("/rivora.v1.") && !path.endsWith("/WhoAmI"));
  try {
    await page.goto(`${proxy.url}/console/#/${l.hash}`);
    for (const text of l.loading) await page.getByText(text, { exact: true }).waitFor({ timeout: 10_000 });
    await eventually(`a call of #/${l.hash} held`, () => gate.held() > 0, 10_000);
    expect(await l.data(page).count(), `#/${l.hash}: data before its answer`).toBe(0);
    for (const text of l.empty ?? []) expect(await page.getByText(text).count(), `#/${l.hash}: "${text}" while loading`).toBe(0);
    expect(await page.locator("td.empty").count(), `#/${l.hash}: an empty table while loading`).toBe(0);
  } finally {
    gate.release();
  }
  await l.data(page).first().waitFor({ timeout: 15_000 });
  for (const text of l.empty ?? []) await page.getByText(text).first().waitFor();
  // A page with two parts (the subscription page: its summary, then its
  // last deliveries) shows its first before its loading line goes.
  for (const text of l.loading) await page.getByText(text, { exact: true }).waitFor({ state: "detached", timeout: 15_000 });
}

const escaped = (s: string): string => s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
/** The notice of a view showing data as of a time when Rivora cannot be reached. */
const staleText = (what: string): RegExp => new RegExp(`^${escaped(what)} as of (\\d\\d:\\d\\d:\\d\\d) — cannot reach Rivora at ${escaped(dev.url)}: .+; retrying$`);
/** The browser's wall clock as the notice writes it (local HH:MM:SS). */
const clock = (p: Page): Promise<string> => p.evaluate(() => new Date().toTimeString().slice(0, 8));

describe("loading, empty, error and stale states", () => {
  it("an operator's pages say they load until their first answer, then show it", async () => {
    await signIn(page, proxy, dev.token, "bootstrap");
    const pages: Loads[] = [
      { hash: "destination/alpha", loading: ["Loading destination alpha…"], data: (p) => p.getByTestId("state") },
      { hash: "subscriptions", loading: ["Loading subscriptions…"], data: (p) => p.locator(`tr[data-id="${subId}"]`) },
      { hash: `subscription/${subId}`, loading: [`Loading subscription ${subId}…`], data: (p) => p.getByTestId("sub-state") },
      { hash: "dead-letters", loading: ["Loading the dead-letter counts…"], data: (p) => p.getByTestId("dead-letter-stats").locator('tr[data-destination="rejecting"]') },
      {
        hash: "dead-letters/rejecting",
        loading: ["Loading the dead-letter counts…", "Loading the matching dead letters…"],
        data: (p) => p.getByTestId("dead-letters").locator('tr[data-destination="rejecting"]'),
      },
      { hash: `events/${laneEvent}`, loading: [`Loading event ${laneEvent}…`], data: (p) => p.getByTestId("event").getByRole("heading", { name: `Event ${laneEvent}` }) },
      { hash: "events/alpha/acme/l1", loading: ["Loading the events of lane l1…"], data: (p) => p.locator(`tr[data-event="${laneEvent}"]`) },
      { hash: "event-types", loading: ["Loading the event-type catalogue…"], data: (p) => p.locator('tr[data-type="order.created"]') },
      { hash: "audit", loading: ["Loading the audit log…"], data: (p) => p.getByTestId("audit").locator("tbody tr") },
      { hash: "agents", loading: ["Loading agents and edges…"], data: (p) => p.getByTestId("agents").locator("tbody tr"), empty: ["No edge has registered"] },
      { hash: "tokens", loading: ["Loading tokens…"], data: (p) => p.locator("tr[data-token]") },
      // Last: signing in landed on it.
      { hash: "destinations", loading: ["Loading destinations…"], data: (p) => p.locator('tr[data-id="alpha"]') },
    ];
    for (const l of pages) await slowly(l);
  });

  it("a customer's portal pages say they load until their first answer, then show it", async () => {
    await page.getByRole("button", { name: "Sign out" }).click();
    await page.getByLabel("Token").fill(customerToken);
    await page.getByRole("button", { name: "Sign in" }).click();
    await page.getByTestId("who").getByText("c1-portal").waitFor();
    await page.locator(`tr[data-id="${subId}"]`).waitFor();
    const pages: Loads[] = [
      { hash: "events", loading: ["Loading your events…"], data: (p) => p.getByTestId("my-events").locator("tr[data-event]") },
      { hash: "dead-letters", loading: ["Loading the dead-letter counts…"], data: (p) => p.getByTestId("dead-letter-stats").locator('tr[data-destination="rejecting"]') },
      { hash: `subscription/${subId}`, loading: [`Loading subscription ${subId}…`], data: (p) => p.getByTestId("sub-state") },
      {
        hash: "subscriptions",
        loading: ["Loading your subscriptions…", "Loading the event-type catalogue…", "Loading your endpoints…"],
        data: (p) => p.locator(`tr[data-id="${subId}"]`),
        empty: ["None yet."],
      },
    ];
    for (const l of pages) await slowly(l);
    await page.getByTestId("catalogue").getByText("order.created").waitFor();
  });

  it("when Rivora stops, each refreshing page keeps its data and says since when; started again, the notice goes", async () => {
    // Several tabs, each signed in on its own page, straight at Rivora.
    const tabs: { page: Page; what: string; data: Locator }[] = [];
    const open = async (hash: string, token: string, name: string, what: string, data: (p: Page) => Locator): Promise<void> => {
      const p = tabs.length === 0 ? page : await ctx.newPage();
      if (p !== page) watchErrors(p);
      await p.goto(`${dev.url}/console/#/${hash}`);
      await p.getByLabel("Token").fill(token);
      await p.getByRole("button", { name: "Sign in" }).click();
      await p.getByTestId("who").getByText(name).waitFor();
      await data(p).first().waitFor({ timeout: 15_000 });
      tabs.push({ page: p, what, data: data(p) });
    };
    const before = await clock(page);
    await open("destinations", dev.token, "bootstrap", "Destinations", (p) => p.locator('tr[data-id="alpha"]'));
    await open("destination/alpha", dev.token, "bootstrap", "Destination alpha", (p) => p.getByTestId("state"));
    await open("dead-letters", dev.token, "bootstrap", "The dead-letter counts", (p) => p.getByTestId("dead-letter-stats").locator('tr[data-destination="rejecting"]'));
    await open("agents", dev.token, "bootstrap", "Agents and edges", (p) => p.getByTestId("agents").locator("tbody tr"));
    await open("subscriptions", customerToken, "c1-portal", "Your subscriptions", (p) => p.locator(`tr[data-id="${subId}"]`));

    await dev.stop();
    const stopped = await clock(page);
    for (const t of tabs) {
      const notice = t.page.getByTestId("stale");
      await notice.getByText(staleText(t.what)).waitFor({ timeout: 20_000 });
      const at = staleText(t.what).exec((await notice.textContent()) ?? "")![1]!;
      // As of its last answer: after the page opened, before Rivora stopped.
      if (before <= stopped) expect(at >= before && at <= stopped, `${t.what} as of ${at}, not within ${before}–${stopped}`).toBe(true);
      expect(await t.data.first().isVisible(), `${t.what}: the data kept`).toBe(true);
      expect(await t.page.locator("main h1").isVisible()).toBe(true);
    }
    await page.screenshot({ path: join(artifacts, "destinations-stale.png"), fullPage: true });

    await dev.start();
    for (const t of tabs) {
      await eventually(`${t.what}: the notice gone`, async () => (await t.page.getByTestId("stale").count()) === 0, 20_000);
      expect(await t.data.first().isVisible(), `${t.what}: the data shown`).toBe(true);
      expect(await t.page.getByRole("alert").count(), `${t.what}: an error left`).toBe(0);
    }
    for (const t of tabs) if (t.page !== page) await t.page.close();
  });

  it("a page opened while Rivora is stopped says it cannot load and retries, then shows its data", async () => {
    await page.goto(`${dev.url}/console/#/destinations`);
    await page.locator('tr[data-id="alpha"]').waitFor();
    await dev.stop();
    await page.goto(`${dev.url}/console/#/audit`);
    const failed = page.getByRole("alert").getByText(new RegExp(`^Could not load the audit log: cannot reach Rivora at ${escaped(dev.url)}: .+; retrying$`));
    await failed.waitFor({ timeout: 15_000 });
    expect(await page.getByRole("heading", { name: "Audit" }).isVisible()).toBe(true);
    expect(await page.getByText("Loading the audit log…").count()).toBe(0);
    expect(await page.locator("td.empty").count()).toBe(0);
    await dev.start();
    await page.getByTestId("audit").locator("tbody tr").first().waitFor({ timeout: 20_000 });
    expect(await failed.count()).toBe(0);
  });

  it("logged no error in the page", () => {
    // The calls refused while Rivora was stopped are logged by Chromium as failed resources.
    expect(pageErrors.filter((e) => !/^Failed to load resource/.test(e))).toEqual([]);
  });
});
