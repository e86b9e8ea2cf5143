// Destination: one destination's rate, health, backlog, lanes and limits,
// and the steering actions the signed-in role may take.
import type { DestinationHealth, GetLimitsResponse, HealthTransition } from "../../../sdk/typescript/src/gen/rivora/v1/admin_pb.js";
import { PriorityClass } from "../../../sdk/typescript/src/gen/rivora/v1/admin_pb.js";
import type { Destination } from "../../../sdk/typescript/src/gen/rivora/v1/admin_pb.js";
import type { LaneSummary } from "../../../sdk/typescript/src/gen/rivora/v1/lanes_pb.js";
import { admin, date, duration, errorText, events, lanes, problemText, seconds, when } from "../api.js";
import { action, busy, disable, drawnBusy, isBusy, swap } from "../busy.js";
import { field, h, replace, status, submitForm, table } from "../dom.js";
import { loadLine } from "../loadline.js";
import { bounds, countOf, drainPreview, durationOf, rateOf } from "../limits.js";
import { can, displayState, formatCount, formatDuration, formatRate, formatShare } from "../format.js";
import type { Page } from "../main.js";
import { poll } from "../poll.js";
import { chartSamples, chartSince, chartSpan, rateChart, series } from "./chart.js";
import { endpointAuthSection } from "./destinationauth.js";
import { signingSection } from "./destinationsigning.js";

const classNames: Record<number, string> = {
  [PriorityClass.UNSPECIFIED]: "normal",
  [PriorityClass.HIGH]: "high",
  [PriorityClass.NORMAL]: "normal",
  [PriorityClass.LOW]: "low",
};

// Lanes shown at first, and added by each "Show more"; ListLanes answers
// at most maxLanes.
const lanePage = 10;
const maxLanes = 10_000;

const limitFields: { key: string; label: string; show: (l: GetLimitsResponse) => string }[] = [
  { key: "rate_per_second", label: "Rate", show: (l) => formatRate(l.effective?.ratePerSecond ?? 0) },
  { key: "burst", label: "Burst", show: (l) => String(l.effective?.burst ?? 0) },
  { key: "max_in_flight", label: "Max in flight", show: (l) => String(l.effective?.maxInFlight ?? 0) },
  { key: "max_attempts", label: "Max attempts", show: (l) => String(l.effective?.maxAttempts ?? 0) },
  { key: "window", label: "Retry window", show: (l) => formatDuration(seconds(l.effective?.window)) },
  { key: "timeout", label: "Attempt timeout", show: (l) => formatDuration(seconds(l.effective?.timeout)) },
];

