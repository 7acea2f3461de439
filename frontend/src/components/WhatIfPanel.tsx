import { useState } from "preact/hooks";
import { gql } from "../api/gql";
import { WHAT_IF, type RunMetrics, type WhatIfReport } from "../api/queries";
import { num } from "../format";

const ROWS: { key: keyof RunMetrics; label: string; digits?: number }[] = [
  { key: "turns", label: "turns" }, { key: "completedOk", label: "completed ok" },
  { key: "rateLimited", label: "429s" }, { key: "reaped", label: "reaped" }, { key: "unfinished", label: "unfinished" },
  { key: "latencyP50", label: "latency p50 (s)", digits: 2 }, { key: "latencyP90", label: "latency p90 (s)", digits: 2 },
  { key: "latencyP99", label: "latency p99 (s)", digits: 2 }, { key: "laneSeconds", label: "lane-seconds", digits: 1 },
  { key: "laneWaste", label: "lane waste", digits: 3 }, { key: "throughputPerMinute", label: "turns/min", digits: 1 },
];

/** The recorded workload replayed under other settings, side by side with what happened. */
export function WhatIfPanel({ pool, from, to }: { pool: string; from: number; to: number }) {
  const [lanes, setLanes] = useState("");
  const [policy, setPolicy] = useState("");
  const [lease, setLease] = useState("");
  const [report, setReport] = useState<WhatIfReport | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  const run = async (e: Event) => {
    e.preventDefault();
    setBusy(true);
    setError(null);
    try {
      const d = await gql<{ whatIf: WhatIfReport }>(WHAT_IF, {
        pool, from, to,
        lanes: lanes ? Number(lanes) : null, policy: policy || null, leaseSeconds: lease ? Number(lease) : null,
      });
      setReport(d.whatIf);
    } catch (err) {
      setError((err as Error).message);
    } finally {
      setBusy(false);
    }
  };
  return (
    <section class="panel" data-testid="what-if">
      <h2>What if <small>positions {from}–{to}</small></h2>
      <form onSubmit={run} class="filters">
        <label>lanes <input type="number" min={1} value={lanes} aria-label="what-if lanes" onInput={(e) => setLanes(e.currentTarget.value)} /></label>
        <label>policy <select value={policy} aria-label="what-if policy" onChange={(e) => setPolicy(e.currentTarget.value)}>
          <option value="">as recorded</option><option value="mlfq">mlfq</option><option value="fifo">fifo</option>
        </select></label>
        <label>lease s <input type="number" min={0.1} step="any" value={lease} aria-label="what-if lease" onInput={(e) => setLease(e.currentTarget.value)} /></label>
        <button type="submit" disabled={busy}>{busy ? "running…" : "Run what-if"}</button>
      </form>
      {error && <p class="error">{error}</p>}
      {report && (
        <table class="compare" data-testid="what-if-report">
          <thead>
            <tr><th /><th>recorded ({report.recordedSettings.lanes} lanes, {report.recordedSettings.policy})</th>
              <th>what if ({report.settings.lanes} lanes, {report.settings.policy})</th></tr>
          </thead>
          <tbody>
            {ROWS.map((r) => (
              <tr key={r.key}><td>{r.label}</td>
                <td>{num(report.actual[r.key] as number | null, r.digits ?? 0)}</td>
                <td>{num(report.whatIf[r.key] as number | null, r.digits ?? 0)}</td></tr>
            ))}
            <tr><td>same grant order</td><td colSpan={2}>{report.sameGrantOrder ? "yes" : `no: ${report.firstDivergence ?? ""}`}</td></tr>
          </tbody>
        </table>
      )}
    </section>
  );
}
