// Agents: the cell as the control plane sees it.
import { admin, errorText, when } from "../api.js";
import { h, replace, status, table } from "../dom.js";
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

export const agentsPage: Page = (main) => {
  const st = status();
  const body = h("div", { "data-testid": "agents" });
  const version = h("p");
  replace(main, h("h1", {}, "Agents"), version, st.el, body);
  const p = poll(async () => {
    try {
      const r = await admin.getConfigStatus({});
      version.textContent = `Config version ${r.version}.`;
      replace(
        body,
        table(`${r.agents.length} agents`, [
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
      st.clear();
    } catch (err) {
      st.error(`Could not load agents: ${errorText(err)}`);
    }
  });
  return () => p.stop();
};
