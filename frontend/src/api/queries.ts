// Every GraphQL document the console sends, with the types of their answers. A new panel
// adds its query here; a field another part of the API adds later is one line in a
// fragment below and one in the matching type.

export interface LaneSlot {
  index: number;
  turnId: string | null;
  agentId: string | null;
  grantedAt: string | null;
  leaseExpiresAt: string | null;
  awaitingFirstChunk: boolean;
}
export interface QueuedTurn {
  turnId: string;
  agentId: string;
  queuedAt: string | null;
  estimatedTokens: number | null;
}
export interface RateLimit {
  rpm: number;
  tpm: number;
  availableRequests: number;
  availableTokens: number;
  pausedUntil: string | null;
  rateFactor: number;
}
export interface SchedulerState {
  pool: string;
  position: number;
  lanes: LaneSlot[];
  levels: { level: number; queued: QueuedTurn[] }[];
  rateLimit: RateLimit;
}

/** Fields the server has beyond these (see capabilities.ts) ride along, shown as they come. */
export type Extras = Record<string, unknown>;

function schedulerFields(schedulerExtras: string[], laneExtras: string[]): string {
  return `pool position ${schedulerExtras.join(" ")}
  lanes { index turnId agentId grantedAt leaseExpiresAt awaitingFirstChunk ${laneExtras.join(" ")} }
  levels { level queued { turnId agentId queuedAt estimatedTokens } }
  rateLimit { rpm tpm availableRequests availableTokens pausedUntil rateFactor }`;
}

export function schedulerQuery(schedulerExtras: string[] = [], laneExtras: string[] = []): string {
  return `query Scheduler($pool: String!) { scheduler(pool: $pool) { ${schedulerFields(schedulerExtras, laneExtras)} } }`;
}

export function schedulerAtQuery(schedulerExtras: string[] = [], laneExtras: string[] = []): string {
  return `query SchedulerAt($pool: String!, $position: Int!) {
  schedulerAt(pool: $pool, position: $position) { ${schedulerFields(schedulerExtras, laneExtras)} } }`;
}

export interface Resource {
  name: string;
  capacity: number;
  // agentId reads "hidden" for another agent's lease (an agent's view; the operator sees every id).
  holders: { agentId: string; mode: string }[];
  waiters: { agentId: string; mode: string }[];
}
export const RESOURCES = `query Resources { resources { name capacity holders { agentId mode } waiters { agentId mode } } }`;

export type PriorityClass = "INTERACTIVE" | "BATCH" | "BACKGROUND";
export type AgentStateName = "ACTIVE" | "HIBERNATED" | "QUARANTINED";

export interface Agent {
  id: string;
  name: string;
  pool: string;
  priorityClass: PriorityClass;
  level: number;
  state: AgentStateName;
  reaps: number;
  completions: number;
  registeredAt: string;
}
export interface AgentActivity {
  agentId: string;
  turns: number;
  queued: number;
  granted: number;
  tokens: number;
  lastActivityAt: string | null;
}
const AGENT_FIELDS = "id name pool priorityClass level state reaps completions registeredAt";

export const FLEET = `query Fleet($pool: String) {
  agents(pool: $pool) { ${AGENT_FIELDS} }
  agentActivity(pool: $pool) { agentId turns queued granted tokens lastActivityAt } }`;

export const POOLS = `query Pools { pools { name lanes rpm tpm leaseSeconds levels boostSeconds } logHead }`;
export interface Pool {
  name: string;
  lanes: number;
  rpm: number;
  tpm: number;
  leaseSeconds: number;
  levels: number;
  boostSeconds: number;
}

export interface LogEvent {
  position: number;
  stream: string;
  type: string;
  data: Record<string, unknown>;
  recordedAt: string;
}
const EVENT_FIELDS = "position stream type data recordedAt";
export const EVENTS_SUBSCRIPTION = `subscription Events($after: Int) { events(after: $after) { ${EVENT_FIELDS} } }`;
export const EVENTS_PAGE = `query EventsPage($after: Int!, $limit: Int!) { events(after: $after, limit: $limit) { ${EVENT_FIELDS} } }`;

export const EXPLAIN_TURN = `query Explain($turnId: ID!) { explainTurn(turnId: $turnId) }`;

export const RELEASE = `mutation Release($id: ID!) { releaseAgent(agentId: $id) { ${AGENT_FIELDS} } }`;
export const HIBERNATE = `mutation Hibernate($id: ID!) { hibernateAgent(agentId: $id) { ${AGENT_FIELDS} } }`;
export const WAKE = `mutation Wake($id: ID!) { wakeAgent(agentId: $id) { ${AGENT_FIELDS} } }`;

