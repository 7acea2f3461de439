import type { LogEvent } from "../api/queries";
import { time } from "../format";

function describe(e: LogEvent, name: (id: string) => string): string {
  const d = e.data;
  const who = typeof d.agent_id === "string" ? name(d.agent_id) : "";
  switch (e.type) {
    case "TurnReaped":
      return `${who}: turn reaped on lane ${d.lane}${d.no_first_chunk ? " (no first chunk before its start deadline)" : " (lease expired)"}`;
    case "AgentDemoted":
      return `${who} demoted L${d.from_level} → L${d.to_level}`;
    case "LevelsBoosted":
      return "all agents boosted to their entry level";
    case "TurnPromoted":
      return `${who}: waiting turn promoted L${d.from_level} → L${d.to_level}`;
    case "AgentQuarantined":
      return `${who} quarantined after ${d.consecutive_reaps} reaps`;
    case "QuarantineLifted":
      return `${who} released from quarantine`;
    case "PoolPaused":
      return `pool paused for ${Number(d.retry_after).toFixed(1)} s (AIMD factor ${Number(d.rate_factor).toFixed(2)})`;
    case "PoolResumed":
      return "pool resumed";
    case "ModelPaused":
      return `model ${d.model} paused for ${Number(d.retry_after).toFixed(1)} s (its AIMD factor ${Number(d.rate_factor).toFixed(2)})`;
    case "AgentPaused":
      return `${who} paused for ${Number(d.retry_after).toFixed(1)} s after its own 429 report (a claim)`;
    case "TurnCompleted":
      return `${who}: provider answered 429`;
    case "AgentHibernated":
      return `${who} hibernated`;
    case "AgentWoken":
      return `${who} woken`;
    default:
      return e.type;
  }
}

/** What the scheduler did, and what the provider pushed back, as it happens. */
export function Happenings({ items, name }: { items: LogEvent[]; name: (id: string) => string }) {
  const latest = items.slice(-14).reverse();
  return (
    <section class="panel" data-testid="happenings">
      <h2>As it happens</h2>
      {latest.length === 0 && <p class="muted">no reaps, demotions, boosts, 429s or pauses yet</p>}
      <ul class="happenings">
        {latest.map((e) => (
          <li key={e.position} class={`h-${e.type}`} data-type={e.type}>
            <span class="when">{time(e.recordedAt)}</span> {describe(e, name)}
          </li>
        ))}
      </ul>
    </section>
  );
}
