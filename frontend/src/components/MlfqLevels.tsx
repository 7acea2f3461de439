import type { SchedulerState } from "../api/queries";
import { since } from "../format";

interface Props {
  state: SchedulerState;
  name: (agentId: string) => string;
  classOf: (agentId: string) => string | undefined;
  now: number | null; // null in replay: no wall clock applies to a past state
}

/** The MLFQ levels as queues of waiting turns, lowest level (served first) on top. */
export function MlfqLevels({ state, name, classOf, now }: Props) {
  return (
    <section class="panel" data-testid="mlfq-levels">
      <h2>MLFQ levels</h2>
      {state.levels.map((level) => (
        <div class="level" key={level.level} data-level={level.level}>
          <span class="level-name">L{level.level}</span>
          <span class="level-count">{level.queued.length} waiting</span>
          <div class="queue">
            {level.queued.slice(0, 60).map((q) => (
              <span class={`chip cls-${classOf(q.agentId) ?? "x"}`} key={q.turnId} data-turn={q.turnId}
                    title={`turn ${q.turnId}${q.estimatedTokens ? `, ~${q.estimatedTokens} tokens` : ""}`}>
                {name(q.agentId)} <small>{(classOf(q.agentId) ?? "").toLowerCase()}</small>
                {now !== null && <small class="wait"> {since(q.queuedAt, now)}</small>}
              </span>
            ))}
            {level.queued.length > 60 && <span class="more">+{level.queued.length - 60} more</span>}
          </div>
        </div>
      ))}
    </section>
  );
}
