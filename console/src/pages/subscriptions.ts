// Subscriptions, as operators see them: every customer's, grouped per
// destination or per customer, with pause and resume for the roles that
// steer. The pieces every subscription table shows live here too.
import type { Subscription } from "../../../sdk/typescript/src/gen/rivora/v1/subscriptions_pb.js";
import { errorText, subscriptions } from "../api.js";
import { busy, drawnBusy, isBusy } from "../busy.js";
import { field, h, replace, status, table, type Child, type Column } from "../dom.js";
import { can, counted, formatCount } from "../format.js";
import { loadLine } from "../loadline.js";
import type { Page } from "../main.js";
import { poll } from "../poll.js";

/** The subscription's own state: paused holds its events. */
export function subState(s: Subscription): Child {
  return h("span", { class: `state state-${s.paused ? "paused" : "active"}`, "data-testid": "sub-state" }, s.paused ? "paused" : "active");
}

/** The destination's health as the answer carries it for this subscription. */
export function destState(s: Subscription): Child {
  const st = s.destinationState || "unknown";
  return h("span", { class: `state state-${st}` }, st);
}

export function subLink(s: Subscription): Child {
  return h("a", { href: `#/subscription/${encodeURIComponent(s.id)}` }, s.id);
}

/** Where deliveries go: the subscription's own URL, or the destination's. */
export function deliversTo(s: Subscription): string {
  return s.deliveryUrl || "the destination's URL";
}

export function signedWith(s: Subscription): string {
  return s.secretFingerprint ? `own secret (${s.secretFingerprint})` : "the destination's secret";
}

/** The key of a subscription's pause or resume call (busy.ts): its row's button is drawn anew by each refresh. */
export function pauseKey(s: Subscription): string {
  return `pause-resume subscription ${s.id}`;
}

/**
 * pauseButton pauses or resumes s; its accessible name says which
 * subscription (a table has one per row), its key keeps the keyboard on
 * it when Pause becomes Resume. Drawn while the call runs, it shows so.
 */
export function pauseButton(s: Subscription, act: (b: HTMLButtonElement, s: Subscription, pause: boolean) => void): HTMLElement {
  const what = s.paused ? "Resume" : "Pause";
  const b = h("button", { type: "button", "aria-label": `${what} subscription ${s.id}`, "data-key": "pause-resume" }, what);
  b.addEventListener("click", () => act(b, s, !s.paused));
  return drawnBusy(b, pauseKey(s));
}

/**
 * The columns every subscription table has, between its two ids and its
 * state. Their text wraps (style.css: .wrap): on one line, a URL and a
 * filter pushed the State column and the Pause button off a 1,280 px
 * screen.
 */
export function routeColumns(): Column<Subscription>[] {
  return [
    { label: "Types", cell: (s) => s.types.join(", "), className: "wrap" },
    { label: "Filter", cell: (s) => (s.filter ? h("code", {}, s.filter) : "none"), className: "wrap" },
    { label: "Delivers to", cell: (s) => deliversTo(s), className: "wrap" },
  ];
}

// Listing every subscription of a large cell is not free: refresh slowly,
// and draw at most this many rows (a filter narrows it).
const every = 10_000;
const maxRows = 1000;

type GroupBy = "destination" | "customer";

