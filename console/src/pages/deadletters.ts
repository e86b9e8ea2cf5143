// Dead letters: where they are (counts, newest first), a row's dead
// letters, one dead letter, and replaying a filtered set.
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { DeadReason, type DeadLetter } from "../../../sdk/typescript/src/gen/rivora/v1/event_pb.js";
import type { DeadLetterCount, DeadLetterFilter, DeadLetterFilterSchema } from "../../../sdk/typescript/src/gen/rivora/v1/deadletters_pb.js";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { archive, date, errorText, when } from "../api.js";
import { busy, disable, isBusy } from "../busy.js";
import { currentCustomer, customerPicker } from "../customer.js";
import { archiveNotice, foldStats, type StatCount, type StatRow, type UnreadLedger } from "../deadletterstats.js";
import { field, h, replace, status, submitForm, table } from "../dom.js";
import { can, deletedSubscriptionsText, formatCount, utcInput, withoutCliHints } from "../format.js";
import { loadLine, type LoadLine } from "../loadline.js";
import type { Page } from "../main.js";
import { poll } from "../poll.js";

// utcTimestamp is a datetime-local input's value, read as UTC (utcInput).
function utcTimestamp(value: string): ReturnType<typeof timestampFromDate> | undefined {
  const d = utcInput(value);
  return d === undefined ? undefined : timestampFromDate(d);
}

function statCount(c: DeadLetterCount): StatCount {
  return {
    destinationId: c.destinationId,
    customerId: c.customerId,
    subscriptionId: c.subscriptionId,
    reason: reasonNames[c.reason] ?? "unknown",
    count: Number(c.count),
    replayed: Number(c.replayed),
    oldestMs: date(c.oldest)?.getTime(),
    newestMs: date(c.newest)?.getTime(),
  };
}

function stamp(ms: number | undefined): string {
  return ms === undefined ? "" : new Date(ms).toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
}

// The page reads the archive (every object of the window, for the counts):
// it refreshes slower than the pages that ask agents' memory.
const every = 10_000;

export const reasonNames: Record<number, string> = {
  [DeadReason.UNSPECIFIED]: "unknown",
  [DeadReason.MAX_ATTEMPTS]: "max attempts",
  [DeadReason.WINDOW]: "window",
  [DeadReason.DELETED]: "deleted",
  [DeadReason.MANUAL]: "manual",
  [DeadReason.IDEMPOTENCY_CONFLICT]: "idempotency conflict",
};

