// Busy buttons: a button whose call is under way says so ("Pausing…")
// and takes no second press until the call has answered. A double-click
// on Resend sent two calls (the event was delivered three times), a
// double Pause answered "already paused" over the pause that worked.
//
// A busy button is aria-disabled, not disabled: a disabled button drops
// the keyboard's focus to the page's body, and whoever pressed it with
// Enter would have to find their place again.

interface Run {
  doing: string;
  /** The buttons drawn for this call: the pressed one, and any drawn anew meanwhile (a table's row). */
  buttons: Set<HTMLButtonElement>;
}

const runs = new Map<unknown, Run>();

/**
 * busy runs call once, with button saying doing ("Pausing…") until it
 * settles; a press while it runs (of this button, or of any with the same
 * key) does nothing. key names the action when its button may be drawn
 * anew meanwhile (a table's row: "pause subscription s-1"); it defaults
 * to the button.
 */
export async function busy(button: HTMLButtonElement, doing: string, call: () => Promise<void>, key: unknown = button): Promise<void> {
  if (runs.has(key)) return;
  const run: Run = { doing, buttons: new Set() };
  runs.set(key, run);
  mark(button, run);
  try {
    await call();
  } finally {
    runs.delete(key);
    for (const b of run.buttons) unmark(b);
  }
}

/** isBusy: the action of key (or of this button) is under way. */
export function isBusy(key: unknown): boolean {
  return runs.has(key);
}

/** drawnBusy shows a button drawn anew (a redrawn table's row) busy while its key's call runs. */
export function drawnBusy<B extends HTMLButtonElement>(button: B, key: unknown): B {
  const run = runs.get(key);
  if (run) mark(button, run);
  return button;
}

/**
 * swap enables on and disables off (Pause and Resume after a pause), the
 * keyboard's focus going from off to on: off would drop it to the body.
 */
export function swap(off: HTMLButtonElement, on: HTMLButtonElement): void {
  on.disabled = false;
  disable(off, on);
}

/** disable disables b; if b has the keyboard's focus, next takes it (b would drop it to the body). */
export function disable(b: HTMLButtonElement, next: HTMLElement): void {
  if (!b.disabled && document.activeElement === b) next.focus({ preventScroll: true });
  b.disabled = true;
}

function mark(b: HTMLButtonElement, run: Run): void {
  if (run.buttons.has(b)) return;
  run.buttons.add(b);
  b.dataset.idle = b.textContent ?? "";
  b.textContent = run.doing;
  b.setAttribute("aria-disabled", "true");
}

function unmark(b: HTMLButtonElement): void {
  b.textContent = b.dataset.idle ?? b.textContent;
  delete b.dataset.idle;
  b.removeAttribute("aria-disabled");
}

/** Where an action says how it went (dom.ts status). */
interface Outcome {
  ok: (msg: string) => void;
  error: (msg: string) => void;
}

/**
 * action makes a page's run: it calls f from button (busy, saying doing
 * meanwhile), shows f's answer on st, then calls after; or shows "what
 * failed: " and the error in describe's words.
 */
export function action(
  st: Outcome,
  describe: (err: unknown) => string,
  after: () => void,
): (button: HTMLButtonElement, doing: string, what: string, f: () => Promise<string>) => Promise<void> {
  return (button, doing, what, f) =>
    busy(button, doing, async () => {
      try {
        st.ok(await f());
        after();
      } catch (err) {
        st.error(`${what} failed: ${describe(err)}`);
      }
    });
}
