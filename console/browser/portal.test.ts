// The customer portal (issue 24) in real Chromium against a real `rivora
// dev` and real partner servers: customer c1 signs in with a customer
// token, creates a subscription, sends it a test event and sees it
// delivered at its own path, reads its events and dead letters, deletes a
// subscription with pending events after a confirmation — and never sees
// customer c2's subscriptions or data, neither on the page nor in any API
// answer. Then an operator sees every subscription per destination and per
// customer and pauses one. Screenshots go to console/test-artifacts/.
import { mkdir, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { chromium, type BrowserContext, type Page, type Response } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { eventually, rpc, startDev, startPartner, type Dev, type Partner } from "../../testkit/ts/index.js";
import { buildBinaries, chromiumPath, createToken, repeatedButtonNames, repeatedFieldNames, rivoractl, signIn } from "./harness.js";

const artifacts = resolve(import.meta.dirname, "../test-artifacts");

let bins: { rivora: string; rivoractl: string };
let dev: Dev;
let erp: Partner; // a shared partner destination, answering 200
let flaky: Partner; // a partner that always fails: its events become dead letters
let own: Partner; // c1's own endpoint's partner: not a shared destination's origin
let ctx: BrowserContext;
let page: Page;
let profile: string;
let binDir: string;
const pageErrors: string[] = [];
const c1 = { name: "c1-portal", token: "" };
const operator = { name: "olga-operator", token: "" };
// What only c2 has: its subscriptions' ids and a marker in its payloads.
const c2Marker = "only-for-c2-eyes";
const c2Subs: string[] = [];
let c1Flaky = ""; // c1's subscription to flaky, made by the admin
const c1Dead = 3;
// Every API answer c1's console received, to check none carries c2's data.
const c1Answers: { url: string; body: Buffer }[] = [];
let recording = false;

async function shot(name: string): Promise<void> {
  await page.screenshot({ path: join(artifacts, name), fullPage: true });
}

type Sub = { id: string; customerId: string; destinationId: string; paused?: boolean };

async function createSubscription(customerId: string, destinationId: string, types: string[]): Promise<string> {
  const r = await rpc<{ subscription: Sub }>(dev, dev.token, "rivora.v1.SubscriptionService/CreateSubscription", { customerId, destinationId, types });
  return r.subscription.id;
}

async function listSubscriptions(customerId: string): Promise<Sub[]> {
  const r = await rpc<{ subscriptions?: Sub[] }>(dev, dev.token, "rivora.v1.SubscriptionService/ListSubscriptions", { customerId });
  return r.subscriptions ?? [];
}

function record(r: Response): void {
  if (!recording || !r.url().includes("/rivora.v1.")) return;
  const url = r.url();
  r.body()
    .then((body) => c1Answers.push({ url, body }))
    .catch(() => {}); // a streamed answer cut short by navigation has no body to check
}

beforeAll(async () => {
  await mkdir(artifacts, { recursive: true });
  binDir = await mkdtemp(join(tmpdir(), "rivora-portal-bin-"));
  bins = await buildBinaries(binDir);
  dev = await startDev(bins.rivora);
  erp = await startPartner({ status: 200 });
  flaky = await startPartner({ status: 503 });
  own = await startPartner({ status: 200 });
  await rivoractl(bins.rivoractl, dev, dev.token, "destinations", "create", "erp", "--url", erp.url);
  await rivoractl(bins.rivoractl, dev, dev.token, "destinations", "create", "flaky", "--url", flaky.url, "--max-attempts", "1", "--window", "10s");
  for (const [name, description] of [["order.created", "An order was placed"], ["order.updated", "An order changed"], ["invoice.paid", "An invoice was paid"]])
    await rpc(dev, dev.token, "rivora.v1.EventTypeService/CreateEventType", { name, description });
  c1.token = await createToken(dev, c1.name, "ROLE_CUSTOMER", ["c1"]);
  operator.token = await createToken(dev, operator.name, "ROLE_OPERATOR");

  // c2's world: a subscription to the shared partner with delivered events,
  // one to the failing partner with dead letters.
  c2Subs.push(await createSubscription("c2", "erp", ["*"]), await createSubscription("c2", "flaky", ["invoice.paid"]));
  // c1's dead letters come from a subscription the admin made for it.
  c1Flaky = await createSubscription("c1", "flaky", ["invoice.paid"]);
  const events = [
    ...[0, 1].map((i) => ({ customerId: "c2", laneKey: "u-c2", type: "order.created", data: { marker: c2Marker, i } })),
    ...[0, 1].map((i) => ({ customerId: "c2", laneKey: "u-c2", type: "invoice.paid", data: { marker: c2Marker, i } })),
    ...[...Array(c1Dead).keys()].map((i) => ({ customerId: "c1", laneKey: "u-c1", type: "invoice.paid", data: { i } })),
  ];
  await rpc(dev, dev.token, "rivora.v1.IngestService/PublishBatch", { events });
  await eventually(`c1's ${c1Dead} dead letters and c2's 2`, async () => {
    const r = await rpc<{ deadLetters?: { event?: { customerId?: string } }[] }>(dev, dev.token, "rivora.v1.ArchiveService/ListDeadLetters", { filter: { destinationId: "flaky" } });
    const dl = r.deadLetters ?? [];
    return dl.filter((d) => d.event?.customerId === "c1").length === c1Dead && dl.filter((d) => d.event?.customerId === "c2").length === 2;
  }, { timeoutMs: 120_000, everyMs: 500 });

  profile = await mkdtemp(join(tmpdir(), "rivora-portal-chromium-"));
  ctx = await chromium.launchPersistentContext(profile, { executablePath: chromiumPath, headless: true, viewport: { width: 1280, height: 900 } });
  page = ctx.pages()[0] ?? (await ctx.newPage());
  page.on("pageerror", (e) => pageErrors.push(String(e)));
  page.on("console", (m) => {
    if (m.type() === "error") pageErrors.push(m.text());
  });
  page.on("response", record);
});

afterAll(async () => {
  await ctx?.close();
  await erp?.close();
  await own?.close();
  await flaky?.close();
  await dev?.stop();
  if (profile) await rm(profile, { recursive: true, force: true });
  if (binDir) await rm(binDir, { recursive: true, force: true });
});

describe("customer portal in Chromium against rivora dev", () => {
  let subId = "";
  let testEventId = "";

  it("c1 signs in on its subscriptions and has no operator page", async () => {
    recording = true;
    await signIn(page, dev, c1.token, c1.name);
    await page.getByRole("heading", { name: "Your subscriptions" }).waitFor();
    await page.getByTestId("customer").getByText("c1").waitFor();
    const nav = (await page.getByRole("navigation", { name: "Pages" }).getByRole("link").allTextContents()).sort();
    expect(nav).toEqual(["Dead letters", "Events", "Subscriptions"]);
    // The subscription the admin made for c1 is listed; c2's are not.
    await page.locator(`tr[data-id="${c1Flaky}"]`).waitFor();
    // An operator page's address opens the portal instead.
    for (const hash of ["#/destinations", "#/destination/erp", "#/audit", "#/agents"]) {
      await page.goto(`${dev.url}/console/#/events`);
      await page.getByRole("heading", { name: "Your events" }).waitFor();
      await page.goto(`${dev.url}/console/${hash}`);
      await page.getByRole("heading", { name: "Your subscriptions" }).waitFor();
      expect(await page.getByRole("heading", { name: /^(Destinations?|Audit|Agents)\b/ }).count(), hash).toBe(0);
    }
  });

  it("creates a subscription with its own secret; a path on a shared destination is refused", async () => {
    const form = page.getByTestId("create-subscription");
    await form.getByLabel("Destination", { exact: true }).fill("erp");
    // Types are comma-separated: "order created" is not two types.
    await form.getByLabel("Event types").fill("order created");
    await form.getByRole("button", { name: "Create subscription" }).click();
    await page.getByRole("alert").getByText('Create failed: event type "order created" has a space: separate types with commas').waitFor();
    await form.getByLabel("Event types").fill("order.*");
    // A filter that does not compile: the column, and the filter quoted
    // with a caret under it, in a fixed-width font.
    await form.getByLabel("Filter (CEL)").fill('data.name == "café" && data.amount >> 100');
    await form.getByRole("button", { name: "Create subscription" }).click();
    const refusal = page.locator(".status.error");
    await refusal.getByText(/filter does not compile at column 37: syntax error/).waitFor();
    const snippet = refusal.locator("code.snippet");
    expect(await snippet.textContent()).toBe(`    data.name == "café" && data.amount >> 100\n    ${" ".repeat(36)}^`);
    expect(await snippet.evaluate((e) => getComputedStyle(e).whiteSpace)).toBe("pre");
    await form.getByLabel("Filter (CEL)").fill('data.amount > 100 && data.currency == "EUR" || data.priority == "high"');
    await form.locator('select[name="target"]').selectOption("path");
    await form.getByLabel("Path or URL").fill("/in/c1");
    await form.getByLabel("Sign with a secret of its own").check();
    await form.getByRole("button", { name: "Create subscription" }).click();
    // A path could speak for another customer at the shared partner.
    await page.locator(".status.error").getByText(/is shared by the operators' customers/).waitFor();
    await form.locator('select[name="target"]').selectOption("");
    await form.getByRole("button", { name: "Create subscription" }).click();
    await page.getByTestId("secret").waitFor();
    expect(await page.getByTestId("secret").textContent()).toMatch(/^whsec_/);
    const mine = await eventually("the new subscription", async () => (await listSubscriptions("c1")).find((s) => s.destinationId === "erp"));
    subId = mine.id;
    await page.locator(`tr[data-id="${subId}"]`).waitFor();
    expect(await page.locator(`tr[data-id="${subId}"]`).textContent()).not.toContain("/in/c1");
    // At 1,280 px the table fits its box: the State column and the
    // Pause button are on the screen, not scrolled off to the right.
    const wrap = page.getByTestId("my-subscriptions").locator(".table-wrap");
    const [inner, box] = await wrap.evaluate((w) => [w.scrollWidth, w.clientWidth]);
    expect(inner).toBeLessThanOrEqual(box!);
    // Two subscriptions, two Pause buttons: each names its subscription.
    await page.getByRole("button", { name: `Pause subscription ${c1Flaky}`, exact: true }).waitFor();
    await page.getByRole("button", { name: `Pause subscription ${subId}`, exact: true }).waitFor();
    expect(await repeatedButtonNames(page)).toEqual([]);
    expect(await repeatedFieldNames(page)).toEqual([]);
    await shot("portal-subscriptions.png");
  });

  it("sends a test event and sees it delivered at the destination's URL", async () => {
    await page.locator(`tr[data-id="${subId}"] a`).first().click();
    await page.getByRole("heading", { name: `Subscription ${subId}` }).waitFor();
    const form = page.getByTestId("test-event");
    const type = form.locator('select[name="test-type"]');
    await type.locator('option[value="order.created"]').waitFor({ state: "attached" });
    await type.selectOption("order.created");
    await form.getByRole("button", { name: "Send test event" }).click();
    const ok = page.locator(".actions .status.ok");
    await ok.getByText(/^Test event \S+ \(order\.created\) accepted/).waitFor();
    testEventId = /^Test event (\S+) /.exec((await ok.textContent()) ?? "")![1]!;
    await page.locator(`tr[data-event="${testEventId}"][data-state="delivered"]`).waitFor({ timeout: 30_000 });
    const got = erp.received.find((r) => r.id === testEventId);
    expect(got?.url).toBe("/hook");
    expect(got?.headers["webhook-signature"]).toMatch(/^v1,/);
    await shot("portal-subscription.png");
  });

  it("rotates the secret and shows the new one once", async () => {
    // Enter in the grace submits the rotation.
    await page.locator('input[name="grace"]').press("Enter");
    await page.locator(".actions").getByTestId("secret").waitFor();
    expect(await page.locator(".actions").getByTestId("secret").textContent()).toMatch(/^whsec_/);
    await page.getByTestId("subscription").getByText(/signs too until/).waitFor({ timeout: 10_000 });
  });

  it("pauses and resumes from the list", async () => {
    await page.getByRole("link", { name: "Subscriptions", exact: true }).click();
    const row = page.locator(`tr[data-id="${subId}"]`);
    await row.getByRole("button", { name: "Pause" }).click();
    await page.locator(`tr[data-id="${subId}"][data-paused="true"]`).waitFor({ timeout: 10_000 });
    expect((await listSubscriptions("c1")).find((s) => s.id === subId)?.paused).toBe(true);
    await page.locator(`tr[data-id="${subId}"]`).getByRole("button", { name: "Resume" }).click();
    await page.locator(`tr[data-id="${subId}"][data-paused="false"]`).waitFor({ timeout: 10_000 });
  });

  it("lists its events per subscription and opens one", async () => {
    await page.getByRole("link", { name: "Events", exact: true }).click();
    await page.locator('select[name="subscription"]').selectOption(subId);
    await page.getByRole("button", { name: "List events" }).click();
    await page.getByTestId("my-events").locator(`tr[data-event="${testEventId}"]`).waitFor();
    await page.getByTestId("my-events").getByRole("link", { name: testEventId }).click();
    await page.getByTestId("event").getByText(`Event ${testEventId}`).waitFor();
    await page.getByTestId("event").getByText("delivered").first().waitFor();
    await shot("portal-events.png");
  });

  it("a failed look-up says so until the next one, and leaves no other event shown", async () => {
    // The event shown above stays only while it is the one asked for.
    await page.locator('input[name="event-id"]').fill("01900000-0000-7000-8000-00000000dead");
    await page.getByRole("button", { name: "Look up" }).click();
    const failed = page.getByRole("alert").getByText(/^Look-up failed: .*not found/);
    await failed.waitFor();
    expect(await page.getByTestId("event").textContent()).toBe("");
    // The events list polls beside it: the error outlives its next poll
    // (which draws the list anew).
    const drawn = await page.getByTestId("my-events").locator("table").elementHandle();
    await page.waitForFunction((table) => !table?.isConnected, drawn, { timeout: 20_000 });
    expect(await failed.count()).toBe(1);
  });

  it("adds its own endpoint, sees it listed, and deletes it after a confirmation", async () => {
    await page.getByRole("link", { name: "Subscriptions", exact: true }).click();
    const box = page.getByTestId("endpoints");
    await box.getByLabel("Endpoint id").fill("c1-portal-hooks");
    await box.getByLabel("URL").fill(`${own.base}/c1-own`);
    await box.getByRole("button", { name: "Add endpoint" }).click();
    await box.getByTestId("secret").waitFor();
    // Said beside the form, which is ready for another.
    await box.getByRole("status").getByText("Endpoint c1-portal-hooks added").waitFor();
    expect(await box.getByLabel("Endpoint id").inputValue()).toBe("");
    expect(await box.getByLabel("URL").inputValue()).toBe("");
    const endpointRow = box.locator('tr[data-endpoint="c1-portal-hooks"]');
    await endpointRow.waitFor();
    const deleteUrl = "**/rivora.v1.AdminService/DeleteDestination";
    // A refused delete: the row leaves at once, and comes back with the error.
    let refuse!: () => void;
    const refused = new Promise<void>((r) => (refuse = r));
    await page.route(deleteUrl, async (route) => {
      await refused;
      await route.fulfill({ status: 400, contentType: "application/json", body: JSON.stringify({ code: "failed_precondition", message: "held by the test" }) });
    });
    let asked = "";
    page.once("dialog", (d) => {
      asked = d.message();
      void d.accept();
    });
    await box.getByRole("button", { name: "Delete endpoint c1-portal-hooks", exact: true }).click();
    await endpointRow.waitFor({ state: "detached", timeout: 1_000 });
    // The question says what the server does: it refuses while subscriptions deliver there.
    expect(asked).toContain("Rivora refuses otherwise and says which subscriptions to delete first");
    expect(asked).not.toContain("stop receiving events");
    refuse();
    await box.getByRole("alert").getByText(/^Deleting c1-portal-hooks failed: held by the test/).waitFor();
    await endpointRow.waitFor();
    await page.unroute(deleteUrl);
    // A delete that goes through: the row leaves before the answer, and
    // does not come back.
    let answer!: () => void;
    const answered = new Promise<void>((r) => (answer = r));
    await page.route(deleteUrl, async (route) => {
      await answered;
      await route.continue();
    });
    page.once("dialog", (d) => void d.accept());
    await box.getByRole("button", { name: "Delete endpoint c1-portal-hooks", exact: true }).click();
    await endpointRow.waitFor({ state: "detached", timeout: 1_000 });
    answer();
    await page.getByRole("status").getByText("Endpoint c1-portal-hooks deleted.").waitFor();
    await page.unroute(deleteUrl);
    expect(await endpointRow.count()).toBe(0);
    expect((await rpc<{ destinations?: { id: string }[] }>(dev, dev.token, "rivora.v1.AdminService/ListDestinations", {})).destinations?.map((d) => d.id)).not.toContain("c1-portal-hooks");
  });

  it("opens Dead letters on its counts per subscription, and lists a row's", async () => {
    await page.getByRole("link", { name: "Dead letters", exact: true }).click();
    const row = page.getByTestId("dead-letter-stats").locator(`tr[data-subscription="${c1Flaky}"]`);
    await row.waitFor();
    expect(await row.locator("td.num").first().textContent()).toBe(String(c1Dead));
    expect(await page.getByTestId("dead-letter-stats").locator("tbody tr").count()).toBe(1);
    await row.getByRole("button", { name: "Show" }).click();
    await page.getByTestId("dead-letters").getByText(`${c1Dead} dead letters`).waitFor();
    await page.getByTestId("dead-letters").locator("button.link").first().click();
    await page.getByTestId("dead-letter").getByText("Payload").waitFor();
    await page.getByRole("button", { name: "Count" }).click();
    await page.getByTestId("replay-result").getByText(new RegExp(`^${c1Dead} dead letters? would be replayed`)).waitFor();
    await shot("portal-dead-letters.png");
  });

  it("deletes a subscription with pending events only after a confirmation", async () => {
    await page.goto(`${dev.url}/console/#/subscription/${subId}`);
    await page.getByRole("button", { name: "Pause", exact: true }).click();
    await page.locator(".status.error").getByText("Pause needs a reason").waitFor();
    expect(await repeatedFieldNames(page)).toEqual([]);
    await page.getByLabel("Reason for pausing").fill("hold for the delete test");
    await page.getByRole("button", { name: "Pause", exact: true }).click();
    await page.getByTestId("subscription").getByText("paused").first().waitFor({ timeout: 10_000 });
    await page.getByTestId("test-event").getByRole("button", { name: "Send test event" }).click();
    await page.locator(".actions .status.ok").getByText(/^Test event \S+ \(order\.created\) accepted/).waitFor();
    const held = /^Test event (\S+) /.exec((await page.locator(".actions .status.ok").textContent()) ?? "")![1]!;
    await page.getByTestId("subscription").locator('dd[data-field="Pending"]').getByText("1").waitFor({ timeout: 10_000 });
    // The browser asks first, naming the subscription.
    let asked = "";
    page.once("dialog", (d) => {
      asked = d.message();
      void d.accept();
    });
    await page.getByRole("button", { name: "Delete subscription" }).click();
    await page.getByTestId("delete-confirm").getByRole("button", { name: "Delete anyway" }).waitFor();
    expect(asked).toContain(`Delete subscription ${subId}?`);
    // What deleting anyway does, as docs/subscriptions.md says: the dead
    // letters it makes cannot be replayed.
    const confirmText = (await page.getByTestId("delete-confirm").textContent()) ?? "";
    expect(confirmText).toContain("They cannot be replayed or resent");
    expect(confirmText).not.toContain("you can still replay");
    // Refused: it is still there.
    expect((await listSubscriptions("c1")).some((s) => s.id === subId)).toBe(true);
    await page.getByRole("button", { name: "Delete anyway" }).click();
    await page.getByRole("heading", { name: "Your subscriptions" }).waitFor();
    // The list says what the delete did.
    await page.getByRole("status").getByText(`Deleted ${subId}; its 1 pending event went to the dead letters (reason deleted, not replayable).`).waitFor();
    await eventually("the subscription gone", async () => !(await listSubscriptions("c1")).some((s) => s.id === subId));
    // Its pending event became a dead letter (reason deleted), not dropped.
    await eventually("the held event dead-lettered", async () => {
      const r = await rpc<{ deadLetters?: { event?: { eventId?: string }; reason?: string }[] }>(dev, dev.token, "rivora.v1.ArchiveService/ListDeadLetters", { filter: { destinationId: "erp", customerId: "c1" } });
      return (r.deadLetters ?? []).some((d) => d.event?.eventId === held && d.reason === "DEAD_REASON_DELETED");
    }, 30_000);
  });

  it("never showed c2's subscriptions or data", async () => {
    recording = false;
    const text = (await page.locator("body").textContent()) ?? "";
    for (const id of c2Subs) expect(text).not.toContain(id);
    // Asked by id, c2's subscription is not found, as an absent one.
    await page.goto(`${dev.url}/console/#/subscription/${c2Subs[0]}`);
    await page.getByRole("alert").getByText(/not found/).waitFor();
    expect(c1Answers.length).toBeGreaterThan(10);
    for (const a of c1Answers) {
      const body = a.body.toString("latin1");
      for (const id of [...c2Subs, c2Marker]) expect(body.includes(id), `${a.url} answered c2's ${id}`).toBe(false);
    }
  });
});

describe("operators' Subscriptions view", () => {
  it("shows every customer's subscriptions per destination and pauses one with a reason", async () => {
    await page.getByRole("button", { name: "Sign out" }).click();
    await signIn(page, dev, operator.token, operator.name);
    await page.getByRole("link", { name: "Subscriptions", exact: true }).click();
    const flakyGroup = page.locator('section[data-group="flaky"]');
    await flakyGroup.locator(`tr[data-id="${c1Flaky}"]`).waitFor();
    await flakyGroup.locator(`tr[data-id="${c2Subs[1]}"]`).waitFor();
    await page.locator('section[data-group="erp"]').locator(`tr[data-id="${c2Subs[0]}"]`).waitFor();
    expect(await repeatedButtonNames(page)).toEqual([]);
    expect(await repeatedFieldNames(page)).toEqual([]);
    await page.getByLabel("Reason for pausing").fill("partner maintenance");
    await flakyGroup.locator(`tr[data-id="${c2Subs[1]}"]`).getByRole("button", { name: "Pause" }).click();
    await page.locator(`tr[data-id="${c2Subs[1]}"][data-paused="true"]`).waitFor({ timeout: 15_000 });
    expect((await listSubscriptions("c2")).find((s) => s.id === c2Subs[1])?.paused).toBe(true);
    await shot("subscriptions.png");
    const audit = JSON.parse(await rivoractl(bins.rivoractl, dev, dev.token, "audit", "-o", "json")) as { author: string; reason?: string }[];
    expect(audit.some((a) => a.author === operator.name && a.reason === "partner maintenance")).toBe(true);
  });

  it("shows a destination's subscriptions per customer, from the destination page", async () => {
    await page.goto(`${dev.url}/console/#/destination/flaky`);
    await page.getByRole("link", { name: "Subscriptions to it →" }).click();
    await page.locator('section[data-group="c1"]').locator(`tr[data-id="${c1Flaky}"]`).waitFor();
    await page.locator('section[data-group="c2"]').locator(`tr[data-id="${c2Subs[1]}"]`).waitFor();
    expect(await page.locator('section[data-group="c2"]').locator(`tr[data-id="${c2Subs[0]}"]`).count()).toBe(0);
  });

  it("opens Dead letters on the counts per destination, newest first", async () => {
    await page.getByRole("link", { name: "Dead letters", exact: true }).click();
    const stats = page.getByTestId("dead-letter-stats");
    await stats.locator('tr[data-destination="flaky"]').waitFor();
    // flaky holds c1's and c2's; erp the one a forced delete archived, the newest.
    expect(await stats.locator('tr[data-destination="flaky"] td.num').first().textContent()).toBe(String(c1Dead + 2));
    expect(await stats.locator("tbody tr").first().getAttribute("data-destination")).toBe("erp");
    expect(await repeatedButtonNames(page)).toEqual([]);
    await shot("dead-letters-overview.png");
    // erp's dead letter is the deleted subscription's: a replay refuses it,
    // and the page says why in its own words (no command-line flags), as
    // a status a screen reader reads.
    await stats.locator('tr[data-destination="erp"]').getByRole("button", { name: /^Show/ }).click();
    await page.getByTestId("dead-letters").getByText("1 dead letter").waitFor();
    await page.getByRole("button", { name: "Count" }).click();
    const refusal = page.getByRole("status").filter({ hasText: "a replay would be refused" });
    await refusal.waitFor();
    const said = (await refusal.textContent()) ?? "";
    expect(said).toContain("was deleted");
    expect(said).not.toMatch(/--[a-z]/);
  });

  it("logged no error in the page", () => {
    // The refusals the scenario provokes (a subscription with pending
    // events, c2's id, listings a customer token may not make) are 4xx
    // answers Chromium logs as failed resources; anything else is a bug.
    expect(pageErrors.filter((e) => !/^Failed to load resource: the server responded with a status of 4\d\d/.test(e))).toEqual([]);
  });
});
