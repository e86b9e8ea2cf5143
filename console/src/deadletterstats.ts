// What the Dead letters page opens on: DeadLetterStats' counts (one per
// destination, customer, reason — and subscription, when asked by
// subscription) folded into one row per destination for operators, or
// per subscription for a customer, newest first. Pure, so vitest checks it.

/** One count as DeadLetterStats answers it, with times in ms since the epoch. */
export interface StatCount {
  destinationId: string;
  customerId: string;
  subscriptionId: string;
  reason: string;
  count: number;
  /** of count, those a replay handled already (the next replay leaves them). */
  replayed: number;
  oldestMs: number | undefined;
  newestMs: number | undefined;
}

/** A row of the page: where the dead letters are, how many, since when. */
export interface StatRow {
  /** destination (operators) or subscription + destination (customers). */
  key: string;
  destinationId: string;
  /** "" for dead letters routed by no subscription, or when grouped by destination. */
  subscriptionId: string;
  count: number;
  /** of count, those a replay handled already. */
  replayed: number;
  customers: string[];
  /** count per reason, most first. */
  reasons: [string, number][];
  oldestMs: number | undefined;
  newestMs: number | undefined;
}

export type StatGrouping = "destination" | "subscription";

/**
 * foldStats groups counts by destination or by subscription (and its
 * destination), newest dead letter first; ties go to the bigger count,
 * then the key, so the order is stable between refreshes.
 */
export function foldStats(counts: StatCount[], by: StatGrouping): StatRow[] {
  const rows = new Map<string, StatRow & { reasonMap: Map<string, number>; customerSet: Set<string> }>();
  for (const c of counts) {
    const key = by === "destination" ? c.destinationId : `${c.subscriptionId}\u0000${c.destinationId}`;
    let r = rows.get(key);
    if (!r) {
      r = {
        key,
        destinationId: c.destinationId,
        subscriptionId: by === "subscription" ? c.subscriptionId : "",
        count: 0,
        replayed: 0,
        customers: [],
        reasons: [],
        oldestMs: undefined,
        newestMs: undefined,
        reasonMap: new Map(),
        customerSet: new Set(),
      };
      rows.set(key, r);
    }
    r.count += c.count;
    r.replayed += c.replayed;
    r.reasonMap.set(c.reason, (r.reasonMap.get(c.reason) ?? 0) + c.count);
    if (c.customerId) r.customerSet.add(c.customerId);
    r.oldestMs = earliest(r.oldestMs, c.oldestMs);
    r.newestMs = latest(r.newestMs, c.newestMs);
  }
  const out: StatRow[] = [...rows.values()].map(({ reasonMap, customerSet, ...r }) => ({
    ...r,
    customers: [...customerSet].sort(),
    reasons: [...reasonMap].sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0])),
  }));
  return out.sort((a, b) => (b.newestMs ?? -Infinity) - (a.newestMs ?? -Infinity) || b.count - a.count || a.key.localeCompare(b.key));
}

function earliest(a: number | undefined, b: number | undefined): number | undefined {
  if (a === undefined) return b;
  if (b === undefined) return a;
  return Math.min(a, b);
}

function latest(a: number | undefined, b: number | undefined): number | undefined {
  if (a === undefined) return b;
  if (b === undefined) return a;
  return Math.max(a, b);
}

/** A set of partitions whose ledger no agent read, as the API says it (UnreadLedger). */
export interface UnreadLedger {
  partitions: number[];
  agent: string;
  reason: string;
}

/** partitionsText names sorted partitions the short way, as rivoractl does: "partition 4", "partitions 0–3, 5". */
export function partitionsText(ps: number[]): string {
  const parts: string[] = [];
  for (let i = 0; i < ps.length; ) {
    let j = i;
    while (j + 1 < ps.length && ps[j + 1] === ps[j]! + 1) j++;
    parts.push(j === i ? String(ps[i]) : `${ps[i]}–${ps[j]}`);
    i = j + 1;
  }
  return `${ps.length === 1 ? "partition" : "partitions"} ${parts.join(", ")}`;
}

/**
 * archiveNotice is the Dead letters page's banner while the archive cannot
 * be read (why: the answer's archiveUnavailable): what is shown comes from
 * the agents' ledgers, and which ledgers were not read. Empty when the
 * answer came from the archive.
 */
export function archiveNotice(why: string, unread: UnreadLedger[]): string[] {
  if (!why) return [];
  return [
    `The archive is unreachable (${why}): the dead letters shown are those still waiting in the agents' ledgers. They are archived once it is back; those archived before show again then.`,
    ...unread.map((u) => `Not read: ${partitionsText(u.partitions)} (${u.agent ? `agent ${u.agent}` : "no owner"}): ${u.reason}. Their dead letters are missing here.`),
  ];
}
