// A view's line about its data, as freshness.ts words it: "Loading
// destinations…" until the first answer (an empty table said "nothing
// here" meanwhile), an error if that fails, a notice over the data kept
// when a refresh fails ("Destinations as of 14:02:11 — cannot reach
// Rivora at …; retrying"), and nothing while refreshes succeed. Each page
// puts one where its status line was, one per view it reads.
import { failureOf, origin } from "./api.js";
import { h } from "./dom.js";
import { answered, failed, idle, line, loading, type Freshness } from "./freshness.js";

export interface LoadLine {
  el: HTMLElement;
  /** ok: the view's data was read, and is drawn now. */
  ok(): void;
  /** failed: a read failed; the data drawn stays, and the line says since when and why. */
  failed(err: unknown): void;
  /** again: a new question (another event, another search) whose answer is not shown yet; what renames the data. */
  again(what?: string): void;
  /** idle: no question (a look-up refused, its page's own line says why): the line says nothing. */
  idle(): void;
}

// Test ids by state: a test (and a person's tools) find the line by what it says now.
const testIds: Record<string, string | undefined> = { idle: undefined, loading: "loading", error: "load-error", stale: "stale", fresh: undefined };

/**
 * loadLine is the line of a view of what (in words that follow
 * "Loading": "destinations", "the audit log"). once: the view reads once
 * (it does not poll), so a failure does not say it retries. idle: the
 * view has no question until again (a look-up, a search).
 */
export function loadLine(what: string, opts: { once?: boolean; idle?: boolean } = {}): LoadLine {
  let f: Freshness = opts.idle ? idle : loading;
  const el = h("p", { class: "status", "data-status": "load", "aria-live": "polite" });
  const draw = (): void => {
    const l = line(f, what, origin, !opts.once);
    // Unchanged, it is left alone: a screen reader hears a change once,
    // not each refresh that fails the same way.
    if (el.dataset.state === l.state && el.textContent === l.text) return;
    el.dataset.state = l.state;
    el.className = `status ${l.state}`;
    el.setAttribute("role", l.state === "error" ? "alert" : "status");
    const id = testIds[l.state];
    if (id) el.dataset.testid = id;
    else delete el.dataset.testid;
    el.textContent = l.text;
  };
  draw();
  return {
    el,
    ok: () => {
      f = answered(Date.now());
      draw();
    },
    failed: (err) => {
      f = failed(f, failureOf(err));
      draw();
    },
    again: (w) => {
      if (w !== undefined) what = w;
      f = loading;
      draw();
    },
    idle: () => {
      f = idle;
      draw();
    },
  };
}
