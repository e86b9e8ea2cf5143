// Dead letters: find them, read one, replay the filtered set.
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { DeadReason, type DeadLetter } from "../../../sdk/typescript/src/gen/rivora/v1/event_pb.js";
import type { DeadLetterFilter } from "../../../sdk/typescript/src/gen/rivora/v1/deadletters_pb.js";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { DeadLetterFilterSchema } from "../../../sdk/typescript/src/gen/rivora/v1/deadletters_pb.js";
import { archive, errorText, when } from "../api.js";
import { field, h, replace, status, table } from "../dom.js";
import { can, formatCount } from "../format.js";
import type { Page } from "../main.js";

export const reasonNames: Record<number, string> = {
  [DeadReason.UNSPECIFIED]: "unknown",
  [DeadReason.MAX_ATTEMPTS]: "max attempts",
  [DeadReason.WINDOW]: "window",
  [DeadReason.DELETED]: "deleted",
  [DeadReason.MANUAL]: "manual",
};

export const deadLettersPage: Page = (main, me) => {
  const st = status();
  const dest = h("input", { type: "text", name: "destination" });
  const cust = h("input", { type: "text", name: "customer" });
  const lane = h("input", { type: "text", name: "lane" });
  const reason = h(
    "select",
    { name: "reason" },
    h("option", { value: "" }, "any"),
    ...[DeadReason.MAX_ATTEMPTS, DeadReason.WINDOW, DeadReason.DELETED, DeadReason.MANUAL].map((r) => h("option", { value: String(r) }, reasonNames[r]!)),
  );
  const since = h("input", { type: "datetime-local", name: "since" });
  const until = h("input", { type: "datetime-local", name: "until" });
  const results = h("div", { "data-testid": "dead-letters" });
  const detail = h("section", { class: "detail", "data-testid": "dead-letter" });
  const replayBox = h("section", { class: "actions" });
  const form = h(
    "form",
    { class: "filters" },
    field("Destination", dest),
    field("Customer", cust),
    field("Lane", lane),
    field("Reason", reason),
    field("Since", since),
    field("Until", until),
    h("button", { type: "submit" }, "Search"),
  );
  replace(main, h("h1", {}, "Dead letters"), form, st.el, results, detail, replayBox);

  const filter = (): MessageInitShape<typeof DeadLetterFilterSchema> => ({
    destinationId: dest.value.trim(),
    customerId: cust.value.trim(),
    laneKey: lane.value.trim(),
    since: since.value ? timestampFromDate(new Date(since.value)) : undefined,
    until: until.value ? timestampFromDate(new Date(until.value)) : undefined,
    reason: reason.value === "" ? DeadReason.UNSPECIFIED : (Number(reason.value) as DeadReason),
  });

  const search = async (): Promise<void> => {
    try {
      const res = await archive.listDeadLetters({ filter: filter(), limit: 500 });
      const rows = res.deadLetters;
      replace(
        results,
        table(`${formatCount(rows.length)} dead letters${res.truncated ? " (more matched: narrow the filter)" : ""}`, [
          { label: "Event", cell: (d) => h("button", { type: "button", class: "link", onclick: () => void show(d) }, d.event?.eventId ?? "") },
          { label: "Destination", cell: (d) => d.event?.destinationId ?? "" },
          { label: "Customer", cell: (d) => d.event?.customerId ?? "" },
          { label: "Lane", cell: (d) => d.event?.laneKey ?? "" },
          { label: "Reason", cell: (d) => reasonNames[d.reason] ?? "" },
          { label: "Attempts", cell: (d) => String(d.attempts), className: "num" },
          { label: "Last status", cell: (d) => (d.lastStatus ? String(d.lastStatus) : "none") },
          { label: "Dead at", cell: (d) => when(d.deadAt) },
        ], rows, undefined, "No dead letter matches."),
      );
      st.clear();
    } catch (err) {
      st.error(`Search failed: ${errorText(err)}`);
    }
  };

  const show = async (d: DeadLetter): Promise<void> => {
    try {
      const r = await archive.getDeadLetter({ eventId: d.event?.eventId ?? "", destinationId: d.event?.destinationId ?? "" });
      const dl = r.deadLetter!;
      const ev = dl.event!;
      replace(
        detail,
        h("h2", {}, `Dead letter ${ev.eventId}`),
        h(
          "dl",
          {},
          ...(
            [
              ["Destination", ev.destinationId],
              ["Customer", ev.customerId],
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
              ["Archive object", r.object],
            ] as const
          ).flatMap(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]),
        ),
        h("h3", {}, `Payload (${ev.contentType || "unknown type"}, ${ev.payload.length} bytes)`),
        h("pre", { class: "payload" }, new TextDecoder("utf-8", { fatal: false }).decode(ev.payload)),
      );
    } catch (err) {
      st.error(`Could not read the dead letter: ${errorText(err)}`);
    }
  };

  form.addEventListener("submit", (e) => {
    e.preventDefault();
    void search();
    drawReplay();
  });

  // Replay: a dry-run count first, then a rate, a progress bar and the result.
  const rate = h("input", { type: "number", name: "replay-rate", min: "0", step: "any", placeholder: "as fast as ingest takes them" });
  const countBtn = h("button", { type: "button" }, "Count");
  const replayBtn = h("button", { type: "button", disabled: true }, "Replay");
  const progress = h("progress", { max: 1, value: 0, "aria-label": "Replay progress" });
  const rst = status();
  const result = h("p", { "data-testid": "replay-result" });
  let counted: DeadLetterFilter | undefined;
  const drawReplay = (): void => {
    if (!can(me.role, "steer")) return;
    replayBtn.disabled = true;
    counted = undefined;
    result.textContent = "";
    replace(
      replayBox,
      h("h2", {}, "Replay the filtered set"),
      h("p", { class: "muted" }, "Replays every dead letter of the destination matching the filter (destination required). Count first."),
      countBtn,
      field("Rate per second", rate),
      replayBtn,
      progress,
      rst.el,
      result,
    );
  };
  countBtn.addEventListener("click", () => {
    void (async () => {
      try {
        const f = filter();
        let total = 0n;
        for await (const r of archive.replay({ filter: f, dryRun: true })) total = r.total;
        counted = f as DeadLetterFilter;
        result.textContent = `${formatCount(total)} dead letters would be replayed.`;
        progress.max = Math.max(1, Number(total));
        progress.value = 0;
        replayBtn.disabled = total === 0n;
        rst.clear();
      } catch (err) {
        rst.error(`Count failed: ${errorText(err)}`);
      }
    })();
  });
  replayBtn.addEventListener("click", () => {
    if (!counted) return;
    replayBtn.disabled = true;
    void (async () => {
      try {
        const r0 = rate.value ? Number(rate.value) : undefined;
        let last = { total: 0n, replayed: 0n, skipped: 0n, done: false };
        for await (const r of archive.replay({ filter: counted, ratePerSecond: r0 })) {
          last = r;
          progress.max = Math.max(1, Number(r.total));
          progress.value = Number(r.replayed + r.skipped);
          result.textContent = `Replaying: ${formatCount(r.replayed)} replayed, ${formatCount(r.skipped)} skipped of ${formatCount(r.total)}.`;
        }
        result.textContent = `${last.done ? "Done" : "Stopped"}: ${formatCount(last.replayed)} replayed, ${formatCount(last.skipped)} skipped (already replayed) of ${formatCount(last.total)}.`;
        rst.clear();
      } catch (err) {
        rst.error(`Replay failed: ${errorText(err)}`);
      }
    })();
  });
  drawReplay();
  return () => {};
};