// #/dead-letters opens on where the dead letters are (per destination; for
// a customer, per subscription); #/dead-letters/<destination>[/<subscription>]
// lists one row's dead letters.
export const deadLettersPage: Page = (main, me, args) => {
  const self = can(me.role, "self-serve");
  const customer = self ? currentCustomer(me) : "";
  const st = status(); // reading one dead letter
  const dest = h("input", { type: "text", name: "destination" });
  const cust = h("input", { type: "text", name: "customer" });
  const sub = h("input", { type: "text", name: "subscription" });
  const lane = h("input", { type: "text", name: "lane" });
  const reason = h(
    "select",
    { name: "reason" },
    h("option", { value: "" }, "any"),
    ...[DeadReason.MAX_ATTEMPTS, DeadReason.WINDOW, DeadReason.DELETED, DeadReason.MANUAL, DeadReason.IDEMPOTENCY_CONFLICT].map((r) => h("option", { value: String(r) }, reasonNames[r]!)),
  );
  const since = h("input", { type: "datetime-local", name: "since" });
  const until = h("input", { type: "datetime-local", name: "until" });
  const overview = h("section", { "data-testid": "dead-letter-stats" });
  const counts = loadLine("the dead-letter counts");
  // The search's: nothing until a search is made.
  const found = loadLine("the matching dead letters", { idle: true });
  const results = h("div", { "data-testid": "dead-letters" });
  // One dead letter, as it was read when chosen: the refresh leaves it be.
  const detail = h("section", { class: "detail", "data-testid": "dead-letter" });
  const replayBox = h("section", { class: "actions" });
  // While the archive cannot be read, the counts and lists come from the
  // agents' ledgers: the banner says so, from the latest answer.
  const archiveBanner = h("div", { class: "banner", role: "status", "aria-live": "polite", "data-testid": "archive-unreachable", hidden: true });
  const archiveAnswer = (why: string, unread: UnreadLedger[]): void => {
    const lines = archiveNotice(why, unread);
    const text = lines.join("\n");
    if (archiveBanner.dataset.text === text) return; // a screen reader hears a change once
    archiveBanner.dataset.text = text;
    archiveBanner.hidden = lines.length === 0;
    replace(archiveBanner, ...lines.map((l) => h("p", {}, l)));
  };
  const form = h(
    "form",
    { class: "filters" },
    field("Destination", dest),
    self ? "" : field("Customer", cust),
    field("Subscription", sub),
    field("Lane", lane),
    field("Reason", reason),
    field("Since (UTC)", since),
    field("Until (UTC)", until),
    h("button", { type: "submit" }, "Search"),
  );
  replace(
    main,
    h("h1", {}, "Dead letters"),
    self ? customerPicker(me) : "",
    archiveBanner,
    st.el,
    counts.el,
    overview,
    h("h2", {}, "Narrow the search"),
    form,
    found.el,
    results,
    detail,
    replayBox,
  );

  const filter = (): MessageInitShape<typeof DeadLetterFilterSchema> => ({
    destinationId: dest.value.trim(),
    customerId: self ? customer : cust.value.trim(),
    subscriptionId: sub.value.trim(),
    laneKey: lane.value.trim(),
    since: utcTimestamp(since.value),
    until: utcTimestamp(until.value),
    reason: reason.value === "" ? DeadReason.UNSPECIFIED : (Number(reason.value) as DeadReason),
  });

  // The filter of the last search: the refresh lists it again, whatever
  // the form holds while someone types a new one.
  let searched: ReturnType<typeof filter> | undefined;

  // A new search: the last one's list goes (it answered another filter)
  // and the page says it loads until this one answers.
  const ask = (): void => {
    searched = filter();
    replace(results);
    found.again();
    void search();
    drawReplay();
  };

  // Choosing a row of the overview lists its dead letters.
  const choose = (destination: string, subscription: string): void => {
    dest.value = destination;
    sub.value = subscription;
    ask();
  };

  const loadStats = (): Promise<void> => drawStats(overview, counts, self, customer, choose, archiveAnswer);

  const search = async (): Promise<void> => {
    const f = searched;
    if (!f) return;
    try {
      const res = await archive.listDeadLetters({ filter: f, limit: 500 });
      if (f !== searched) return; // a newer search answers for the page
      archiveAnswer(res.archiveUnavailable, res.unreadLedgers);
      const rows = res.deadLetters;
      const more = res.moreUnarchived > 0n ? ` (${formatCount(res.moreUnarchived)} more wait in the ledgers: narrow the filter)` : res.truncated ? " (more matched: narrow the filter)" : "";
      // From the ledgers (the archive unreachable), a row says it is not archived yet.
      const archivedColumn = rows.some((d) => d.unarchived) ? [{ label: "Archived", cell: (d: DeadLetter) => (d.unarchived ? "not yet (in its ledger)" : "yes") }] : [];
      replace(
        results,
        table(`${deadLetters(rows.length)}${more}`, [
          { label: "Event", cell: (d) => h("button", { type: "button", class: "link", onclick: () => void show(d) }, d.event?.eventId ?? "") },
          { label: "Destination", cell: (d) => d.event?.destinationId ?? "" },
          { label: "Customer", cell: (d) => d.event?.customerId ?? "" },
          { label: "Subscription", cell: (d) => d.event?.subscriptionId ?? "" },
          { label: "Lane", cell: (d) => d.event?.laneKey ?? "" },
          { label: "Reason", cell: (d) => reasonNames[d.reason] ?? "" },
          { label: "Attempts", cell: (d) => String(d.attempts), className: "num" },
          { label: "Last status", cell: (d) => (d.lastStatus ? String(d.lastStatus) : "none") },
          { label: "Dead at", cell: (d) => when(d.deadAt) },
          // When a replay handled it; "not yet": the next replay sends it.
          // Before Replayed, which a wide table pushes out of view first.
          ...archivedColumn,
          { label: "Replayed", cell: (d) => when(d.replayedAt) || "not yet" },
        ], rows, (d) => ({ "data-event": d.event?.eventId ?? "", "data-destination": d.event?.destinationId ?? "" }), "No dead letter matches."),
      );
      found.ok();
    } catch (err) {
      if (f === searched) found.failed(err);
    }
  };

  const show = async (d: DeadLetter): Promise<void> => {
    try {
      const r = await archive.getDeadLetter({ eventId: d.event?.eventId ?? "", destinationId: d.event?.destinationId ?? "" });
      const dl = r.deadLetter!;
      const ev = dl.event!;
      replace(
        detail,
        h("h2", { tabindex: -1 }, `Dead letter ${ev.eventId}`),
        h(
          "dl",
          {},
          ...(
            [
              ["Destination", ev.destinationId],
              ["Customer", ev.customerId],
              ["Subscription", ev.subscriptionId || "—"],
              ["Lane", ev.laneKey],
              ["Type", ev.type],
              ["Accepted", when(ev.acceptedAt)],
              ["Attempts", String(dl.attempts)],
              ["First attempt", when(dl.firstAttemptAt)],
              ["Last attempt", when(dl.lastAttemptAt)],
              ["Last status", dl.lastStatus ? String(dl.lastStatus) : "no response"],
              ["Last error", dl.lastError || "none"],
              ["Reason", reasonNames[dl.reason] ?? ""],
              ["Dead at", when(dl.deadAt)],
              ["Archive object", dl.unarchived ? `not yet: waits in the ledger of partition ${dl.partition} (the archive is unreachable: ${r.archiveUnavailable})` : r.object],
            ] as const
          ).flatMap(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]),
        ),
        h("h3", {}, `Payload (${ev.contentType || "unknown type"}, ${ev.payload.length} bytes)`),
        h("pre", { class: "payload" }, new TextDecoder("utf-8", { fatal: false }).decode(ev.payload)),
      );
      st.clear();
      // It opens below the list: bring it into view, and the keyboard
      // (and a screen reader) to its heading.
      detail.scrollIntoView({ block: "start" });
      detail.querySelector<HTMLElement>("h2")?.focus({ preventScroll: true });
    } catch (err) {
      st.error(`Could not read the dead letter: ${errorText(err)}`);
    }
  };

  form.addEventListener("submit", (e) => {
    e.preventDefault();
    ask();
  });


  // Replay: a dry-run count first, then a rate, a progress bar and the result.
  const rate = h("input", { type: "number", name: "replay-rate", min: "0", step: "any", placeholder: "as fast as ingest takes them" });
  // Dead letters whose subscription was deleted refuse a replay; this
  // replays the others and leaves them in the archive.
  const skipDeleted = h("input", { type: "checkbox", name: "skip-deleted-subscriptions" });
  const countBtn = h("button", { type: "button" }, "Count");
  // Enter in the rate replays, once counted (a disabled Replay submits nothing).
  const replayBtn = h("button", { type: "submit", disabled: true }, "Replay");
  const progress = h("progress", { max: 1, value: 0, "aria-label": "Replay progress" });
  const rst = status("action");
  // What Count and Replay found, said to a screen reader as it changes
  // (aria-busy while a replay streams its progress: the end is said once).
  const result = h("p", { "data-testid": "replay-result", role: "status", "aria-live": "polite" });
  let counted: DeadLetterFilter | undefined;
  // countedSkip is the count's "leave deleted subscriptions' dead
  // letters" (a change of the box asks for another count).
  let countedSkip = false;
  const drawReplay = (): void => {
    if (!can(me.role, "steer") && !self) return;
    replayBtn.disabled = true;
    counted = undefined;
    result.textContent = "";
    replace(
      replayBox,
      h("h2", {}, "Replay the filtered set"),
      h("p", { class: "muted" }, "Replays every dead letter of the destination matching the filter (destination required), each lane in its order. Count first."),
      submitForm(
        {},
        replay,
        countBtn,
        field("Rate per second", rate),
        h("label", { class: "field check" }, skipDeleted, h("span", {}, skipDeletedLabel)),
        replayBtn,
        progress,
        rst.el,
        result,
      ),
    );
  };
  countBtn.addEventListener("click", () => {
    void busy(countBtn, "Counting…", async () => {
      try {
        const f = filter();
        const skip = skipDeleted.checked;
        let total = 0n;
        let skipped = 0n;
        let refused = "";
        let deleted = { n: 0n, named: "" };
        for await (const r of archive.replay({ filter: f, dryRun: true, skipDeletedSubscriptions: skip })) {
          [total, skipped, refused] = [r.total, r.skipped, r.refused];
          deleted = { n: r.deletedSubscriptionDeadLetters, named: deletedSubscriptionsText(r.deletedSubscriptions, r.deletedSubscriptionCount) };
        }
        const sent = total - skipped - deleted.n;
        progress.max = Math.max(1, Number(sent));
        progress.value = 0;
        if (refused) {
          // The replay itself would be refused: say why, and offer none
          // (but the box that leaves deleted subscriptions' dead letters).
          counted = undefined;
          replayBtn.disabled = true;
          const tick = deleted.n > 0n && !skip ? ` Tick “${skipDeletedLabel}” and count again to replay the others.` : "";
          result.textContent = `${formatCount(total)} match, but a replay would be refused: ${withoutCliHints(refused)}${tick}`;
          rst.clear();
          return;
        }
        counted = f as DeadLetterFilter;
        countedSkip = skip;
        const left = deleted.n > 0n ? ` ${deadLetters(deleted.n)} would stay in the archive: routed by ${deleted.named}, deleted since.` : "";
        result.textContent = `${deadLetters(sent)} would be replayed${skipped > 0n ? ` (${formatCount(skipped)} more match: sent by an earlier replay, or a later death of an event sent once)` : ""}.${left}`;
        replayBtn.disabled = sent === 0n;
        rst.clear();
      } catch (err) {
        rst.error(`Count failed: ${errorText(err)}`);
      }
    });
  });
  // A count holds for the filter it counted: a change of the form asks
  // for another, so Replay never sends a filter other than the one shown.
  const stale = (): void => {
    if (!counted) return;
    counted = undefined;
    replayBtn.disabled = true;
    result.textContent = "The filter changed: count again before replaying.";
  };
  form.addEventListener("input", stale);
  form.addEventListener("change", stale);
  skipDeleted.addEventListener("change", stale);
  function replay(): void {
    if (!counted || isBusy(replayBtn)) return;
    const f = counted;
    void busy(replayBtn, "Replaying…", async () => {
      result.setAttribute("aria-busy", "true");
      try {
        const r0 = rate.value ? Number(rate.value) : undefined;
        let last = { total: 0n, replayed: 0n, skipped: 0n, done: false, deletedSubscriptionDeadLetters: 0n, deletedSubscriptions: [] as string[], deletedSubscriptionCount: 0n };
        for await (const r of archive.replay({ filter: f, ratePerSecond: r0, skipDeletedSubscriptions: countedSkip })) {
          last = r;
          progress.max = Math.max(1, Number(r.total));
          progress.value = Number(r.replayed + r.skipped + r.deletedSubscriptionDeadLetters);
          result.textContent = `Replaying: ${formatCount(r.replayed)} replayed, ${formatCount(r.skipped)} skipped of ${formatCount(r.total)}.`;
        }
        const left =
          last.deletedSubscriptionDeadLetters > 0n
            ? ` ${deadLetters(last.deletedSubscriptionDeadLetters)} stay in the archive: routed by ${deletedSubscriptionsText(last.deletedSubscriptions, last.deletedSubscriptionCount)}, deleted since.`
            : "";
        result.textContent = `${last.done ? "Done" : "Stopped"}: ${formatCount(last.replayed)} replayed, ${formatCount(last.skipped)} skipped (sent by an earlier replay, stored already, or a later death of an event sent once) of ${formatCount(last.total)}.${left}`;
        rst.clear();
        void loadStats();
      } catch (err) {
        rst.error(`Replay failed: ${errorText(err)}`);
      } finally {
        result.removeAttribute("aria-busy");
        // Replayed once: another replay needs another count (unless one
        // was made meanwhile). The keyboard goes to Count (a disabled
        // Replay would drop it to the body).
        if (!counted) disable(replayBtn, countBtn);
      }
    });
    counted = undefined;
  }
  drawReplay();
  if (args[0]) choose(args[0], args[1] ?? "");
  // The counts and the last search refresh; the form, the open dead
  // letter and the replay box stay as they are.
  let first = true;
  const p = poll(async () => {
    await Promise.all([loadStats(), first ? undefined : search()]);
    first = false;
  }, every);
  return () => p.stop();
};

