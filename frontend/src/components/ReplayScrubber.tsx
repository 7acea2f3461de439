import { useEffect, useRef, useState } from "preact/hooks";
import { gql } from "../api/gql";
import {
  CONTEXT_AT, EVENTS_PAGE, schedulerAtQuery,
  type ContextView, type LogEvent, type SchedulerState,
} from "../api/queries";
import type { LiveStore } from "../state/store";
import { useStore } from "../state/useStore";
import { href } from "../route";
import { ContextItems } from "./ContextViewTool";
import { Lanes } from "./Lanes";
import { MlfqLevels } from "./MlfqLevels";
import { RateBudget } from "./RateBudget";

const STEP_WINDOW = 200;

/** A timeline over the log: dragging it shows the scheduler (`schedulerAt`) and an agent's
 *  context (`contextAt`) as of that position; the step buttons move one event at a time. */
export function ReplayScrubber({ store, initial }: { store: LiveStore; initial: number | null }) {
  useStore(store);
  const head = Math.max(store.head, 1);
  const [position, setPosition] = useState(initial ?? head);
  const [state, setState] = useState<SchedulerState | null>(null);
  const [event, setEvent] = useState<LogEvent | null>(null);
  const [agentId, setAgentId] = useState("");
  const [context, setContext] = useState<ContextView | null>(null);
  const [error, setError] = useState<string | null>(null);
  // What the operator is typing into "go to position", until they commit it (change). A
  // controlled input shows `position` otherwise, and every live update re-renders it:
  // Preact then put the DOM value back to `position`, and a position typed while events
  // arrived was lost before its change event read it.
  const [typed, setTyped] = useState<string | null>(null);
  const asked = useRef(0);

  useEffect(() => { if (initial !== null) setPosition(initial); }, [initial]);

  // Latest request wins: a drag fires many, only the last one's answer is shown.
  useEffect(() => {
    const ticket = ++asked.current;
    const timer = window.setTimeout(async () => {
      try {
        const [s, e] = await Promise.all([
          gql<{ schedulerAt: SchedulerState }>(
            schedulerAtQuery(store.capabilities.schedulerExtras, store.capabilities.laneExtras),
            { pool: store.pool, position }),
          gql<{ events: LogEvent[] }>(EVENTS_PAGE, { after: Math.max(0, position - 1), limit: 1 }),
        ]);
        const c = agentId
          ? (await gql<{ contextAt: ContextView }>(CONTEXT_AT, { id: agentId, budget: 4000, position })).contextAt
          : null;
        if (ticket !== asked.current) return;
        setState(s.schedulerAt);
        setEvent(e.events[0] ?? null);
        setContext(c);
        setError(null);
      } catch (err) {
        if (ticket === asked.current) setError((err as Error).message);
      }
    }, 60);
    return () => window.clearTimeout(timer);
  }, [position, agentId, store.pool]);

  const step = async (forward: boolean) => {
    // Positions are not dense (another pool's events, rolled-back sequence values): ask the log.
    if (forward) {
      const d = await gql<{ events: LogEvent[] }>(EVENTS_PAGE, { after: position, limit: 1 });
      if (d.events[0]) setPosition(d.events[0].position);
    } else {
      const d = await gql<{ events: LogEvent[] }>(EVENTS_PAGE, { after: Math.max(0, position - STEP_WINDOW), limit: STEP_WINDOW });
      const before = d.events.filter((e) => e.position < position);
      if (before.length) setPosition(before[before.length - 1].position);
    }
  };

  const name = (id: string) => store.agentName(id);
  const cls = (id: string) => store.classOf(id);
  return (
    <section class="panel replay" data-testid="replay">
      <h2>Replay <small>position <b data-testid="replay-position">{position}</b> of {head}</small></h2>
      <div class="scrubber">
        <button type="button" aria-label="step back" onClick={() => void step(false)}>◀</button>
        <input type="range" min={1} max={head} value={Math.min(position, head)} aria-label="log position"
               onInput={(e) => setPosition(Number(e.currentTarget.value))} />
        <button type="button" aria-label="step forward" onClick={() => void step(true)}>▶</button>
        <input type="number" min={1} max={head} value={typed ?? position} aria-label="go to position"
               onInput={(e) => setTyped(e.currentTarget.value)}
               onChange={(e) => { setTyped(null); setPosition(Number(e.currentTarget.value)); }} />
        <a href={href.live()}>back to live</a>
      </div>
      {error && <p class="error">{error}</p>}
      {event && (
        <p class="at-event" data-testid="replay-event">
          at <b>{event.position}</b>: {event.type} <code>{event.stream}</code> {event.recordedAt.slice(0, 23)}
        </p>
      )}
      {state && (
        <div class="grid" data-testid="replay-state" data-position={state.position}>
          <Lanes state={state} name={name} now={null}
                 extras={store.capabilities.schedulerExtras} laneExtras={store.capabilities.laneExtras} />
          <MlfqLevels state={state} name={name} classOf={cls} now={null} />
          <RateBudget rate={state.rateLimit} now={null} />
        </div>
      )}
      <div class="replay-context">
        <label>context of{" "}
          <select aria-label="replay agent" value={agentId} onChange={(e) => setAgentId(e.currentTarget.value)}>
            <option value="">(choose an agent)</option>
            {[...store.agents.values()].filter((a) => a.pool === store.pool).map((a) => <option key={a.id} value={a.id}>{a.name}</option>)}
          </select>
        </label>
        {context && <ContextItems view={context} />}
      </div>
    </section>
  );
}
