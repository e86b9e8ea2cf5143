// Subscription: one subscription, its last deliveries, and what the
// signed-in role may do with it: a customer (its own) and the steering
// roles edit, pause, resume, rotate its secret and delete it; a customer
// and an admin send it a test event; a viewer reads.
import type { EventSummary } from "../../../sdk/typescript/src/gen/rivora/v1/events_pb.js";
import type { Subscription } from "../../../sdk/typescript/src/gen/rivora/v1/subscriptions_pb.js";
import { errorText, events, isFailedPrecondition, subscriptions, when, type Me } from "../api.js";
import { action, busy, isBusy, swap } from "../busy.js";
import { field, h, noticeNext, replace, status, submitForm, table } from "../dom.js";
import { can, counted, formatCount, inFlightText } from "../format.js";
import { loadLine } from "../loadline.js";
import type { Page } from "../main.js";
import { poll } from "../poll.js";
import { editForm, rotateForm, testEventForm } from "./subscriptionforms.js";
import { deliversTo, destState, signedWith, subState } from "./subscriptions.js";
import { stateNames } from "./events.js";

/** What a role may do with a subscription it can see. */
function rights(me: Me): { manage: boolean; test: boolean } {
  const self = can(me.role, "self-serve");
  return { manage: self || can(me.role, "steer"), test: self || can(me.role, "admin") };
}

/** The last deliveries' table: newest first, each event linked to where it is. */
export function deliveriesTable(caption: string, evs: EventSummary[], empty: string): HTMLElement {
  return table(caption, [
    { label: "Event", cell: (e) => h("a", { href: `#/events/${encodeURIComponent(e.eventId)}` }, e.eventId) },
    { label: "Type", cell: (e) => e.type },
    { label: "State", cell: (e) => h("span", { class: `ev-state ev-${(stateNames[e.state] ?? "unknown").replace(" ", "-")}` }, stateNames[e.state] ?? "") },
    { label: "Lane", cell: (e) => e.laneKey },
    { label: "Accepted", cell: (e) => when(e.acceptedAt) },
    { label: "Finished", cell: (e) => when(e.finishedAt) },
    { label: "Attempts", cell: (e) => String(e.attempts), className: "num" },
    { label: "Last status", cell: (e) => (e.lastStatus ? String(e.lastStatus) : "") },
    { label: "Last error", cell: (e) => e.lastError },
  ], evs, (e) => ({ "data-event": e.eventId, "data-state": stateNames[e.state] ?? "" }), empty);
}

