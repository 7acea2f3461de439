import type { ContextTiers } from "../api/queries";
import { num } from "../format";

/** An agent's context by tier: pinned, key facts (superseded ones struck through), warm
 *  summaries, hot messages, and what went cold; tokens per tier on top. */
export function ContextTiersView({ tiers }: { tiers: ContextTiers }) {
  const live = tiers.keyFacts.filter((f) => !f.supersededBy);
  return (
    <div class="tiers" data-testid="context-tiers">
      <table class="tier-tokens">
        <thead><tr><th>tier</th><th>items</th><th>tokens</th></tr></thead>
        <tbody>
          <tr data-tier="pinned"><td>pinned</td><td>{tiers.pinned.length}</td><td>{num(tiers.pinnedTokens)}</td></tr>
          <tr data-tier="facts"><td>key facts</td><td>{live.length} live, {tiers.keyFacts.length - live.length} superseded</td><td>{num(tiers.factsTokens)}</td></tr>
          <tr data-tier="warm"><td>warm summaries</td><td>{tiers.warmSummaries.length}</td><td>{num(tiers.warmTokens)}</td></tr>
          <tr data-tier="hot"><td>hot messages</td><td>{tiers.hot.length}</td><td>{num(tiers.hotTokens)}</td></tr>
          <tr data-tier="cold"><td>cold</td><td>{tiers.coldMessages} messages in {tiers.coldChunks} chunks</td><td>{num(tiers.coldTokens)}</td></tr>
        </tbody>
      </table>
      {tiers.hibernated && <p class="muted">hibernated: shown as a wake would restore it</p>}
      <h3>Pinned</h3>
      <ul class="messages">{tiers.pinned.map((m) => <li key={m.seq} class="pinned"><b>{m.role}</b> {m.content}</li>)}</ul>
      <h3>Key facts</h3>
      <ul class="facts">
        {tiers.keyFacts.map((f) => (
          <li key={f.factId} class={f.supersededBy ? "superseded" : ""} data-superseded={f.supersededBy ? "true" : "false"}>
            <small>{f.kind}</small> {f.supersededBy ? <s>{f.text}</s> : f.text}
            {f.supersededBy && <small> (superseded)</small>}
          </li>
        ))}
      </ul>
      <h3>Warm summaries</h3>
      <ul class="summaries">
        {tiers.warmSummaries.map((s) => <li key={s.segmentId}><small>#{s.fromSeq}–{s.toSeq}, {s.tokens} tokens</small> {s.summary}</li>)}
      </ul>
      <h3>Hot messages</h3>
      <ul class="messages" data-testid="hot-messages">
        {tiers.hot.map((m) => <li key={m.seq}><small>#{m.seq} · {m.tokens} tokens</small> <b>{m.role}</b> {m.content}</li>)}
      </ul>
    </div>
  );
}
