// Polling that never overlaps (the next tick starts interval after the last
// answer), stops when the page leaves, and waits while the tab is hidden.

export const interval = 2000;

export interface Poller {
  stop(): void;
  /** now runs the tick at once (after an action), then keeps the cadence. */
  now(): void;
}

export function poll(tick: () => Promise<void>, every = interval): Poller {
  let stopped = false;
  let timer: ReturnType<typeof setTimeout> | undefined;
  let running = false;
  let again = false;
  const run = async (): Promise<void> => {
    timer = undefined;
    if (stopped) return;
    if (document.hidden) return; // visibilitychange restarts it
    if (running) {
      again = true;
      return;
    }
    running = true;
    try {
      await tick();
    } finally {
      running = false;
    }
    if (!stopped && timer === undefined) timer = setTimeout(run, again ? 0 : every);
    again = false;
  };
  const onVisible = (): void => {
    if (!document.hidden && timer === undefined && !running) void run();
  };
  document.addEventListener("visibilitychange", onVisible);
  void run();
  return {
    stop() {
      stopped = true;
      if (timer !== undefined) clearTimeout(timer);
      document.removeEventListener("visibilitychange", onVisible);
    },
    now() {
      if (timer !== undefined) clearTimeout(timer);
      timer = undefined;
      void run();
    },
  };
}