// #/subscriptions, #/subscriptions/destination/<id>, #/subscriptions/customer/<id>.
export const subscriptionsPage: Page = (main, me, args) => {
  const steer = can(me.role, "steer");
  const load = loadLine("subscriptions");
  const dest = h("input", { type: "text", name: "destination" });
  const cust = h("input", { type: "text", name: "customer" });
  const group = h("select", { name: "group-by" }, h("option", { value: "destination" }, "destination"), h("option", { value: "customer" }, "customer"));
  const form = h("form", { class: "filters" }, field("Destination", dest), field("Customer", cust), field("Group by", group), h("button", { type: "submit" }, "Show"));
  const reason = h("input", { type: "text", name: "pause-reason", placeholder: "why pause (audited)" });
  const ast = status("action");
  const holder = h("div", { "data-testid": "subscriptions" });
  replace(
    main,
    h("h1", {}, "Subscriptions"),
    h("p", { class: "muted" }, "Which customer's events of which types go to which destination. A paused subscription holds its events."),
    form,
    steer ? h("div", {}, field("Reason for pausing", reason), ast.el) : h("p", { class: "muted", "data-testid": "read-only" }, `Signed in as ${me.role}: read only.`),
    load.el,
    holder,
  );
  if (args[0] === "destination" || args[0] === "customer") {
    (args[0] === "destination" ? dest : cust).value = args[1] ?? "";
    group.value = args[0] === "destination" ? "customer" : "destination";
  }

  const act = (b: HTMLButtonElement, s: Subscription, pause: boolean): void => {
    if (isBusy(pauseKey(s))) return;
    const why = reason.value.trim();
    if (pause && !why) {
      ast.error("Pausing a subscription needs a reason (it goes to the audit log).");
      reason.focus();
      return;
    }
    void busy(
      b,
      pause ? "Pausing…" : "Resuming…",
      async () => {
        try {
          if (pause) {
            await subscriptions.pauseSubscription({ id: s.id, reason: why });
            ast.ok(`Paused ${s.id}: its events are held.`);
          } else {
            await subscriptions.resumeSubscription({ id: s.id });
            ast.ok(`Resumed ${s.id}.`);
          }
          p.now();
        } catch (err) {
          ast.error(`${pause ? "Pause" : "Resume"} of ${s.id} failed: ${errorText(err)}`);
        }
      },
      pauseKey(s),
    );
  };

  const draw = (subs: Subscription[]): void => {
    const by = group.value as GroupBy;
    const other: GroupBy = by === "destination" ? "customer" : "destination";
    const groups = new Map<string, Subscription[]>();
    const sorted = [...subs].sort((a, b) => key(a, by).localeCompare(key(b, by)) || key(a, other).localeCompare(key(b, other)) || a.id.localeCompare(b.id));
    for (const s of sorted.slice(0, maxRows)) groups.set(key(s, by), [...(groups.get(key(s, by)) ?? []), s]);
    const columns: Column<Subscription>[] = [
      { label: "Subscription", cell: subLink },
      { label: other === "customer" ? "Customer" : "Destination", cell: (s) => h("a", { href: `#/subscriptions/${other}/${encodeURIComponent(key(s, other))}` }, key(s, other)) },
      ...routeColumns(),
      { label: "Signed with", cell: signedWith, className: "wrap" },
      { label: "Destination state", cell: destState },
      { label: "State", cell: subState },
      ...(steer ? [{ label: "Action", cell: (s: Subscription) => pauseButton(s, act) }] : []),
    ];
    const tables = [...groups].map(([g, rows]) =>
      h(
        "section",
        { "data-group": g },
        table(`${by} ${g}: ${counted(rows.length, "subscription")}, ${formatCount(rows.filter((s) => s.paused).length)} paused`, columns, rows, (s) => ({ "data-id": s.id, "data-paused": String(s.paused) })),
      ),
    );
    replace(
      holder,
      h("p", { class: "summary" }, `${counted(subs.length, "subscription")}${subs.length > maxRows ? ` (the first ${formatCount(maxRows)} shown: narrow with a destination or customer)` : ""}, grouped by ${by}.`),
      ...(tables.length ? tables : [h("p", { class: "empty" }, "No subscription matches (rivoractl subscriptions create, or a customer's portal).")]),
    );
  };

  const tick = async (): Promise<void> => {
    try {
      const r = await subscriptions.listSubscriptions({ destinationId: dest.value.trim(), customerId: cust.value.trim() });
      draw(r.subscriptions);
      load.ok();
    } catch (err) {
      load.failed(err);
    }
  };
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    p.now();
  });
  group.addEventListener("change", () => p.now());
  const p = poll(tick, every);
  return () => p.stop();
};

function key(s: Subscription, by: GroupBy): string {
  return by === "destination" ? s.destinationId : s.customerId;
}
