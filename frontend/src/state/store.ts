// The console's live state: one store, fed by the event subscription, read by every panel.
// Events are batched: whatever arrives within a frame is folded at once and the panels
// render once per frame, however busy the log. The scheduler snapshot (MLFQ levels, lanes,
// rate budget) is the server's own fold, re-read when events say it changed, at most a few
// times a second; the console never re-implements the scheduler's rules.
import { ApiError, gql } from "../api/gql";
import { LiveFeed, type LinkState } from "../api/live";
import { loadCapabilities, NONE, type Capabilities } from "../api/capabilities";
import {
  FLEET, POOLS, RESOURCES, schedulerQuery,
  type Agent, type AgentActivity, type LogEvent, type Pool, type PriorityClass, type Resource, type SchedulerState,
} from "../api/queries";
import { Series } from "./series";

const MAX_EVENTS = 20_000;      // the log panel keeps this many, newest last
const BACKFILL = 2_000;         // events read back at start, so the log and charts have a past
const MAX_HAPPENINGS = 200;
const SCHEDULER_MIN_INTERVAL_MS = 250;
const FLEET_MIN_INTERVAL_MS = 2_000;
const RESOURCES_MIN_INTERVAL_MS = 500;

// What the "as it happens" feed shows: the scheduler's interventions and the provider's pushback.
export const HAPPENING_TYPES = new Set([
  "TurnReaped", "AgentDemoted", "LevelsBoosted", "TurnPromoted", "AgentQuarantined", "QuarantineLifted",
  "PoolPaused", "PoolResumed", "ModelPaused", "AgentPaused", "AgentHibernated", "AgentWoken",
]);

export function isHappening(e: LogEvent): boolean {
  return HAPPENING_TYPES.has(e.type) || (e.type === "TurnCompleted" && e.data.outcome === "RATE_LIMITED");
}

type Listener = () => void;

/** Runs `fn` at most once per `interval`, and once more after a call that came while it ran. */
class Coalescer {
  private running = false;
  private again = false;
  private last = 0;
  private timer: number | undefined;

  constructor(private readonly fn: () => Promise<void>, private readonly interval: number) {}

  request(): void {
    if (this.running) {
      this.again = true;
      return;
    }
    if (this.timer !== undefined) return;
    const wait = Math.max(0, this.last + this.interval - Date.now());
    this.timer = window.setTimeout(() => void this.run(), wait);
  }

  private async run(): Promise<void> {
    this.timer = undefined;
    this.running = true;
    this.last = Date.now();
    try {
      await this.fn();
    } catch {
      // The link state shows an outage; the next event asks again.
    } finally {
      this.running = false;
      if (this.again) {
        this.again = false;
        this.request();
      }
    }
  }

  cancel(): void {
    window.clearTimeout(this.timer);
  }
}

export class LiveStore {
  pool = "default";
  pools: Pool[] = [];
  scheduler: SchedulerState | null = null;
  capabilities: Capabilities = NONE;
  resources: Resource[] | null = null;     // null: this server has no resources query
  agents = new Map<string, Agent>();
  activity = new Map<string, AgentActivity>();
  events: LogEvent[] = [];
  happenings: LogEvent[] = [];
  link: LinkState = { kind: "connecting" };
  head = 0;
  received = 0;            // events delivered by the subscription since the start
  firstPosition = 0;       // the subscription started after this position
  readonly series = new Series();
  readonly eventTypes = new Set<string>();
  readonly lastPositionOfAgent = new Map<string, number>(); // what a detail view re-reads on
  error: string | null = null;

  // Names and classes of agents registered since the fleet was last read, from their
  // AgentRegistered events: a new agent's first turn shows its name at once.
  private registered = new Map<string, { name: string; priorityClass: PriorityClass }>();
  private listeners = new Set<Listener>();
  private pending: LogEvent[] = [];
  private frame: number | undefined;
  private feed: LiveFeed | null = null;
  private schedulerRefresh = new Coalescer(() => this.loadScheduler(), SCHEDULER_MIN_INTERVAL_MS);
  private fleetRefresh = new Coalescer(() => this.loadFleet(), FLEET_MIN_INTERVAL_MS);
  private resourcesRefresh = new Coalescer(() => this.loadResources(), RESOURCES_MIN_INTERVAL_MS);
  private schedulerDocument = schedulerQuery();
  version = 0;

  subscribe(listener: Listener): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  private changed(): void {
    this.version += 1;
    for (const l of this.listeners) l();
  }

  agentName(agentId: string | null | undefined): string {
    if (!agentId) return "";
    return this.agents.get(agentId)?.name ?? this.registered.get(agentId)?.name ?? agentId.slice(0, 8);
  }

