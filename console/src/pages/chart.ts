// A small SVG line chart of a destination's last 15 minutes (10 s buckets),
// or of its life so far when it is younger (chartSamples): configured and
// current rate, and per-second delivered and throttled.
import type { RateSample } from "../../../sdk/typescript/src/gen/rivora/v1/admin_pb.js";
import { formatDuration, formatRate } from "../format.js";

const ns = "http://www.w3.org/2000/svg";
const W = 640;
const H = 180;
const pad = { l: 44, r: 8, t: 10, b: 20 };
const bucket = 10; // seconds per sample

export const series: { key: string; label: string; value: (s: RateSample) => number }[] = [
  { key: "configured", label: "Configured rate", value: (s) => s.configuredRate },
  { key: "current", label: "Current rate", value: (s) => s.currentRate },
  { key: "delivered", label: "Delivered/s", value: (s) => s.delivered / bucket },
  { key: "throttled", label: "Throttled (429)/s", value: (s) => s.throttled / bucket },
];

function el<K extends keyof SVGElementTagNameMap>(tag: K, attrs: Record<string, string | number>): SVGElementTagNameMap[K] {
  const e = document.createElementNS(ns, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  return e;
}

function startMillis(s: RateSample): number {
  return Number(s.start?.seconds ?? 0n) * 1000 + (s.start?.nanos ?? 0) / 1e6;
}

/** chartSamples keeps the samples from where the destination's data
 * starts: the bucket it was created in (createdAt), so that a destination
 * created a minute ago is drawn over its minute, not over fifteen minutes of
 * flat history before it existed. A line needs two points: at least two are
 * kept. */
export function chartSamples(samples: RateSample[], createdAt: Date | undefined): RateSample[] {
  if (!createdAt || samples.length <= 2) return samples;
  const born = createdAt.getTime();
  let from = samples.findIndex((s) => startMillis(s) + bucket * 1000 > born);
  if (from < 0) from = samples.length;
  return samples.slice(Math.min(from, samples.length - 2));
}

/** chartSince says where a chart shorter than fifteen minutes starts: at
 * the destination's creation (the agent's history, or chartSamples, begins
 * within a bucket of createdAt), or where its agent took it up (restarted,
 * or its partition moved there), whose time before the agent does not
 * know. A full chart says nothing. */
export function chartSince(samples: RateSample[], createdAt: Date | undefined): string {
  if (samples.length === 0 || samples.length >= (15 * 60) / bucket) return "";
  if (createdAt && startMillis(samples[0]!) < createdAt.getTime() + bucket * 1000) return " (since it was created)";
  return " (since its agent took it up)";
}

/** chartSpan is how long the samples cover, as the chart labels it ("15m",
 * "1m 20s"). */
export function chartSpan(samples: RateSample[]): string {
  return formatDuration(samples.length * bucket);
}

export function rateChart(samples: RateSample[]): SVGSVGElement {
  const svg = el("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart", role: "img", "data-span": chartSpan(samples) });
  const title = el("title", {});
  title.textContent = `Rate over the last ${chartSpan(samples)}: configured, current, delivered and throttled per second`;
  svg.appendChild(title);
  const n = Math.max(samples.length, 2);
  const max = Math.max(1, ...samples.flatMap((s) => series.map((x) => x.value(s))));
  const x = (i: number): number => pad.l + (i * (W - pad.l - pad.r)) / (n - 1);
  const y = (v: number): number => H - pad.b - (v / max) * (H - pad.t - pad.b);
  for (const f of [0, 0.5, 1]) {
    svg.appendChild(el("line", { x1: pad.l, x2: W - pad.r, y1: y(max * f), y2: y(max * f), class: "grid" }));
    const t = el("text", { x: pad.l - 4, y: y(max * f) + 4, class: "axis", "text-anchor": "end" });
    t.textContent = formatRate(max * f);
    svg.appendChild(t);
  }
  for (const [label, at] of [[`-${chartSpan(samples)}`, 0], ["now", n - 1]] as const) {
    const t = el("text", { x: x(at), y: H - 4, class: "axis", "text-anchor": at === 0 ? "start" : "end" });
    t.textContent = label;
    svg.appendChild(t);
  }
  for (const s of series) {
    const pts = samples.map((p, i) => `${x(i).toFixed(1)},${y(s.value(p)).toFixed(1)}`).join(" ");
    svg.appendChild(el("polyline", { points: pts, class: `line line-${s.key}` }));
  }
  return svg;
}