/**
 * drawStats draws what the page opens on: DeadLetterStats folded per
 * destination (operators) or per subscription (a customer, with its
 * customer filter), newest first; Show calls choose with the row, and
 * archiveAnswer hears whether the counts are the archive's or, while it
 * cannot be read, the agents' ledgers'.
 */
async function drawStats(
  box: HTMLElement,
  load: LoadLine,
  self: boolean,
  customer: string,
  choose: (destination: string, subscription: string) => void,
  archiveAnswer: (why: string, unread: UnreadLedger[]) => void,
): Promise<void> {
  try {
    const r = await archive.deadLetterStats({ filter: { customerId: customer }, bySubscription: self });
    archiveAnswer(r.archiveUnavailable, r.unreadLedgers);
    const rows = foldStats(r.counts.map(statCount), self ? "subscription" : "destination");
    replace(
      box,
      h("h2", {}, self ? "Your dead letters, per subscription" : "Dead letters per destination"),
      table(`${deadLetters(r.total)}, newest first. Choose a row to list them. Refreshed every ${every / 1000} s.`, [
        ...(self ? [{ label: "Subscription", cell: (x: StatRow) => x.subscriptionId || "none (sent to the destination)" }] : []),
        { label: "Destination", cell: (x) => x.destinationId },
        { label: "Dead letters", cell: (x) => formatCount(x.count), className: "num" },
        { label: "Replayed", cell: (x) => formatCount(x.replayed), className: "num" },
        ...(self ? [] : [{ label: "Customers", cell: (x: StatRow) => (x.customers.length > 3 ? `${x.customers.slice(0, 3).join(", ")} and ${x.customers.length - 3} more` : x.customers.join(", ")) }]),
        { label: "Reasons", cell: (x) => x.reasons.map(([why, n]) => `${why} ${formatCount(n)}`).join(", ") },
        { label: "Newest", cell: (x) => stamp(x.newestMs) },
        { label: "Oldest", cell: (x) => stamp(x.oldestMs) },
        {
          label: "",
          cell: (x) =>
            h(
              "button",
              { type: "button", "aria-label": x.subscriptionId ? `Show dead letters of subscription ${x.subscriptionId}` : `Show dead letters of destination ${x.destinationId}`, onclick: () => choose(x.destinationId, x.subscriptionId) },
              "Show",
            ),
        },
      ], rows, (x) => ({ "data-destination": x.destinationId, "data-subscription": x.subscriptionId }), "No dead letters: every event was delivered or is still on its way."),
    );
    load.ok();
  } catch (err) {
    // The last counts stay shown, under the notice.
    load.failed(err);
  }
}

/** "1 dead letter", "2 dead letters". */
function deadLetters(n: number | bigint): string {
  return `${formatCount(n)} dead letter${n === 1 || n === 1n ? "" : "s"}`;
}

// skipDeletedLabel is the replay box's checkbox that leaves the dead
// letters of deleted subscriptions in the archive.
const skipDeletedLabel = "Leave deleted subscriptions' dead letters in the archive";
