import { gql } from "../api/gql";
import { HIBERNATE, RELEASE, WAKE, type Agent } from "../api/queries";
import type { LiveStore } from "../state/store";
import { ConfirmButton } from "./ConfirmButton";

/** The operator's actions on one agent, each behind a confirmation. */
export function AgentActions({ agent, store }: { agent: Agent; store: LiveStore }) {
  const run = (mutation: string, field: string) => async () => {
    const d = await gql<Record<string, Agent>>(mutation, { id: agent.id });
    store.updateAgent(d[field]);
  };
  return (
    <span class="actions">
      {agent.state === "QUARANTINED" &&
        <ConfirmButton label="Release" question={`Release ${agent.name} from quarantine?`} action={run(RELEASE, "releaseAgent")} />}
      {agent.state === "ACTIVE" &&
        <ConfirmButton label="Hibernate" question={`Hibernate ${agent.name}?`} action={run(HIBERNATE, "hibernateAgent")} />}
      {agent.state === "HIBERNATED" &&
        <ConfirmButton label="Wake" question={`Wake ${agent.name}?`} action={run(WAKE, "wakeAgent")} />}
    </span>
  );
}
