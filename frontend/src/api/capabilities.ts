// What this server's schema offers beyond what the console was written against, read by
// introspection once at login. Fields other parts of AgentRM add later (a learned
// concurrency limit on the scheduler state, say) then show without a console change, and
// a panel whose query is missing (resources, on a server without them) is left out.
import { gql } from "./gql";

export interface Capabilities {
  schedulerExtras: string[];  // scalar fields of SchedulerState the console does not know
  laneExtras: string[];       // the same for LaneSlot
  resources: boolean;         // Query.resources exists
}

export const NONE: Capabilities = { schedulerExtras: [], laneExtras: [], resources: false };

const KNOWN_SCHEDULER = new Set(["pool", "position", "lanes", "levels", "rateLimit"]);
const KNOWN_LANE = new Set(["index", "turnId", "agentId", "grantedAt", "leaseExpiresAt", "awaitingFirstChunk"]);

interface TypeRef { kind: string; ofType: TypeRef | null }
interface Field { name: string; type: TypeRef; args?: { name: string }[] }

const INTROSPECT = `query Capabilities {
  scheduler: __type(name: "SchedulerState") { fields { name args { name } type { kind ofType { kind ofType { kind } } } } }
  lane: __type(name: "LaneSlot") { fields { name args { name } type { kind ofType { kind ofType { kind } } } } }
  schema: __schema { queryType { fields { name } } } }`;

function isScalar(t: TypeRef | null): boolean {
  if (!t) return false;
  if (t.kind === "NON_NULL") return isScalar(t.ofType);
  return t.kind === "SCALAR" || t.kind === "ENUM";
}

export function extras(fields: Field[] | undefined, known: Set<string>): string[] {
  // Only argument-free scalars: they can be selected without knowing anything about them.
  return (fields ?? []).filter((f) => !known.has(f.name) && !f.args?.length && isScalar(f.type)).map((f) => f.name);
}

export async function loadCapabilities(): Promise<Capabilities> {
  try {
    const d = await gql<{
      scheduler: { fields: Field[] } | null;
      lane: { fields: Field[] } | null;
      schema: { queryType: { fields: { name: string }[] } };
    }>(INTROSPECT);
    return {
      schedulerExtras: extras(d.scheduler?.fields, KNOWN_SCHEDULER),
      laneExtras: extras(d.lane?.fields, KNOWN_LANE),
      resources: d.schema.queryType.fields.some((f) => f.name === "resources"),
    };
  } catch {
    return NONE; // introspection switched off: the panels the console knows still work
  }
}