export const subscriptionPage: Page = (main, me, [id = ""]) => {
  const { manage, test } = rights(me);
  const load = loadLine(`subscription ${id}`);
  const summary = h("section", { "data-testid": "subscription" });
  const deliveries = h("section", { "data-testid": "deliveries" });
  const actions = h("section", { class: "actions" });
  replace(main, h("p", {}, h("a", { href: "#/subscriptions" }, "← Subscriptions")), h("h1", {}, `Subscription ${id}`), load.el, summary, actions, deliveries);

  let sub: Subscription | undefined;
  let built = false;
  // Changes the page made: an answer asked for before the last one is not drawn.
  let changed = 0;
  const ast = status("action");
  const pauseReason = h("input", { type: "text", name: "pause-reason", placeholder: "why (audited)" });
  const pauseBtn = h("button", { type: "submit" }, "Pause");
  const resumeBtn = h("button", { type: "button" }, "Resume");

  const tick = async (): Promise<void> => {
    const asked = changed;
    try {
      const r = await subscriptions.getSubscription({ id });
      if (asked !== changed) return;
      sub = r.subscription!;
      drawSummary(sub, Number(r.pending));
      // The button a pause or resume disables hands the keyboard to the other.
      if (sub.paused) swap(pauseBtn, resumeBtn);
      else swap(resumeBtn, pauseBtn);
      if (!built) buildActions(sub);
      const evs = await events.listEvents({ destinationId: sub.destinationId, customerId: sub.customerId, subscriptionId: sub.id, limit: 20 });
      replace(deliveries, h("h2", {}, "Last deliveries"), deliveriesTable(`The subscription's last ${evs.events.length} events, newest first`, evs.events, "No event yet: send a test event."));
      load.ok();
    } catch (err) {
      load.failed(err);
    }
  };

  function drawSummary(s: Subscription, pending: number): void {
    const last = s.pauses[s.pauses.length - 1];
    const rows: [string, Node | string][] = [
      ["State", h("span", {}, subState(s), s.paused && last?.reason ? ` ${last.reason}` : "")],
      ["Customer", s.customerId],
      ["Destination", h("span", {}, `${s.destinationId} `, destState(s))],
      ["Types", s.types.join(", ")],
      ["Filter", s.filter || "none: every event of these types"],
      ["Delivers to", deliversTo(s)],
      ["Signed with", signedWith(s)],
      ["Previous secret", s.previousSecretFingerprint ? `${s.previousSecretFingerprint}, signs too until ${when(s.previousSecretExpiresAt)}` : "none"],
      ["Headers", s.headers.map((x) => `${x.name} (${x.valueFingerprint})`).join(", ") || "none"],
      ["Pending", formatCount(pending)],
      ["Description", s.description || "—"],
      ["Created", when(s.createdAt)],
      ["Updated", when(s.updatedAt)],
    ];
    replace(summary, h("dl", {}, ...rows.flatMap(([k, v]) => [h("dt", {}, k), h("dd", { "data-field": k }, v)])));
  }

  // run makes one call at a time from button, which says doing meanwhile.
  const run = action(ast, errorText, () => {
    changed++;
    p.now();
  });
  // A form's change reported by subscriptionforms: the page is read again.
  const done = (msg: string): void => {
    ast.ok(msg);
    changed++;
    p.now();
  };

  function buildActions(s: Subscription): void {
    built = true;
    if (!manage) {
      replace(actions, h("p", { class: "muted", "data-testid": "read-only" }, `Signed in as ${me.role}: read only.`));
      return;
    }
    const pause = (): void => {
      if (isBusy(pauseBtn)) return;
      // A reason, as on every other pause: it goes to the audit log.
      const reason = pauseReason.value.trim();
      if (!reason) {
        ast.error("Pause needs a reason (it goes to the audit log).");
        pauseReason.focus();
        return;
      }
      void run(pauseBtn, "Pausing…", "Pause", async () => (await subscriptions.pauseSubscription({ id, reason }), `Paused: new events are held until you resume.`));
    };
    resumeBtn.addEventListener("click", () => void run(resumeBtn, "Resuming…", "Resume", async () => (await subscriptions.resumeSubscription({ id }), `Resumed: held events drain in lane order.`)));
    replace(
      actions,
      h("h2", {}, "Actions"),
      ast.el,
      // Enter in the reason pauses.
      submitForm({}, pause, h("fieldset", {}, h("legend", {}, "Pause or resume"), field("Reason for pausing", pauseReason), pauseBtn, resumeBtn)),
      test ? testEventForm(s, done, (msg) => ast.error(msg)) : "",
      editForm(s, done, (msg) => ast.error(msg)),
      rotateForm(s, (msg) => ast.ok(msg), (msg) => ast.error(msg)),
      deleteBox(),
    );
  }

  // Delete: refused while events are pending; then a second, explicit
  // confirmation deletes with force (the pending events become dead
  // letters with reason "deleted", nothing dropped silently, and none of
  // them can be replayed or resent: the subscription's URL, secret and
  // headers go with it — docs/subscriptions.md).
  function deleteBox(): HTMLElement {
    const del = h("button", { type: "button", class: "danger" }, "Delete subscription");
    const confirmBox = h("div", { "data-testid": "delete-confirm" });
    const remove = (button: HTMLButtonElement, force: boolean): Promise<void> =>
      busy(
        button,
        "Deleting…",
        async () => {
          try {
            const r = await subscriptions.deleteSubscription({ id, force });
            p.stop();
            noticeNext(`Deleted ${id}${force ? `; its ${counted(r.archived, "pending event")} went to the dead letters (reason deleted, not replayable)${inFlightText(r.inFlight, r.archivedLater)}` : ""}.`);
            location.hash = "#/subscriptions";
          } catch (err) {
            if (!force && isFailedPrecondition(err)) {
              const forceBtn = h("button", { type: "button", class: "danger" }, "Delete anyway");
              forceBtn.addEventListener("click", () => void remove(forceBtn, true));
              replace(
                confirmBox,
                h("p", { class: "status error", role: "alert" }, `${errorText(err)}`),
                h(
                  "p",
                  {},
                  "Deleting anyway turns the pending events into dead letters (reason deleted). They cannot be replayed or resent: the subscription's URL, secret and headers go with it, and a replay refuses them. To keep them, pause the subscription instead.",
                ),
                forceBtn,
              );
              return;
            }
            ast.error(`Delete failed: ${errorText(err)}`);
          }
        },
        "delete subscription",
      );
    del.addEventListener("click", () => {
      if (isBusy("delete subscription")) return;
      if (window.confirm(`Delete subscription ${id}? Its events stop going to its destination.`)) void remove(del, false);
    });
    return h("fieldset", {}, h("legend", {}, "Delete"), del, confirmBox);
  }

  const p = poll(tick);
  return () => p.stop();
};