  classOf = (agentId: string): PriorityClass | undefined =>
    this.agents.get(agentId)?.priorityClass ?? this.registered.get(agentId)?.priorityClass;

  /** Loads the snapshot, then follows the log live from a little before its head. */
  async start(): Promise<void> {
    this.capabilities = await loadCapabilities();
    this.schedulerDocument = schedulerQuery(this.capabilities.schedulerExtras, this.capabilities.laneExtras);
    const { pools, logHead } = await gql<{ pools: Pool[]; logHead: number }>(POOLS);
    this.pools = pools;
    if (!pools.some((p) => p.name === this.pool) && pools.length) this.pool = pools[0].name;
    this.head = logHead;
    await Promise.all([this.loadScheduler(), this.loadFleet(), this.loadResources()]);
    this.firstPosition = Math.max(0, logHead - BACKFILL);
    this.feed = new LiveFeed({
      after: this.firstPosition,
      onEvents: (batch) => this.enqueue(batch),
      onState: (state) => {
        this.link = state;
        // After an outage the snapshot is stale: re-read it once the feed is live again.
        if (state.kind === "live" && state.resumedFrom !== null) {
          this.schedulerRefresh.request();
          this.fleetRefresh.request();
          this.resourcesRefresh.request();
        }
        this.changed();
      },
    });
    this.feed.start();
    this.changed();
  }

  stop(): void {
    this.feed?.stop();
    this.schedulerRefresh.cancel();
    this.fleetRefresh.cancel();
    this.resourcesRefresh.cancel();
    if (this.frame !== undefined) cancelAnimationFrame(this.frame);
  }

  setPool(pool: string): void {
    this.pool = pool;
    this.scheduler = null;
    this.series.resetSamples();
    this.schedulerRefresh.request();
    this.fleetRefresh.request();
    this.changed();
  }

  private enqueue(batch: LogEvent[]): void {
    this.pending.push(...batch);
    if (this.frame === undefined) this.frame = requestAnimationFrame(() => this.flush());
  }

  private flush(): void {
    this.frame = undefined;
    const batch = this.pending;
    this.pending = [];
    let fleetChanged = false;
    let resourcesChanged = false;
    for (const e of batch) {
      this.received += 1;
      this.head = Math.max(this.head, e.position);
      if (e.type === "AgentRegistered") {
        this.registered.set(String(e.data.agent_id), {
          name: String(e.data.name), priorityClass: e.data.priority_class as PriorityClass });
      }
      this.series.fold(e, this.classOf);
      this.eventTypes.add(e.type);
      if (e.stream.startsWith("resource-") || e.type.includes("Resource")) resourcesChanged = true;
      if (typeof e.data.agent_id === "string") this.lastPositionOfAgent.set(e.data.agent_id, e.position);
      if (isHappening(e)) this.happenings.push(e);
      if (e.stream.startsWith("agent-") || HAPPENING_TYPES.has(e.type) || e.type === "TurnCompleted") fleetChanged = true;
    }
    this.events.push(...batch);
    if (this.events.length > MAX_EVENTS) this.events.splice(0, this.events.length - MAX_EVENTS);
    if (this.happenings.length > MAX_HAPPENINGS) this.happenings.splice(0, this.happenings.length - MAX_HAPPENINGS);
    this.schedulerRefresh.request();
    if (fleetChanged) this.fleetRefresh.request();
    if (resourcesChanged && this.capabilities.resources) this.resourcesRefresh.request();
    this.changed();
  }

  async loadScheduler(): Promise<void> {
    try {
      const pool = this.pool;
      const { scheduler } = await gql<{ scheduler: SchedulerState }>(this.schedulerDocument, { pool });
      if (pool !== this.pool) return; // the operator switched pools meanwhile
      this.scheduler = scheduler;
      this.series.sample(scheduler, Date.now() / 1000);
      this.error = null;
    } catch (err) {
      this.error = err instanceof ApiError ? err.message : String(err);
      throw err;
    } finally {
      this.changed();
    }
  }

  async loadFleet(): Promise<void> {
    const { agents, agentActivity } = await gql<{ agents: Agent[]; agentActivity: AgentActivity[] }>(FLEET, {});
    this.agents = new Map(agents.map((a) => [a.id, a]));
    this.activity = new Map(agentActivity.map((a) => [a.agentId, a]));
    this.changed();
  }

  async loadResources(): Promise<void> {
    if (!this.capabilities.resources) return;
    this.resources = (await gql<{ resources: Resource[] }>(RESOURCES)).resources;
    this.changed();
  }

  /** An operator action's answer (the agent as it is now) shown at once. */
  updateAgent(agent: Agent): void {
    this.agents.set(agent.id, agent);
    this.changed();
    this.fleetRefresh.request();
  }
}
