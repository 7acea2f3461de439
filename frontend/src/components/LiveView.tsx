import type { LiveStore } from "../state/store";
import { useStore } from "../state/useStore";
import { EventLog } from "./EventLog";
import { Happenings } from "./Happenings";
import { useNow } from "./hooks";
import { Lanes } from "./Lanes";
import { MlfqLevels } from "./MlfqLevels";
import { RateBudget } from "./RateBudget";
import { Resources } from "./Resources";

/** The live queue: lanes, MLFQ levels, rate budget, interventions, the event log. */
export function LiveView({ store, onTurn }: { store: LiveStore; onTurn: (turnId: string) => void }) {
  useStore(store);
  const now = useNow(250);
  const s = store.scheduler;
  const name = (id: string) => store.agentName(id);
  return (
    <div class="live">
      {store.error && <p class="error banner">{store.error}</p>}
      {s ? (
        <div class="grid">
          <Lanes state={s} name={name} now={now} onTurn={onTurn}
                 extras={store.capabilities.schedulerExtras} laneExtras={store.capabilities.laneExtras} />
          <RateBudget rate={s.rateLimit} now={now} />
          <MlfqLevels state={s} name={name} classOf={store.classOf} now={now} />
          <Happenings items={store.happenings} name={name} />
          {store.resources && <Resources resources={store.resources} name={name} />}
        </div>
      ) : <p>loading the scheduler…</p>}
      <EventLog events={store.events} types={store.eventTypes} name={name} onTurn={onTurn} />
    </div>
  );
}
