// The customer portal's Events: the customer's events, one subscription
// at a time (newest first), one event by id, and sending a delivered or
// dead event again.
import { EventState } from "../../../sdk/typescript/src/gen/rivora/v1/events_pb.js";
import type { Subscription } from "../../../sdk/typescript/src/gen/rivora/v1/subscriptions_pb.js";
import { errorText, events, subscriptions } from "../api.js";
import { busy, isBusy } from "../busy.js";
import { currentCustomer, customerPicker } from "../customer.js";
import { field, h, replace, status, submitForm } from "../dom.js";
import type { Page } from "../main.js";
import { counted } from "../format.js";
import { loadLine } from "../loadline.js";
import { poll } from "../poll.js";
import { eventDetail, stateNames } from "./events.js";
import { deliveriesTable } from "./subscription.js";

// #/events lists a subscription's events; #/events/<id> shows one event.
export const myEventsPage: Page = (main, me, args) => {
  const customer = currentCustomer(me);
  // The look-up and the polled listing each have their own line: shared,
  // the listing's next poll cleared a failed look-up's error.
  const st = status();
  const eventLoad = loadLine("the event", { once: true, idle: true });
  const listLoad = loadLine("your events");
  const evId = h("input", { type: "text", name: "event-id" });
  const look = h("form", { class: "filters" }, field("Event id", evId), h("button", { type: "submit" }, "Look up"));
  const one = h("section", { "data-testid": "event" });
  const sub = h("select", { name: "subscription" });
  const state = h(
    "select",
    { name: "state" },
    h("option", { value: String(EventState.UNSPECIFIED) }, "any"),
    ...[EventState.PENDING, EventState.DELIVERED, EventState.DEAD].map((s) => h("option", { value: String(s) }, stateNames[s]!)),
  );
  const lane = h("input", { type: "text", name: "lane" });
  const list = h("form", { class: "filters" }, field("Subscription", sub), field("State", state), field("Lane", lane), h("button", { type: "submit" }, "List events"));
  const many = h("section", { "data-testid": "my-events" });
  replace(main, h("h1", {}, "Your events"), customerPicker(me), look, st.el, eventLoad.el, one, h("h2", {}, "A subscription's events"), list, listLoad.el, many);
  let subs: Subscription[] | undefined; // until listed

  const lookup = async (): Promise<void> => {
    const id = evId.value.trim();
    // A failed look-up must not leave the previous event on screen, as
    // if it were the one asked for.
    replace(one);
    if (id === "") {
      eventLoad.idle();
      st.error("Look-up needs an event id.");
      return;
    }
    st.clear();
    eventLoad.again(`event ${id}`);
    try {
      const e = await events.getEvent({ eventId: id });
      replace(one, ...eventDetail(e), resendBox(e.eventId, e.state));
      eventLoad.ok();
    } catch (err) {
      eventLoad.idle();
      st.error(`Look-up failed: ${errorText(err)}`);
    }
  };

  // The subscriptions are listed once (the select lists them), and
  // again on each refresh until that succeeds; then their events.
  const listEvents = async (): Promise<void> => {
    try {
      if (subs === undefined) {
        subs = (await subscriptions.listSubscriptions({ customerId: customer })).subscriptions.filter((s) => s.customerId === customer);
        replace(sub, ...subs.map((s) => h("option", { value: s.id }, `${s.id} → ${s.destinationId} (${s.types.join(", ")})`)));
      }
      const s = subs.find((x) => x.id === sub.value);
      if (!s) {
        replace(many, h("p", { class: "muted" }, "No subscription yet: events are listed per subscription."));
        listLoad.ok();
        return;
      }
      const r = await events.listEvents({ destinationId: s.destinationId, customerId: customer, subscriptionId: s.id, laneKey: lane.value.trim(), state: Number(state.value) as EventState, limit: 100 });
      replace(many, deliveriesTable(`${counted(r.events.length, "event")} of ${s.id} (to ${s.destinationId}), newest first${r.truncated ? "; more matched" : ""}`, r.events, "No event matches."));
      listLoad.ok();
    } catch (err) {
      listLoad.failed(err);
    }
  };

  look.addEventListener("submit", (e) => (e.preventDefault(), void lookup()));
  list.addEventListener("submit", (e) => (e.preventDefault(), p.now()));
  if (args[0]) {
    evId.value = args[0];
    void lookup();
  }
  const p = poll(listEvents);
  return () => p.stop();
};

/** resendBox sends a delivered or dead event again, with the reason the audit log keeps. */
function resendBox(eventId: string, state: EventState): HTMLElement {
  if (state !== EventState.DELIVERED && state !== EventState.DEAD) return h("p", { class: "muted" }, "A pending event is on its way: nothing to resend.");
  const reason = h("input", { type: "text", name: "resend-reason", placeholder: "why send it again" });
  const rst = status("action");
  const btn = h("button", { type: "submit" }, "Resend");
  const resend = (): void => {
    if (isBusy(btn)) return;
    if (!reason.value.trim()) {
      rst.error("Resending needs a reason (it goes to the audit log).");
      return;
    }
    void busy(btn, "Resending…", () =>
      events
        .resendEvent({ eventId, reason: reason.value.trim() })
        .then(() => rst.ok(`Event ${eventId} sent again.`))
        .catch((err: unknown) => rst.error(`Resend failed: ${errorText(err)}`)),
    );
  };
  return submitForm({}, resend, h("fieldset", {}, h("legend", {}, "Send it again"), field("Reason for resending", reason), btn, rst.el));
}
