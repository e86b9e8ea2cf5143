// Agents: the cell as the control plane sees it, and the edges that
// forward events into it.
import type { EdgeStatus } from "../../../sdk/typescript/src/gen/rivora/v1/admin_pb.js";
import { admin, date, when } from "../api.js";
import { h, replace, table } from "../dom.js";
import { bufferFigure, counted, formatBytes, formatDuration } from "../format.js";
import { loadLine } from "../loadline.js";
import type { Page } from "../main.js";
import { poll } from "../poll.js";

export function ranges(ps: number[]): string {
  const s = [...ps].sort((a, b) => a - b);
  const out: string[] = [];
  for (let i = 0; i < s.length; i++) {
    let j = i;
    while (j + 1 < s.length && s[j + 1] === s[j]! + 1) j++;
    out.push(j > i ? `${s[i]}–${s[j]}` : String(s[i]));
    i = j;
  }
  return out.join(", ") || "none";
}

/** How long the edge's oldest unforwarded event has waited, in seconds (0: none waits). */
export function oldestBufferedAge(e: EdgeStatus, now: Date): number {
  const oldest = date(e.buffer?.oldestBuffered);
  if (!e.buffer || e.buffer.bufferedEvents === 0n || oldest === undefined) return 0;
  return Math.max(0, (now.getTime() - oldest.getTime()) / 1000);
}

/** Whether the edge's link to the cell is up, and if not why, as rivoractl says it. */
export function edgeConnected(e: EdgeStatus): string {
  if (e.connected) return "yes";
  if (!e.buffer) return "no (no report yet)";
  if (!e.buffer.cellConnected) {
    const since = when(e.buffer.disconnectedSince);
    return since ? `no (link down since ${since})` : "no (link down)";
  }
  return "no (no recent report)";
}

function edgesTable(edges: EdgeStatus[], now: Date): HTMLElement {
  return table(counted(edges.length, "edge"), [
    { label: "Edge", cell: (e) => e.name },
    { label: "Connected", cell: (e) => h("span", { class: e.connected ? "state state-healthy" : "state state-parked" }, edgeConnected(e)) },
    { label: "Watching", cell: (e) => (e.watching ? "yes" : "no") },
    { label: "Last seen", cell: (e) => when(e.lastSeen) || "not since the control plane started" },
    { label: "Buffered events", cell: (e) => bufferFigure(e, String(e.buffer?.bufferedEvents ?? 0n)), className: "num" },
    { label: "Buffered bytes", cell: (e) => bufferFigure(e, formatBytes(Number(e.buffer?.bufferedBytes ?? 0n))), className: "num" },
    { label: "Oldest buffered", cell: (e) => bufferFigure(e, formatDuration(oldestBufferedAge(e, now))), className: "num" },
    { label: "Forwarded", cell: (e) => bufferFigure(e, String(e.buffer?.forwardedTotal ?? 0n)), className: "num" },
  ], edges, (e) => ({ "data-edge": e.name }), "No edge has registered (`rivora edge` registers on its first connection).");
}

export const agentsPage: Page = (main) => {
  const load = loadLine("agents and edges");
  const body = h("div", { "data-testid": "agents" });
  const edges = h("div", { "data-testid": "edges" });
  const version = h("p");
  replace(main, h("h1", {}, "Agents"), version, load.el, body, h("h2", {}, "Edges"), edges);
  const p = poll(async () => {
    try {
      const r = await admin.getConfigStatus({});
      version.textContent = `Config version ${r.version}.`;
      replace(
        body,
        table(`${counted(r.agents.length, "agent")}`, [
          { label: "Agent", cell: (a) => a.name },
          { label: "Address", cell: (a) => a.address },
          { label: "Health", cell: (a) => h("span", { class: a.healthy ? "state state-healthy" : "state state-parked" }, a.healthy ? "healthy" : `unhealthy: ${a.healthReason}`) },
          { label: "Connected", cell: (a) => (a.connected ? "yes" : "no") },
          { label: "Applied version", cell: (a) => String(a.appliedVersion), className: "num" },
          { label: "Session", cell: (a) => a.session || "none" },
          { label: "Owned partitions", cell: (a) => ranges(a.partitions) },
          { label: "Assigned partitions", cell: (a) => ranges(a.assignedPartitions) },
          { label: "Last seen", cell: (a) => when(a.lastSeen) },
        ], r.agents, undefined, "No agent has connected."),
      );
      replace(edges, edgesTable(r.edges, new Date()));
      load.ok();
    } catch (err) {
      load.failed(err);
    }
  });
  return () => p.stop();
};
