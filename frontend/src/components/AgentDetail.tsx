import { useEffect, useState } from "preact/hooks";
import { gql } from "../api/gql";
import { AGENT_TURNS, CONTEXT_TIERS, type ContextTiers, type Turn } from "../api/queries";
import { href } from "../route";
import type { LiveStore } from "../state/store";
import { useStore } from "../state/useStore";
import { num } from "../format";
import { AgentActions } from "./AgentActions";
import { ContextTiersView } from "./ContextTiersView";
import { ContextViewTool } from "./ContextViewTool";

/** One agent: its context tiers, a budgeted view tool and its recent turns. Re-read when
 *  the log shows something about this agent. */
export function AgentDetail({ store, agentId, onTurn }: { store: LiveStore; agentId: string; onTurn: (t: string) => void }) {
  useStore(store);
  const agent = store.agents.get(agentId);
  const [tiers, setTiers] = useState<ContextTiers | null>(null);
  const [turns, setTurns] = useState<Turn[]>([]);
  const [error, setError] = useState<string | null>(null);
  const touched = store.lastPositionOfAgent.get(agentId) ?? 0;
  useEffect(() => {
    let gone = false;
    Promise.all([
      gql<{ contextTiers: ContextTiers }>(CONTEXT_TIERS, { id: agentId }),
      gql<{ agentTurns: Turn[] }>(AGENT_TURNS, { id: agentId }),
    ]).then(([c, t]) => {
      if (gone) return;
      setTiers(c.contextTiers);
      setTurns(t.agentTurns);
      setError(null);
    }).catch((e: Error) => !gone && setError(e.message));
    return () => { gone = true; };
  }, [agentId, touched]);
  return (
    <section class="panel detail" data-testid="agent-detail">
      <p><a href={href.agents()}>← all agents</a></p>
      <h2>{agent?.name ?? agentId} {agent && <small>{agent.priorityClass.toLowerCase()} · L{agent.level} · {agent.state.toLowerCase()}</small>}</h2>
      {agent && <AgentActions agent={agent} store={store} />}
      {error && <p class="error">{error}</p>}
      <div class="columns">
        <div>
          <h3>Context tiers</h3>
          {tiers ? <ContextTiersView tiers={tiers} /> : <p>loading…</p>}
        </div>
        <div>
          <h3>View at budget B with query Q</h3>
          <ContextViewTool agentId={agentId} />
          <h3>Recent turns</h3>
          <table class="turns" data-testid="recent-turns">
            <thead><tr><th>turn</th><th>status</th><th>level</th><th>lane</th><th>tokens</th><th>requested</th></tr></thead>
            <tbody>
              {turns.map((t) => (
                <tr key={t.id}>
                  <td><button type="button" class="link" onClick={() => onTurn(t.id)}>{t.id.slice(0, 8)}</button></td>
                  <td>{t.status.toLowerCase()}{t.outcome ? ` (${t.outcome.toLowerCase()})` : ""}</td>
                  <td>{t.level ?? "–"}</td><td>{t.lane ?? "–"}</td><td>{num(t.estimatedTokens)}</td>
                  <td>{t.requestedAt.slice(11, 19)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      </div>
    </section>
  );
}

