// Destinations: every destination's health at a glance, noisiest first.
import type { Destination, DestinationHealth } from "../../../sdk/typescript/src/gen/rivora/v1/admin_pb.js";
import { admin, seconds } from "../api.js";
import { field, h, replace, table, type Column } from "../dom.js";
import {
  displayState,
  formatCount,
  formatDuration,
  formatRate,
  formatShare,
  noisiest,
  sortRows,
  type DestinationRow,
  type SortKey,
} from "../format.js";
import { loadLine } from "../loadline.js";
import type { Page } from "../main.js";
import { interval, poll } from "../poll.js";

export function toRow(d: DestinationHealth): DestinationRow {
  return {
    id: d.destinationId,
    state: displayState(d),
    configuredRate: d.configuredRate,
    currentRate: d.currentRate,
    pending: Number(d.pendingEvents),
    inFlight: d.inFlight,
    throttledShare: d.throttledShare,
    serverErrorShare: d.serverErrorShare,
    noAnswerShare: d.noAnswerShare,
    clientErrorShare: d.clientErrorShare,
    oldestPendingAge: seconds(d.oldestPendingAge),
    drainTime: d.pendingEvents > 0n ? seconds(d.drainTime) : 0,
  };
}

/** A row for a destination no agent reports health of (yet). */
function listedRow(d: Destination): DestinationRow {
  const state = displayState({ state: "healthy", paused: d.paused, disabled: d.disabled });
  const rate = d.limits?.ratePerSecond ?? 0;
  return { id: d.id, state, configuredRate: rate, currentRate: 0, pending: 0, inFlight: 0, throttledShare: 0, serverErrorShare: 0, noAnswerShare: 0, clientErrorShare: 0, oldestPendingAge: undefined, drainTime: 0 };
}

// The destination list changes rarely; health is polled every interval.
const listEvery = 30_000;

// The table's order and filter outlive the page: a destination opened
// from the list and left with Back finds the list as it was, its row
// where it was left.
let key: SortKey = "noise";
let desc = true;
let filtered = "";

