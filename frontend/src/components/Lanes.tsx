import type { Extras, SchedulerState } from "../api/queries";
import { until } from "../format";

interface Props {
  state: SchedulerState;
  extras?: string[];     // the scheduler's fields the console does not know (a learned limit, ...)
  laneExtras?: string[];
  name: (agentId: string) => string;
  now: number | null;
  onTurn?: (turnId: string) => void;
}

/** One box per lane: its holder, and when the grant ends (start deadline or lease). */
export function Lanes({ state, name, now, onTurn, extras = [], laneExtras = [] }: Props) {
  const busy = state.lanes.filter((l) => l.turnId).length;
  return (
    <section class="panel" data-testid="lanes">
      <h2>Lanes <small>{busy}/{state.lanes.length} busy</small></h2>
      {extras.length > 0 && <ExtraFields values={state as unknown as Extras} names={extras} />}
      <div class="lanes">
        {state.lanes.map((lane) => lane.turnId ? (
          <button type="button" class={`lane busy${lane.awaitingFirstChunk ? " starting" : ""}`} key={lane.index}
                  data-lane={lane.index} data-turn={lane.turnId} onClick={() => onTurn?.(lane.turnId!)}>
            <span class="lane-index">#{lane.index}</span>
            <span class="lane-agent">{name(lane.agentId!)}</span>
            <span class="lane-deadline">
              {lane.awaitingFirstChunk ? "start deadline " : "lease "}
              {now !== null ? until(lane.leaseExpiresAt, now) : (lane.leaseExpiresAt ?? "").slice(11, 23)}
            </span>
            {laneExtras.length > 0 && <ExtraFields values={lane as unknown as Extras} names={laneExtras} />}
          </button>
        ) : (
          <div class="lane free" key={lane.index} data-lane={lane.index}>
            <span class="lane-index">#{lane.index}</span> free
          </div>
        ))}
      </div>
    </section>
  );
}

/** Fields this console was not written against, as the server sends them. */
export function ExtraFields({ values, names }: { values: Extras; names: string[] }) {
  return (
    <dl class="extras" data-testid="extra-fields">
      {names.map((n) => <div key={n}><dt>{n}</dt><dd>{String(values[n] ?? "–")}</dd></div>)}
    </dl>
  );
}
