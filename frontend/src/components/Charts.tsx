import { useMemo } from "preact/hooks";
import type { AlignedData } from "uplot";
import type { LiveStore } from "../state/store";
import { BUCKET_S, CLASSES } from "../state/series";
import { useStore } from "../state/useStore";
import { TimeChart, type Line } from "./TimeChart";

const LEVEL_COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"];
const CLASS_COLORS: Record<string, string> = { INTERACTIVE: "#1f77b4", BATCH: "#ff7f0e", BACKGROUND: "#7f7f7f" };

/** Over time: queue depth per level, lanes occupied, latency per class, 429s and pauses, goodput. */
export function Charts({ store }: { store: LiveStore }) {
  useStore(store);
  const samples = store.series.samples;
  const rows = useMemo(() => store.series.rows(), [store.version]);
  const levels = samples.length ? samples[samples.length - 1].queued.length : 0;
  const t = samples.map((s) => s.t);
  const queue: AlignedData = [t, ...Array.from({ length: levels }, (_, i) => samples.map((s) => s.queued[i] ?? 0))];
  const lanes: AlignedData = [t, samples.map((s) => s.lanesBusy), samples.map((s) => s.lanes)];
  const bt = rows.map((r) => r.t);
  const latency: AlignedData = [bt, ...CLASSES.flatMap((_, i) => [rows.map((r) => r.p50[i]), rows.map((r) => r.p95[i])])];
  const pushback: AlignedData = [bt, rows.map((r) => r.rateLimited), rows.map((r) => r.pauses)];
  const goodput: AlignedData = [bt, rows.map((r) => r.goodputPerMin), rows.map((r) => r.goodTokensPerS)];
  const levelLines: Line[] = Array.from({ length: levels }, (_, i) => ({ label: `L${i}`, color: LEVEL_COLORS[i % LEVEL_COLORS.length] }));
  const latencyLines: Line[] = CLASSES.flatMap((c) => [
    { label: `${c.toLowerCase()} p50`, color: CLASS_COLORS[c] },
    { label: `${c.toLowerCase()} p95`, color: CLASS_COLORS[c] + "88" },
  ]);
  return (
    <section class="panel charts" data-testid="charts">
      <h2>Over time <small>queues and lanes of pool {store.pool}, sampled as they change; latency, 429s,
        pauses and goodput of all pools per {BUCKET_S} s</small></h2>
      <div class="chart-grid">
        <TimeChart title="queue depth per level" lines={levelLines} data={queue} stepped />
        <TimeChart title="lanes occupied" lines={[{ label: "busy", color: "#2ca02c" }, { label: "lanes", color: "#999" }]} data={lanes} stepped />
        <TimeChart title="latency per class (s)" lines={latencyLines} data={latency} />
        <TimeChart title={`429s and pauses per ${BUCKET_S} s`} lines={[{ label: "429s", color: "#d62728" }, { label: "pauses", color: "#9467bd" }]} data={pushback} />
        <TimeChart title="goodput" lines={[{ label: "ok turns/min", color: "#2ca02c" }, { label: "tokens/s", color: "#17becf" }]} data={goodput} />
      </div>
    </section>
  );
}
