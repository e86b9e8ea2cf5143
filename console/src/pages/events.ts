// Events: where one event is and its attempts; a lane's events.
import { EventState, type GetEventResponse } from "../../../sdk/typescript/src/gen/rivora/v1/events_pb.js";
import { errorText, events, isUnreachable, when } from "../api.js";
import { field, h, replace, status, submitForm, table } from "../dom.js";
import { counted, formatDuration, tryView } from "../format.js";
import { loadLine } from "../loadline.js";
import type { Page } from "../main.js";
import { poll } from "../poll.js";
import { seconds } from "../api.js";
import { reasonNames } from "./deadletters.js";

export const stateNames: Record<number, string> = {
  [EventState.UNSPECIFIED]: "unknown",
  [EventState.PENDING]: "pending",
  [EventState.IN_FLIGHT]: "in flight",
  [EventState.DELIVERED]: "delivered",
  [EventState.DEAD]: "dead",
};

/** eventDetail draws one event: where it is, why it waits, its attempts. */
export function eventDetail(e: GetEventResponse): Node[] {
  return [
    h("h2", {}, `Event ${e.eventId}`),
    h(
      "dl",
      {},
      ...(
        [
          ["State", stateNames[e.state] ?? ""],
          ["Destination", e.destinationId],
          ["Subscription", e.subscriptionId || "—"],
          ["Customer", e.customerId],
          ["Lane", e.laneKey],
          ["Type", e.type],
          ["Accepted", e.episodes.length > 1 ? `${when(e.acceptedAt)} (the latest of ${e.episodes.length} acceptances)` : when(e.acceptedAt)],
          ["Waiting", e.waiting || "—"],
          ["Ahead in lane", String(e.aheadInLane)],
          // Counted while pending only: a finished event's are in its tries.
          ["Attempts used", e.state !== EventState.PENDING ? "—" : e.maxAttempts ? `${e.attemptsUsed} of ${e.maxAttempts}` : String(e.attemptsUsed)],
          ["Next attempt", when(e.nextAttemptAt) || "—"],
          ["Window ends", when(e.windowEndsAt) || "—"],
          ["Dead reason", e.state === EventState.DEAD ? (reasonNames[e.deadReason] ?? "") : "—"],
        ] as const
      ).flatMap(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]),
    ),
    ...(e.episodes.length > 1
      ? [
          table("Acceptances, oldest first: the publish, then each replay or resend, each with its own attempts", [
            { label: "Accepted", cell: (ep) => when(ep.acceptedAt) },
            { label: "Tries", cell: (ep) => (ep.firstTry === 0 ? "—" : ep.firstTry === ep.lastTry ? `try ${ep.firstTry}` : `tries ${ep.firstTry}–${ep.lastTry}`) },
            {
              label: "Ended",
              cell: (ep) =>
                ep.state === EventState.UNSPECIFIED
                  ? "not ended (pending on an agent that did not answer)"
                  : (stateNames[ep.state] ?? "") + (ep.state === EventState.DEAD && reasonNames[ep.deadReason] ? ` (${reasonNames[ep.deadReason]})` : ""),
            },
          ], e.episodes),
        ]
      : []),
    table("Tries, oldest first: each request sent, and the one of the event's attempts it used (a try that failed while its destination was down or throttling used none)", [
      { label: "Try", cell: (a) => `try ${tryView(a, e.attempts.indexOf(a)).try}`, className: "num" },
      { label: "Attempt used", cell: (a) => tryView(a, e.attempts.indexOf(a)).used },
      { label: "At", cell: (a) => when(a.at) },
      { label: "Status", cell: (a) => (a.statusCode ? String(a.statusCode) : "no response") },
      { label: "Took", cell: (a) => formatDuration(seconds(a.duration)) },
      { label: "Error", cell: (a) => a.error },
    ], e.attempts, (a) => ({ "data-try": String(tryView(a, e.attempts.indexOf(a)).try) }), "No attempt yet."),
  ];
}

