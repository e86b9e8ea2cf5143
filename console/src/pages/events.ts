// Events: where one event is and its attempts; a lane's events.
import { EventState, type GetEventResponse } from "../../../sdk/typescript/src/gen/rivora/v1/events_pb.js";
import { errorText, events, when } from "../api.js";
import { field, h, replace, status, table } from "../dom.js";
import { counted, formatDuration, tryView } from "../format.js";
import type { Page } from "../main.js";
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
export const eventsPage: Page = (main, _me, args) => {
  const st = status();
  const evId = h("input", { type: "text", name: "event-id" });
  const look = h("form", { class: "filters" }, field("Event id", evId), h("button", { type: "submit" }, "Look up"));
  const one = h("section", { "data-testid": "event" });
  const dest = h("input", { type: "text", name: "destination" });
  const cust = h("input", { type: "text", name: "customer" });
  const lane = h("input", { type: "text", name: "lane" });
  const list = h("form", { class: "filters" }, field("Destination", dest), field("Customer", cust), field("Lane", lane), h("button", { type: "submit" }, "List events"));
  const many = h("section", { "data-testid": "lane-events" });
  replace(main, h("h1", {}, "Events"), look, st.el, one, h("h2", {}, "A lane's events"), list, many);

  const lookup = async (): Promise<void> => {
    // A failed look-up must not leave the previous event on screen.
    replace(one);
    const id = evId.value.trim();
    if (id === "") {
      st.error("Look-up needs an event id.");
      return;
    }
    try {
      replace(one, ...eventDetail(await events.getEvent({ eventId: id })));
      st.clear();
    } catch (err) {
      st.error(`Look-up failed: ${errorText(err)}`);
    }
  };
  const listLane = async (): Promise<void> => {
    try {
      const r = await events.listEvents({ destinationId: dest.value.trim(), customerId: cust.value.trim(), laneKey: lane.value.trim(), limit: 200 });
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
        ], r.events, undefined, "No event matches."),
      );
      st.clear();
    } catch (err) {
      st.error(`Listing failed: ${errorText(err)}`);
    }
  };
  look.addEventListener("submit", (e) => (e.preventDefault(), void lookup()));
  list.addEventListener("submit", (e) => (e.preventDefault(), void listLane()));
  if (args.length === 1 && args[0]) {
    evId.value = args[0];
    void lookup();
  } else if (args.length === 3) {
    [dest.value, cust.value, lane.value] = args as [string, string, string];
    void listLane();
  }
  return () => {};
};
