// The one poll loop of the TypeScript tests: for a condition that another
// process makes true (a partner's request log, a server's answer), where
// nothing can be awaited directly. Never a fixed sleep.

/** Options of eventually. */
export interface PollOptions {
  /** Give up after this long (default 60 s). */
  timeoutMs?: number;
  /** The longest pause between checks (default 250 ms); pauses start at 10 ms and double up to it. */
  everyMs?: number;
}

/**
 * eventually polls check until it returns a truthy value, and returns it.
 * A check that throws counts as not yet; its last error is in the timeout's
 * message.
 */
export async function eventually<T>(
  what: string,
  check: () => T | undefined | null | false | Promise<T | undefined | null | false>,
  opts: PollOptions | number = {},
): Promise<T> {
  const { timeoutMs = 60_000, everyMs = 250 } = typeof opts === "number" ? { timeoutMs: opts } : opts;
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (let wait = Math.min(10, everyMs); ; wait = Math.min(wait * 2, everyMs)) {
    try {
      const v = await check();
      if (v) return v;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline) {
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${last ? `; last error: ${String(last)}` : ""}`);
    }
    await new Promise((r) => setTimeout(r, wait));
  }
}