// #/events/<id> looks an event up; #/events/<dest>/<customer>/<lane> lists a lane.
// Both refresh (the event shown, the lane listed) while the forms keep
// what is typed in them.
export const eventsPage: Page = (main, _me, args) => {
  // The look-up and the lane listing each have their own line, so one's
  // refresh does not clear the other's error; st says why a look-up is
  // refused (no id, not found), which is not retried.
  const st = status();
  const eventLoad = loadLine("the event", { idle: true });
  const laneLoad = loadLine("the lane's events", { idle: true });
  const evId = h("input", { type: "text", name: "event-id" });
  const look = submitForm({ class: "filters" }, () => lookup(), field("Event id", evId), h("button", { type: "submit" }, "Look up"));
  const one = h("section", { "data-testid": "event" });
  const dest = h("input", { type: "text", name: "destination" });
  const cust = h("input", { type: "text", name: "customer" });
  const lane = h("input", { type: "text", name: "lane" });
  const list = submitForm({ class: "filters" }, () => listLane(), field("Destination", dest), field("Customer", cust), field("Lane", lane), h("button", { type: "submit" }, "List events"));
  const many = h("section", { "data-testid": "lane-events" });
  replace(main, h("h1", {}, "Events"), look, st.el, eventLoad.el, one, h("h2", {}, "A lane's events"), list, laneLoad.el, many);

  // What the page shows, as asked (not as the forms hold it now): the
  // event looked up, once found, and the lane listed.
  let shown: string | undefined;
  let asked: string | undefined;
  let laneAsked: { destinationId: string; customerId: string; laneKey: string } | undefined;

  const lookup = (): void => {
    // A failed look-up must not leave the previous event on screen.
    replace(one);
    shown = undefined;
    asked = evId.value.trim();
    if (asked === "") {
      asked = undefined;
      eventLoad.idle();
      st.error("Look-up needs an event id.");
      return;
    }
    st.clear();
    eventLoad.again(`event ${asked}`);
    p.now();
  };
  const listLane = (): void => {
    laneAsked = { destinationId: dest.value.trim(), customerId: cust.value.trim(), laneKey: lane.value.trim() };
    // The last lane's list answered another lane.
    replace(many);
    laneLoad.again(`the events of lane ${laneAsked.laneKey}`);
    p.now();
  };

  const drawEvent = async (): Promise<void> => {
    const id = asked ?? shown;
    if (id === undefined) return;
    try {
      const e = await events.getEvent({ eventId: id });
      if (id !== (asked ?? shown)) return; // another look-up since
      replace(one, ...eventDetail(e));
      shown = id;
      asked = undefined;
      eventLoad.ok();
    } catch (err) {
      if (id !== (asked ?? shown)) return;
      if (asked !== undefined && !isUnreachable(err)) {
        asked = undefined; // not found stays not found: no retry each tick
        eventLoad.idle();
        st.error(`Look-up failed: ${errorText(err)}`);
      } else {
        // Rivora not reached: the look-up is asked again each tick; an
        // event shown stays, saying since when.
        eventLoad.failed(err);
      }
    }
  };
  const drawLane = async (): Promise<void> => {
    const q = laneAsked;
    if (!q) return;
    try {
      const r = await events.listEvents({ ...q, limit: 200 });
      if (q !== laneAsked) return;
      replace(
        many,
        table(`${counted(r.events.length, "event")}${r.truncated ? " (more matched)" : ""}`, [
          { label: "Event", cell: (e) => h("a", { href: `#/events/${encodeURIComponent(e.eventId)}` }, e.eventId) },
          { label: "State", cell: (e) => stateNames[e.state] ?? "" },
          { label: "Customer", cell: (e) => e.customerId },
          { label: "Lane", cell: (e) => e.laneKey },
          { label: "Subscription", cell: (e) => e.subscriptionId },
          { label: "Accepted", cell: (e) => when(e.acceptedAt) },
          { label: "Attempts", cell: (e) => String(e.attempts), className: "num" },
          { label: "Last status", cell: (e) => (e.lastStatus ? String(e.lastStatus) : "") },
          { label: "Last error", cell: (e) => e.lastError },
        ], r.events, (e) => ({ "data-event": e.eventId, "data-state": stateNames[e.state] ?? "" }), "No event matches."),
      );
      laneLoad.ok();
    } catch (err) {
      if (q === laneAsked) laneLoad.failed(err);
    }
  };

  if (args.length === 1 && args[0]) {
    evId.value = args[0];
    asked = args[0];
    eventLoad.again(`event ${asked}`);
  } else if (args.length === 3) {
    [dest.value, cust.value, lane.value] = args as [string, string, string];
    laneAsked = { destinationId: dest.value.trim(), customerId: cust.value.trim(), laneKey: lane.value.trim() };
    laneLoad.again(`the events of lane ${laneAsked.laneKey}`);
  }
  const p = poll(async () => {
    await Promise.all([drawEvent(), drawLane()]);
  });
  return () => p.stop();
};
