import { useMemo, useState } from "preact/hooks";
import type { LogEvent } from "../api/queries";
import { time } from "../format";
import { VirtualList } from "./VirtualList";

interface Props {
  events: LogEvent[];
  types: Set<string>;
  name: (agentId: string) => string;
  onTurn: (turnId: string) => void;
  height?: number;
}

function turnOf(e: LogEvent): string | null {
  const t = e.data.turn_id;
  return typeof t === "string" ? t : null;
}

function agentOf(e: LogEvent): string | null {
  const a = e.data.agent_id;
  return typeof a === "string" ? a : null;
}

/** The scrolling log, newest at the bottom, filterable by type, agent (id or name) and turn. */
export function EventLog({ events, types: seen, name, onTurn, height = 320 }: Props) {
  const [type, setType] = useState("");
  const [agent, setAgent] = useState("");
  const [turn, setTurn] = useState("");
  const types = useMemo(() => [...seen].sort(), [seen.size]);
  const shown = useMemo(() => {
    const a = agent.trim().toLowerCase();
    const t = turn.trim();
    if (!type && !a && !t) return events;
    return events.filter((e) => {
      if (type && e.type !== type) return false;
      if (t && !(turnOf(e) ?? "").startsWith(t)) return false;
      if (a) {
        const id = agentOf(e);
        if (!id || !(id.startsWith(a) || name(id).toLowerCase().includes(a))) return false;
      }
      return true;
    });
  }, [events, events.length ? events[events.length - 1].position : 0, type, agent, turn]);
  return (
    <section class="panel" data-testid="event-log">
      <h2>Event log <small data-testid="event-count">{shown.length} of {events.length}</small></h2>
      <div class="filters">
        <select aria-label="event type" value={type} onChange={(e) => setType(e.currentTarget.value)}>
          <option value="">all types</option>
          {types.map((t) => <option key={t} value={t}>{t}</option>)}
        </select>
        <input aria-label="filter by agent" placeholder="agent" value={agent} onInput={(e) => setAgent(e.currentTarget.value)} />
        <input aria-label="filter by turn" placeholder="turn" value={turn} onInput={(e) => setTurn(e.currentTarget.value)} />
      </div>
      <VirtualList items={shown} rowHeight={22} height={height} follow testId="event-rows"
        row={(e) => {
          const t = turnOf(e);
          const a = agentOf(e);
          return (
            <div class="row event" key={e.position} data-position={e.position} data-type={e.type}>
              <span class="pos">{e.position}</span>
              <span class="when">{time(e.recordedAt)}</span>
              <span class="type">{e.type}</span>
              <span class="who">{a ? name(a) : e.stream}</span>
              {t ? <button type="button" class="link turn-link" onClick={() => onTurn(t)}>turn {t.slice(0, 8)}</button> : <span />}
            </div>
          );
        }} />
    </section>
  );
}