export const destinationsPage: Page = (main) => {
  let rows: DestinationRow[] = [];
  let known = new Set<string>();
  // The ids the last health snapshot named.
  let reported = new Set<string>();
  // What ListDestinations said, for destinations no agent reports health of.
  let listed = new Map<string, Destination>();
  let listedAt = 0;
  const load = loadLine("destinations");
  const summary = h("p", { class: "summary", "data-testid": "summary" });
  const holder = h("div", { "data-testid": "destinations" });
  // A filter by name: 1,000 rows are many to scroll. What is typed stays
  // across refreshes and is applied as it is typed.
  const filter = h("input", { type: "search", name: "filter", placeholder: "e.g. billing", autocomplete: "off", value: filtered });
  filter.addEventListener("input", () => {
    filtered = filter.value;
    draw();
  });
  replace(main, h("h1", {}, "Destinations"), summary, h("div", { class: "filters", role: "search" }, field("Filter by id", filter)), load.el, holder);

  const columns: { label: string; key: SortKey; cell: (r: DestinationRow) => string | Node; className?: string }[] = [
    { label: "Destination", key: "id", cell: (r) => h("a", { href: `#/destination/${encodeURIComponent(r.id)}` }, r.id) },
    { label: "State", key: "state", cell: (r) => h("span", { class: `state state-${r.state}` }, r.state) },
    { label: "Rate (configured)", key: "configuredRate", cell: (r) => formatRate(r.configuredRate), className: "num" },
    { label: "Rate (current)", key: "currentRate", cell: (r) => formatRate(r.currentRate), className: "num" },
    { label: "Pending", key: "pending", cell: (r) => formatCount(r.pending), className: "num" },
    { label: "In flight", key: "inFlight", cell: (r) => formatCount(r.inFlight), className: "num" },
    { label: "429 share", key: "throttledShare", cell: (r) => formatShare(r.throttledShare), className: "num" },
    { label: "5xx share", key: "serverErrorShare", cell: (r) => formatShare(r.serverErrorShare), className: "num" },
    { label: "No answer", key: "noAnswerShare", cell: (r) => formatShare(r.noAnswerShare), className: "num" },
    { label: "Other 4xx", key: "clientErrorShare", cell: (r) => formatShare(r.clientErrorShare), className: "num" },
    { label: "Oldest pending", key: "oldestPendingAge", cell: (r) => (r.oldestPendingAge === undefined ? "" : formatDuration(r.oldestPendingAge)), className: "num" },
    { label: "Drain time", key: "drainTime", cell: (r) => formatDuration(r.drainTime), className: "num" },
  ];

  const draw = (): void => {
    const noisy = noisiest(rows);
    const wanted = filter.value.trim().toLowerCase();
    const shown = wanted ? rows.filter((r) => r.id.toLowerCase().includes(wanted)) : rows;
    const sorted = sortRows(shown, key, desc);
    const cols: Column<DestinationRow>[] = columns.map((c) => ({
      label: c.label + (c.key === key ? (desc ? " ▼" : " ▲") : ""),
      cell: c.cell,
      className: c.className,
    }));
    const t = table(
      `${wanted ? `${shown.length} of ${rows.length} destinations (id contains “${filter.value.trim()}”)` : `${rows.length} destinations`}, sorted by ${key === "noise" ? "429 + 5xx + other 4xx + no-answer share (noisiest first)" : columns.find((c) => c.key === key)?.label}. Refreshed every ${interval / 1000} s.`,
      cols,
      sorted,
      (r) => ({ class: r.id === noisy ? "noisiest" : `row-${r.state}`, "data-id": r.id, "data-state": r.state }),
      wanted ? `No destination's id contains “${filter.value.trim()}”.` : "No destinations yet (rivoractl destinations create).",
    );
    // Header cells become sort buttons (keyboard reachable). Sorting
    // draws a new table: the keyboard stays on the header it pressed.
    t.querySelectorAll("th").forEach((th, i) => {
      const c = columns[i]!;
      const b = h("button", { type: "button", class: "sort", title: `Sort by ${c.label}`, "data-key": `sort-${c.key}` }, th.textContent ?? "");
      b.addEventListener("click", () => {
        desc = key === c.key ? !desc : c.key !== "id";
        key = c.key;
        draw();
        holder.querySelector<HTMLElement>(`button[data-key="sort-${c.key}"]`)?.focus({ preventScroll: true });
      });
      th.setAttribute("aria-sort", c.key === key ? (desc ? "descending" : "ascending") : "none");
      replace(th, b);
    });
    const sortNoise = h("button", { type: "button", "data-key": "sort-noise", onclick: () => ((key = "noise"), (desc = true), draw(), summary.querySelector<HTMLElement>('button[data-key="sort-noise"]')?.focus({ preventScroll: true })) }, "Sort by noise");
    const counts = rows.reduce<Record<string, number>>((m, r) => ((m[r.state] = (m[r.state] ?? 0) + 1), m), {});
    replace(
      summary,
      Object.entries(counts)
        .map(([s, n]) => `${n} ${s}`)
        .join(", ") || "",
      noisy ? h("span", { class: "noisy-note" }, ` · noisiest: `, h("a", { href: `#/destination/${encodeURIComponent(noisy)}` }, noisy)) : "",
      " ",
      sortNoise,
    );
    replace(holder, t);
  };

  const tick = async (): Promise<void> => {
    try {
      // The first tick lists destinations alongside the health snapshot.
      const first = listedAt === 0 ? admin.listDestinations({}) : undefined;
      first?.catch(() => {}); // awaited below; no unhandled rejection meanwhile
      const res = await admin.getDestinationHealth({});
      const got = new Map(res.destinations.map((d) => [d.destinationId, toRow(d)]));
      // Destinations without health yet (no agent reported) still show; the
      // list is fetched rarely, or when health names one it does not know,
      // or stops naming one it named (deleted: its listed row would have
      // stayed until the next listing, up to listEvery).
      const unknown = [...got.keys()].some((id) => !known.has(id));
      const vanished = [...reported].some((id) => !got.has(id));
      reported = new Set(got.keys());
      if (first || unknown || vanished || Date.now() - listedAt > listEvery) {
        const list = await (first ?? admin.listDestinations({}));
        // Health-only ids (Rivora's reserved notices destination) count as
        // known too, so they cost one listing, not one per tick.
        known = new Set([...list.destinations.map((d) => d.id), ...got.keys()]);
        listed = new Map(list.destinations.map((d) => [d.id, d]));
        listedAt = Date.now();
      }
      for (const [id, d] of listed) if (!got.has(id)) got.set(id, listedRow(d));
      rows = [...got.values()];
      draw();
      load.ok();
    } catch (err) {
      load.failed(err);
    }
  };
  const p = poll(tick);
  return () => p.stop();
};