export interface ContextMessage {
  seq: number;
  role: string;
  content: string;
  tokens: number;
  pinned: boolean;
}
export interface ContextTiers {
  agentId: string;
  hibernated: boolean;
  pinned: ContextMessage[];
  keyFacts: { factId: string; kind: string; text: string; tokens: number; supersededBy: string | null }[];
  warmSummaries: { segmentId: string; fromSeq: number; toSeq: number; summary: string; tokens: number }[];
  hot: ContextMessage[];
  coldChunks: number;
  coldMessages: number;
  pinnedTokens: number;
  factsTokens: number;
  warmTokens: number;
  hotTokens: number;
  coldTokens: number;
  compactions: number;
}
export const CONTEXT_TIERS = `query Tiers($id: ID!) { contextTiers(agentId: $id) {
  agentId hibernated pinned { seq role content tokens pinned }
  keyFacts { factId kind text tokens supersededBy }
  warmSummaries { segmentId fromSeq toSeq summary tokens }
  hot { seq role content tokens pinned }
  coldChunks coldMessages pinnedTokens factsTokens warmTokens hotTokens coldTokens compactions } }`;

export interface ContextView {
  agentId: string;
  budgetTokens: number;
  tokens: number;
  items: { tier: string; kind: string; role: string; content: string; tokens: number; ref: string }[];
  omittedPinned: number[];
}
const VIEW_FIELDS = "agentId budgetTokens tokens items { tier kind role content tokens ref } omittedPinned";
export const CONTEXT_VIEW = `query View($id: ID!, $budget: Int!, $query: String) {
  context(agentId: $id, budgetTokens: $budget, query: $query) { ${VIEW_FIELDS} } }`;
export const CONTEXT_AT = `query ViewAt($id: ID!, $budget: Int!, $position: Int!) {
  contextAt(agentId: $id, budgetTokens: $budget, position: $position) { ${VIEW_FIELDS} } }`;

export interface Turn {
  id: string;
  status: string;
  lane: number | null;
  level: number | null;
  estimatedTokens: number;
  requestedAt: string;
  grantedAt: string | null;
  finishedAt: string | null;
  outcome: string | null;
  reason: string | null;
}
export const AGENT_TURNS = `query AgentTurns($id: ID!) { agentTurns(agentId: $id, limit: 20) {
  id status lane level estimatedTokens requestedAt grantedAt finishedAt outcome reason } }`;

export interface RunMetrics {
  turns: number;
  finished: number;
  completedOk: number;
  rateLimited: number;
  errors: number;
  reaped: number;
  cancelled: number;
  unfinished: number;
  latencyP50: number | null;
  latencyP90: number | null;
  latencyP99: number | null;
  latencyMax: number | null;
  laneSeconds: number;
  productiveLaneSeconds: number;
  laneWaste: number | null;
  throughputPerMinute: number | null;
  spanSeconds: number;
}
export interface WhatIfSettings {
  lanes: number;
  policy: string;
  levels: number;
  leaseSeconds: number;
  boostSeconds: number;
}
export interface WhatIfReport {
  fromPosition: number;
  toPosition: number;
  recordedSettings: WhatIfSettings;
  settings: WhatIfSettings;
  actual: RunMetrics;
  whatIf: RunMetrics;
  grantsCompared: number;
  sameGrantOrder: boolean;
  firstDivergence: string | null;
  simulationComplete: boolean;
}
const METRICS = `turns finished completedOk rateLimited errors reaped cancelled unfinished latencyP50 latencyP90
  latencyP99 latencyMax laneSeconds productiveLaneSeconds laneWaste throughputPerMinute spanSeconds`;
const SETTINGS = "lanes policy levels leaseSeconds boostSeconds";
export const WHAT_IF = `query WhatIf($pool: String!, $from: Int, $to: Int, $lanes: Int, $policy: String,
    $leaseSeconds: Float, $levels: Int, $boostSeconds: Float) {
  whatIf(pool: $pool, fromPosition: $from, toPosition: $to, lanes: $lanes, policy: $policy,
         leaseSeconds: $leaseSeconds, levels: $levels, boostSeconds: $boostSeconds) {
    fromPosition toPosition recordedSettings { ${SETTINGS} } settings { ${SETTINGS} }
    actual { ${METRICS} } whatIf { ${METRICS} } grantsCompared sameGrantOrder firstDivergence simulationComplete } }`;

export interface VerifyReport {
  ok: boolean;
  eventsChecked: number;
  decisionsChecked: number;
  pools: string[];
  firstViolation: { position: number; stream: string; type: string; message: string } | null;
}
export const VERIFY = `query Verify($pool: String) { verify(pool: $pool) {
  ok eventsChecked decisionsChecked pools firstViolation { position stream type message } } }`;
