// Time series the charts draw, folded from the event stream (latency, 429s, pauses,
// goodput: each event carries its own time) and from scheduler snapshots (queue depth,
// lanes occupied: state, sampled when it changes). Bounded: old buckets fall off.
import type { LogEvent, PriorityClass, SchedulerState } from "../api/queries";

export const BUCKET_S = 10;
const MAX_BUCKETS = 360; // one hour of 10-second buckets
const MAX_SAMPLES = 1200;

export const CLASSES: PriorityClass[] = ["INTERACTIVE", "BATCH", "BACKGROUND"];

interface Bucket {
  latencies: Record<PriorityClass, number[]>;
  rateLimited: number;
  pauses: number;
  completedOk: number;
  goodTokens: number;
}

export interface Sample {
  t: number;
  queued: number[];
  lanesBusy: number;
  lanes: number;
}

function newBucket(): Bucket {
  return { latencies: { INTERACTIVE: [], BATCH: [], BACKGROUND: [] }, rateLimited: 0, pauses: 0, completedOk: 0, goodTokens: 0 };
}

export function eventTime(e: LogEvent): number {
  const at = e.data.at;
  return typeof at === "number" ? at : Date.parse(e.recordedAt) / 1000;
}

export function percentile(sorted: number[], p: number): number | null {
  if (!sorted.length) return null;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[i];
}

export class Series {
  private buckets = new Map<number, Bucket>();
  private turnClass = new Map<string, PriorityClass>();
  readonly samples: Sample[] = [];

  fold(e: LogEvent, classOfAgent: (agentId: string) => PriorityClass | undefined): void {
    const d = e.data;
    if (e.type === "TurnQueued") {
      this.turnClass.set(String(d.turn_id), d.priority_class as PriorityClass);
      return;
    }
    const t = eventTime(e);
    if (e.type === "TurnCompleted") {
      const b = this.bucket(t);
      const turnId = String(d.turn_id);
      const cls = this.turnClass.get(turnId) ?? classOfAgent(String(d.agent_id));
      this.turnClass.delete(turnId);
      if (d.outcome === "OK") {
        b.completedOk += 1;
        b.goodTokens += Number(d.prompt_tokens ?? 0) + Number(d.completion_tokens ?? 0);
        if (cls && typeof d.queued_at === "number") b.latencies[cls].push(t - d.queued_at);
      } else if (d.outcome === "RATE_LIMITED") {
        b.rateLimited += 1;
      }
    } else if (e.type === "TurnReaped" || e.type === "TurnCancelled") {
      this.turnClass.delete(String(d.turn_id));
    } else if (e.type === "PoolPaused") {
      this.bucket(t).pauses += 1;
    }
  }

  sample(s: SchedulerState, t: number): void {
    this.samples.push({
      t,
      queued: s.levels.map((l) => l.queued.length),
      lanesBusy: s.lanes.filter((l) => l.turnId).length,
      lanes: s.lanes.length,
    });
    if (this.samples.length > MAX_SAMPLES) this.samples.splice(0, this.samples.length - MAX_SAMPLES);
  }

  /** Another pool: its state samples start afresh (the event-derived buckets are fleet-wide). */
  resetSamples(): void {
    this.samples.length = 0;
  }

  private bucket(t: number): Bucket {
    const key = Math.floor(t / BUCKET_S) * BUCKET_S;
    let b = this.buckets.get(key);
    if (!b) {
      b = newBucket();
      this.buckets.set(key, b);
      if (this.buckets.size > MAX_BUCKETS) {
        const oldest = Math.min(...this.buckets.keys());
        this.buckets.delete(oldest);
      }
    }
    return b;
  }

  /** Rows per bucket, oldest first: what the bucketed charts draw. */
  rows(): { t: number; p50: (number | null)[]; p95: (number | null)[]; rateLimited: number; pauses: number;
            goodputPerMin: number; goodTokensPerS: number }[] {
    return [...this.buckets.entries()].sort((a, b) => a[0] - b[0]).map(([t, b]) => {
      const sorted = CLASSES.map((c) => [...b.latencies[c]].sort((x, y) => x - y));
      return {
        t,
        p50: sorted.map((s) => percentile(s, 50)),
        p95: sorted.map((s) => percentile(s, 95)),
        rateLimited: b.rateLimited,
        pauses: b.pauses,
        goodputPerMin: (b.completedOk * 60) / BUCKET_S,
        goodTokensPerS: b.goodTokens / BUCKET_S,
      };
    });
  }
}