export const destinationPage: Page = (main, me, [id = ""]) => {
  const steer = can(me.role, "steer");
  // Until the first answer, the page says it is loading (on a slow network
  // it stood blank, its Pause, Resume and Clear limit pressable).
  const load = loadLine(`destination ${id}`);
  const head = h("div", { class: "dest-head", "data-testid": "dest-head" });
  const chart = h("figure", { class: "chart-box" });
  const transitions = h("section", {}, h("h2", {}, "Health transitions"));
  const transList = h("div", { "data-testid": "transitions" });
  transitions.appendChild(transList);
  const backlog = h("section", {}, h("h2", {}, "Backlog per customer"));
  const backlogBody = h("div");
  backlog.appendChild(backlogBody);
  const lanesBox = h("section", {}, h("h2", {}, "Longest-waiting lanes"));
  const lanesBody = h("div");
  // ListLanes has no page token: "Show more" asks for a longer list of the
  // longest-waiting lanes (limit), and the refresh keeps asking for it.
  let laneLimit = lanePage;
  const moreLanes = h("button", { type: "button", disabled: true, onclick: () => ((laneLimit = Math.min(laneLimit + lanePage, maxLanes)), p.now()) }, `Show ${lanePage} more`);
  const fewerLanes = h("button", { type: "button", disabled: true, onclick: () => ((laneLimit = lanePage), p.now()) }, `Show the first ${lanePage}`);
  lanesBox.append(lanesBody, h("p", { class: "pager" }, moreLanes, " ", fewerLanes));
  const limitsBox = h("section", {}, h("h2", {}, "Limits"));
  const limitsBody = h("div");
  limitsBox.appendChild(limitsBody);

  const authBox = endpointAuthSection(id, can(me.role, "admin"), () => p.now());
  const signingBox = signingSection(id, can(me.role, "admin"), () => p.now());

  let health: DestinationHealth | undefined;
  let dest: Destination | undefined;
  // Changes the page made: an answer asked for before the last one is
  // older than it and is not drawn (a pause's own refresh follows).
  let changed = 0;
  const skipReason = h("input", { type: "text", name: "skip-reason", placeholder: "why skip the head" });
  const act = actions();
  // The lanes' own status line: the page's is cleared by every refresh.
  const lst = status("action");
  if (steer) lanesBox.insertBefore(h("div", {}, field("Reason for skipping", skipReason), lst.el), lanesBody);

  replace(
    main,
    h("p", {}, h("a", { href: "#/destinations" }, "← Destinations")),
    h("h1", {}, `Destination ${id}`),
    h("p", {}, h("a", { href: `#/subscriptions/destination/${encodeURIComponent(id)}` }, "Subscriptions to it →"), " · ", h("a", { href: `#/dead-letters/${encodeURIComponent(id)}` }, "Its dead-lettered events →")),
    load.el,
    head,
    chart,
    act.el,
    h("div", { class: "grid2" }, transitions, backlog),
    lanesBox,
    limitsBox,
    authBox.el,
    signingBox.el,
  );

  const tick = async (): Promise<void> => {
    const asked = changed;
    try {
      const [hr, dr, lr, lim] = await Promise.all([
        admin.getDestinationHealth({ destinationId: id, rateHistory: true }),
        admin.getDestination({ id }),
        lanes.listLanes({ destinationId: id, limit: laneLimit }),
        admin.getLimits({ destinationId: id }),
      ]);
      if (asked !== changed) return;
      health = hr.destinations[0];
      dest = dr.destination;
      drawHead(Number(dr.pending));
      drawChart();
      drawTransitions();
      drawBacklog();
      drawLanes(lr.lanes, Number(lr.matched), lr.truncated);
      drawLimits(lim);
      authBox.draw(dest, health);
      signingBox.draw(dest);
      act.update();
      load.ok();
    } catch (err) {
      load.failed(err);
    }
  };

  function drawHead(pending: number): void {
    const hh = health;
    const state = hh ? displayState(hh) : dest?.disabled ? "disabled" : dest?.paused ? "paused" : "healthy";
    const stat = (label: string, value: string): HTMLElement => h("div", { class: "stat" }, h("span", {}, label), h("strong", {}, value));
    replace(
      head,
      h("p", {}, h("span", { class: `state state-${state}`, "data-testid": "state" }, state), dest?.pauseReason ? ` ${dest.disabled ? "Disabled" : "Paused"}: ${dest.pauseReason}` : "", hh?.unusable ? h("span", { "data-testid": "unusable" }, ` Unusable: ${hh.unusable}`) : "", dest?.url ? h("span", { class: "muted" }, `  ${dest.url}`) : ""),
      h(
        "div",
        { class: "stats" },
        stat("Configured rate", formatRate(hh?.configuredRate ?? 0)),
        stat("Current rate", formatRate(hh?.currentRate ?? 0)),
        stat("Learned rate", hh?.learnedRate ? formatRate(hh.learnedRate) : "none"),
        stat("Pending", formatCount(hh ? Number(hh.pendingEvents) : pending)),
        stat("In flight", `${hh?.inFlight ?? 0} of ${hh?.maxInFlight ?? 0}`),
        stat("429 share (1 min)", formatShare(hh?.throttledShare ?? 0)),
        stat("5xx share (1 min)", formatShare(hh?.serverErrorShare ?? 0)),
        stat("No answer (1 min)", formatShare(hh?.noAnswerShare ?? 0)),
        stat("Other 4xx (1 min)", formatShare(hh?.clientErrorShare ?? 0)),
        stat("Arriving (1 min)", formatRate(Number(hh?.arrivalsLastMinute ?? 0n) / 60)),
        stat("Attempts (1 min)", formatCount(hh?.attemptsLastMinute ?? 0n)),
        stat("Oldest pending", hh?.oldestPendingAge ? formatDuration(seconds(hh.oldestPendingAge)) : "none"),
        stat("Drain time", hh && hh.pendingEvents > 0n ? drainText(hh) : "0s"),
        ...(hh?.holdUntil ? [stat("Held until (Retry-After; Resume ends it)", when(hh.holdUntil))] : []),
        stat("Priority", classNames[dest?.priorityClass ?? 0] ?? "normal"),
        // 0: no answer came (a timeout, a connection or TLS error), as
        // rivoractl's "err"; "none" read as an idle destination.
        stat("Last statuses", (hh?.lastStatuses ?? []).slice(-8).map((s) => (s === 0 ? "err" : String(s))).join(" ") || "none"),
      ),
      hh?.lastFailure ? h("p", { class: "muted", "data-testid": "last-failure" }, `Last failure: ${hh.lastFailure}`) : "",
    );
  }

  function drawChart(): void {
    const created = dest?.createdAt ? new Date(Number(dest.createdAt.seconds) * 1000) : undefined;
    const samples = chartSamples(health?.rateHistory ?? [], created);
    replace(
      chart,
      samples.length ? rateChart(samples) : h("p", { class: "muted" }, "No rate history yet (no agent owns this destination)."),
      h("figcaption", {}, `Last ${chartSpan(samples)}${chartSince(samples, created)}: `, ...series.map((s) => h("span", { class: `key key-${s.key}` }, s.label))),
    );
  }

  function drawTransitions(): void {
    // The budget's last 32, oldest first in the answer.
    const newestFirst: HealthTransition[] = [...(health?.transitions ?? [])].reverse();
    replace(
      transList,
      table("Health transitions (newest first)", [
        { label: "At", cell: (x) => when(x.at) },
        { label: "From", cell: (x) => x.from },
        { label: "To", cell: (x) => x.to },
        { label: "Cause", cell: (x) => x.cause },
      ], newestFirst, undefined, "No transition since the agent opened this destination."),
    );
  }

  function drawBacklog(): void {
    replace(
      backlogBody,
      table("Pending events per customer, with the customer's weight", [
        { label: "Customer", cell: (c) => c.customerId },
        { label: "Weight", cell: (c) => String(c.weight), className: "num" },
        { label: "Pending", cell: (c) => formatCount(c.pendingEvents), className: "num" },
        { label: "Due lanes", cell: (c) => formatCount(c.dueLanes), className: "num" },
        { label: "Waiting lanes", cell: (c) => formatCount(c.waitingLanes), className: "num" },
        { label: "In flight", cell: (c) => formatCount(c.inFlight), className: "num" },
      ], health?.customers ?? [], undefined, "No backlog."),
    );
  }

  function drawLanes(ls: LaneSummary[], matched: number, truncated: boolean): void {
    const now = Date.now();
    moreLanes.disabled = !truncated || laneLimit >= maxLanes;
    fewerLanes.disabled = laneLimit <= lanePage;
    replace(
      lanesBody,
      table(`Longest-waiting lanes (${ls.length} of ${formatCount(matched)})`, [
        { label: "Customer", cell: (l) => l.customerId },
        { label: "Subscription", cell: (l) => l.subscriptionId || "-" },
        { label: "Lane", cell: (l) => h("a", { href: `#/events/${encodeURIComponent(id)}/${encodeURIComponent(l.customerId)}/${encodeURIComponent(l.laneKey)}` }, l.laneKey) },
        { label: "Depth", cell: (l) => String(l.depth), className: "num" },
        { label: "Head waiting", cell: (l) => formatDuration((now - (date(l.headSince)?.getTime() ?? now)) / 1000), className: "num" },
        { label: "Head event", cell: (l) => h("a", { href: `#/events/${encodeURIComponent(l.headEventId)}` }, l.headEventId) },
        { label: "Attempts", cell: (l) => String(l.headAttempts), className: "num" },
        { label: "Last status", cell: (l) => (l.lastStatus ? String(l.lastStatus) : "") },
        { label: "Last error", cell: (l) => l.lastError },
        ...(steer ? [{ label: "Action", cell: skipButton }] : []),
      ], ls, (l) => ({ "data-lane": `${l.customerId}/${l.laneKey}/${l.subscriptionId}` }), "No pending lane."),
    );
  }

  // A lane's Skip head is drawn anew by each refresh: its call is keyed by the lane.
  const skipKey = (l: LaneSummary): string => `skip ${id} ${l.customerId}/${l.laneKey}/${l.subscriptionId}`;

  function skipButton(l: LaneSummary): HTMLButtonElement {
    const b = h("button", { type: "button", "aria-label": `Skip head of lane ${l.laneKey} (customer ${l.customerId}${l.subscriptionId ? `, subscription ${l.subscriptionId}` : ""})` }, "Skip head");
    b.addEventListener("click", () => void skip(b, l));
    return drawnBusy(b, skipKey(l));
  }

  async function skip(b: HTMLButtonElement, l: LaneSummary): Promise<void> {
    if (isBusy(skipKey(l))) return;
    if (!skipReason.value.trim()) {
      lst.error("Skipping a lane's head needs a reason (it goes to the audit log).");
      skipReason.focus();
      return;
    }
    await busy(b, "Skipping…", async () => {
      try {
        // A subscription's lane is named with its subscription, as lanes
        // list shows it: without it, the skip looked for another lane.
        const r = await lanes.skipLaneHead({ destinationId: id, customerId: l.customerId, laneKey: l.laneKey, subscriptionId: l.subscriptionId, headEventId: l.headEventId, reason: skipReason.value.trim() });
        lst.ok(`Skipped ${r.eventId} (now a dead letter); ${r.remaining} left in the lane.`);
        changed++;
        p.now();
      } catch (err) {
        lst.error(`Skip failed: ${errorText(err)}`);
      }
    }, skipKey(l));
  }

  function drawLimits(l: GetLimitsResponse): void {
    replace(
      limitsBody,
      table("Effective limits and where each comes from", [
        { label: "Limit", cell: (f) => f.label },
        { label: "Value", cell: (f) => f.show(l), className: "num" },
        { label: "Source", cell: (f) => l.sources[f.key]?.source ?? "default" },
        {
          label: "Set by",
          cell: (f) => {
            const s = l.sources[f.key];
            if (!s || s.source !== "override") return "";
            return `${s.author}: ${s.reason}${s.expiresAt ? ` (until ${when(s.expiresAt)})` : ""}`;
          },
        },
      ], limitFields, (f) => ({ "data-limit": f.key })),
    );
  }

  // Actions live outside the polled sections, so typing survives a refresh.
  function actions(): { el: HTMLElement; update: () => void } {
    const box = h("section", { class: "actions" }, h("h2", {}, "Actions"));
    if (!steer) {
      box.appendChild(h("p", { class: "muted", "data-testid": "read-only" }, `Signed in as ${me.role}: read only.`));
      return { el: box, update: () => {} };
    }
    const ast = status("action");
    // run makes one call at a time from button, which says doing meanwhile.
    const run = action(ast, problemText, () => {
      changed++;
      p.now();
    });
    const need = (input: HTMLInputElement, what: string): string | undefined => {
      const v = input.value.trim();
      if (!v) {
        ast.error(`${what} needs a reason (it goes to the audit log).`);
        input.focus();
        return undefined;
      }
      return v;
    };

    // Pause / Resume. Until the destination is read, neither is offered:
    // the page does not know which applies.
    const pauseReason = h("input", { type: "text", name: "pause-reason" });
    // Each action is a form: Enter in its fields does what its first
    // button does (Pause, Check, Set class, Set weight, Resend).
    const pauseBtn = h("button", { type: "submit", disabled: true }, "Pause");
    const resumeBtn = h("button", { type: "button", disabled: true }, "Resume");
    const pause = (): void => {
      if (isBusy(pauseBtn)) return;
      const reason = need(pauseReason, "Pause");
      if (reason) void run(pauseBtn, "Pausing…", "Pause", async () => (await admin.pauseDestination({ destinationId: id, reason }), `Paused ${id}.`));
    };
    // Resume also ends a partner's Retry-After hold of a destination that
    // is not paused (the answer says until when it would have held).
    resumeBtn.addEventListener("click", () =>
      void run(resumeBtn, "Resuming…", "Resume", async () => {
        const r = await admin.resumeDestination({ destinationId: id });
        return r.endedHoldUntil ? `Ended the Retry-After hold of ${id} (it held until ${when(r.endedHoldUntil)}): its lanes go now.` : `Resumed ${id}.`;
      }),
    );

    // Set limit: a dry run first shows the drain time, then confirm.
    const rate = h("input", { type: "number", name: "rate", min: String(bounds.minRate), max: String(bounds.maxRate), step: "any" });
    const inflight = h("input", { type: "number", name: "max-in-flight", min: "1", max: String(bounds.maxInFlight), step: "1" });
    const burst = h("input", { type: "number", name: "burst", min: "1", max: String(bounds.maxBurst), step: "1" });
    const attempts = h("input", { type: "number", name: "max-attempts", min: "1", max: String(bounds.maxAttempts), step: "1" });
    const retryWindow = h("input", { type: "text", name: "window", placeholder: "e.g. 72h" });
    const attemptTimeout = h("input", { type: "text", name: "timeout", placeholder: "e.g. 10s" });
    const ttl = h("input", { type: "text", name: "ttl", placeholder: "30m (empty: until cleared)" });
    const limReason = h("input", { type: "text", name: "limit-reason" });
    const preview = h("p", { class: "preview", "data-testid": "limit-preview" });
    const checkBtn = h("button", { type: "submit" }, "Check");
    const setBtn = h("button", { type: "button", disabled: true }, "Set limit");
    const clearBtn = h("button", { type: "button", disabled: true }, "Clear limit");
    const dur = (s: number | undefined) => (s === undefined ? undefined : duration(s));
    // Each field against its bound (as the control plane checks it):
    // empty is unset; 0 is refused here, which the API would read as unset.
    const overrideReq = (dryRun: boolean) => ({
      destinationId: id,
      ratePerSecond: rateOf(rate.value),
      maxInFlight: countOf(inflight.value, "Max in flight", bounds.maxInFlight),
      burst: countOf(burst.value, "Burst", bounds.maxBurst),
      maxAttempts: countOf(attempts.value, "Max attempts", bounds.maxAttempts),
      window: dur(durationOf(retryWindow.value, "Retry window", 0, bounds.maxWindow)),
      timeout: dur(durationOf(attemptTimeout.value, "Attempt timeout", bounds.minTimeout, bounds.maxTimeout)),
      ttl: dur(durationOf(ttl.value, "TTL", 0)),
      reason: limReason.value.trim(),
      dryRun,
    });
    const invalidate = (): void => {
      disable(setBtn, checkBtn);
      preview.textContent = "";
    };
    for (const i of [rate, inflight, burst, attempts, retryWindow, attemptTimeout, ttl, limReason]) i.addEventListener("input", invalidate);
    const check = (): void => {
      if (isBusy(checkBtn) || !need(limReason, "Set limit")) return;
      void busy(checkBtn, "Checking…", async () => {
        try {
          const r = await admin.setLimitsOverride(overrideReq(true));
          const drain = drainPreview({ pending: Number(r.pendingEvents), drainSeconds: seconds(r.projectedDrainTime), noDrainReason: r.noDrainReason, arrivals: r.arrivalsPerSecond });
          const heads = Number(r.headsAtMaxAttempts);
          const dying =
            heads > 0
              ? ` ${formatCount(heads)} pending lane head${heads === 1 ? "" : "s"} already used ${r.limits?.effective?.maxAttempts ?? 0} attempts or more: each becomes a dead letter (max attempts) at its next turn, without another request.`
              : "";
          // As the window counts an event's age: from acceptance, paused
          // time left out.
          const late = Number(r.eventsPastWindow);
          const pastWindow =
            late > 0
              ? ` ${formatCount(late)} pending event${late === 1 ? " is" : "s are"} already older than the retry window (from acceptance, paused time left out): each becomes a dead letter (window) at its next failure, not retried; while the destination is parked, all at once.`
              : "";
          preview.textContent = `With these limits (rate ${formatRate(r.limits?.effective?.ratePerSecond ?? 0)}), ${drain}.${dying}${pastWindow} Nothing changed yet.`;
          setBtn.disabled = false;
          ast.clear();
        } catch (err) {
          ast.error(`Check failed: ${problemText(err)}`);
        }
      });
    };
    setBtn.addEventListener("click", () => {
      if (isBusy(setBtn) || !need(limReason, "Set limit")) return;
      void run(setBtn, "Setting…", "Set limit", async () => {
        const r = await admin.setLimitsOverride(overrideReq(false));
        // Set again only after another Check: the keyboard goes to Check.
        invalidate();
        return `Limit set (config version ${r.version}).`;
      });
    });
    clearBtn.addEventListener("click", () => {
      if (isBusy(clearBtn)) return;
      const reason = need(limReason, "Clear limit");
      if (reason) void run(clearBtn, "Clearing…", "Clear limit", async () => (await admin.clearLimitsOverride({ destinationId: id, reason }), `Override cleared on ${id}.`));
    });

    // Priority class and customer weights. The class shown is the
    // destination's once it is read; until then there is none to set.
    const cls = h("select", { name: "class", disabled: true }, h("option", { value: String(PriorityClass.HIGH) }, "high"), h("option", { value: String(PriorityClass.NORMAL) }, "normal"), h("option", { value: String(PriorityClass.LOW) }, "low"));
    const clsBtn = h("button", { type: "submit", disabled: true }, "Set class");
    const setClass = (): void => void run(clsBtn, "Setting…", "Set class", async () => (await admin.setPriority({ destinationId: id, class: Number(cls.value) as PriorityClass }), `Priority class set to ${classNames[Number(cls.value)]}.`));
    const cust = h("input", { type: "text", name: "customer" });
    const weight = h("input", { type: "number", name: "weight", min: "0", step: "any" });
    const weightBtn = h("button", { type: "submit" }, "Set weight");
    const setWeight = (): void => {
      if (isBusy(weightBtn)) return;
      if (!cust.value.trim() || !(Number(weight.value) > 0)) {
        ast.error("Set weight needs a customer and a weight above 0.");
        return;
      }
      void run(weightBtn, "Setting…", "Set weight", async () => (await admin.setPriority({ destinationId: id, customerId: cust.value.trim(), weight: Number(weight.value) }), `Weight of ${cust.value.trim()} set to ${weight.value}.`));
    };

    // Resend one event.
    const evId = h("input", { type: "text", name: "resend-event" });
    const evReason = h("input", { type: "text", name: "resend-reason" });
    const resendBtn = h("button", { type: "submit" }, "Resend");
    const resend = (): void => {
      if (isBusy(resendBtn)) return;
      const reason = need(evReason, "Resend");
      if (!evId.value.trim()) {
        ast.error("Resend needs the id of the event to send again.");
        evId.focus();
        return;
      }
      // The id names the event, whatever destination it is of: say which.
      if (reason)
        void run(resendBtn, "Resending…", "Resend", async () => {
          const r = await events.resendEvent({ eventId: evId.value.trim(), reason });
          return r.destinationId === id ? `Event ${r.eventId} sent again.` : `Event ${r.eventId} sent again to destination ${r.destinationId} (it is that destination's, not ${id}'s).`;
        });
    };

    box.append(
      submitForm({}, pause, h("fieldset", {}, h("legend", {}, "Pause or resume"), field("Reason for pausing", pauseReason), pauseBtn, resumeBtn)),
      submitForm({}, check, h("fieldset", {}, h("legend", {}, "Limit override"), field("Rate per second", rate), field("Max in flight", inflight), field("Burst", burst), field("Max attempts", attempts), field("Retry window", retryWindow), field("Attempt timeout", attemptTimeout), field("TTL", ttl), field("Reason for the override", limReason), checkBtn, setBtn, clearBtn, preview)),
      h("fieldset", {}, h("legend", {}, "Priority"), submitForm({ class: "inline" }, setClass, field("Class", cls), clsBtn), submitForm({ class: "inline" }, setWeight, field("Customer", cust), field("Weight", weight), weightBtn)),
      submitForm({}, resend, h("fieldset", {}, h("legend", {}, "Resend an event"), field("Event id", evId), field("Reason for resending", evReason), resendBtn)),
      ast.el,
    );
    let clsSynced = false;
    return {
      el: box,
      update: () => {
        if (!dest) return;
        // The button a pause or resume disables hands the keyboard to
        // the other: a disabled button drops it to the body.
        if (dest.paused) swap(pauseBtn, resumeBtn);
        else swap(resumeBtn, pauseBtn);
        // Held by its partner's Retry-After, it can be resumed unpaused.
        const held = date(health?.holdUntil);
        if (!dest.paused && held && held.getTime() > Date.now()) resumeBtn.disabled = false;
        if (dest.override) clearBtn.disabled = false;
        else disable(clearBtn, checkBtn);
        if (!clsSynced) {
          cls.value = String(dest.priorityClass || PriorityClass.NORMAL);
          cls.disabled = clsBtn.disabled = false;
          clsSynced = true;
        }
      },
    };
  }

  const p = poll(tick);
  return () => p.stop();
};

/** The drain time, and when there is none why nothing drains (as rivoractl). */
function drainText(hh: DestinationHealth): string {
  if (hh.drainTime) return formatDuration(seconds(hh.drainTime));
  if (hh.disabled) return "never: disabled (its partner answered 410 Gone)";
  if (hh.paused) return "never: paused";
  if (hh.unusable) return "never: unusable, its owner cannot build its config";
  if (hh.state === "parked") return "never: parked, only probes go out until the partner answers";
  // What drains is what the partner accepts (as rivoractl).
  const failed = hh.throttledShare + hh.serverErrorShare + hh.clientErrorShare + hh.noAnswerShare;
  if (hh.attemptsLastMinute > 0n && failed > 0.995) return "never at this rate: none of the last minute's attempts was delivered";
  const arriving = Number(hh.arrivalsLastMinute) / 60;
  if (arriving > 0 && arriving >= hh.currentRate) return `never at this rate: events arrive at ${formatRate(arriving)}, the backlog grows`;
  return "never";
}
