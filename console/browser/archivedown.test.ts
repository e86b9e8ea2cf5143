// The Dead letters page while the archive cannot be read, in real Chromium
// against a real `rivora dev` whose S3 endpoint refuses every connection:
// the events that died meanwhile wait in their partition's ledger, and the
// page lists and counts them from there under a banner that says so and
// why, each marked not archived yet.
import { mkdir, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { chromium, type BrowserContext, type Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { eventually, freePort, rpc, startDev, startPartner, type Dev, type Partner } from "../../testkit/ts/index.js";
import { buildBinaries, chromiumPath, signIn } from "./harness.js";

const artifacts = resolve(import.meta.dirname, "../test-artifacts");

let dev: Dev;
let refusing: Partner;
let ctx: BrowserContext;
let page: Page;
let dir: string;
let profile: string;
let ids: string[] = [];
const pageErrors: string[] = [];

beforeAll(async () => {
  await mkdir(artifacts, { recursive: true });
  dir = await mkdtemp(join(tmpdir(), "rivora-archivedown-"));
  const bins = await buildBinaries(dir);
  // Nothing listens on this port: every archive call is refused.
  const s3 = await freePort();
  dev = await startDev(bins.rivora, ["--s3-endpoint", `127.0.0.1:${s3}`, "--s3-insecure", "--s3-access-key", "rivora", "--s3-secret-key", "rivora-secret"]);
  refusing = await startPartner({ status: 400 });
  // One attempt: each event is a dead letter at once.
  await rpc(dev, dev.token, "rivora.v1.AdminService/CreateDestination", { id: "refusing", url: refusing.url, limits: { maxAttempts: 1 } });
  const r = await rpc<{ eventIds: string[] }>(dev, dev.token, "rivora.v1.IngestService/PublishBatch", {
    events: [
      { destinationId: "refusing", customerId: "acme", laneKey: "l1", type: "t", data: { i: 1 } },
      { destinationId: "refusing", customerId: "acme", laneKey: "l2", type: "t", data: { i: 2 } },
    ],
  });
  ids = r.eventIds;
  await eventually("both dead letters counted from the ledger", async () => {
    const s = await rpc<{ total?: string; archiveUnavailable?: string }>(dev, dev.token, "rivora.v1.ArchiveService/DeadLetterStats", { filter: {} });
    return Number(s.total ?? 0) === 2 && (s.archiveUnavailable ?? "") !== "";
  }, { timeoutMs: 120_000, everyMs: 500 });
  profile = await mkdtemp(join(tmpdir(), "rivora-archivedown-chromium-"));
  ctx = await chromium.launchPersistentContext(profile, { executablePath: chromiumPath, headless: true, viewport: { width: 1280, height: 800 } });
  page = ctx.pages()[0] ?? (await ctx.newPage());
  page.on("pageerror", (e) => pageErrors.push(String(e)));
});

afterAll(async () => {
  await ctx?.close();
  await refusing?.close();
  await dev?.stop();
  if (profile) await rm(profile, { recursive: true, force: true });
  if (dir) await rm(dir, { recursive: true, force: true });
});

describe("dead letters while the archive is unreachable", () => {
  it("counts and lists the ledgers' dead letters under a banner that says so", async () => {
    await signIn(page, dev, dev.token, "bootstrap");
    await page.getByRole("link", { name: "Dead letters", exact: true }).click();
    const banner = page.getByTestId("archive-unreachable");
    await banner.getByText("The archive is unreachable (").waitFor({ timeout: 60_000 });
    expect(await banner.textContent()).toContain("connection refused");
    expect(await banner.textContent()).toContain("the dead letters shown are those still waiting in the agents' ledgers");

    const row = page.getByTestId("dead-letter-stats").locator('tr[data-destination="refusing"]');
    await row.waitFor({ timeout: 30_000 });
    expect(await row.locator("td.num").first().textContent()).toBe("2");
    await row.getByRole("button", { name: "Show" }).click();
    const list = page.getByTestId("dead-letters");
    await list.getByText("2 dead letters").waitFor({ timeout: 60_000 });
    expect(await list.locator("th", { hasText: "Archived" }).count()).toBe(1);
    expect(await list.getByText("not yet (in its ledger)").count()).toBe(2);

    await list.locator(`tr[data-event="${ids[0]}"] button.link`).click();
    const detail = page.getByTestId("dead-letter");
    await detail.getByText("Payload").waitFor({ timeout: 60_000 });
    expect(await detail.textContent()).toContain("not yet: waits in the ledger of partition");
    await page.screenshot({ path: join(artifacts, "dead-letters-archive-down.png"), fullPage: true });
    expect(pageErrors).toEqual([]);
  });
});
