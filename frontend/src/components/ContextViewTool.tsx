import { useState } from "preact/hooks";
import { gql } from "../api/gql";
import { CONTEXT_VIEW, type ContextView } from "../api/queries";

/** "What would this agent see at budget B with query Q": the server's view assembly. */
export function ContextViewTool({ agentId }: { agentId: string }) {
  const [budget, setBudget] = useState(2000);
  const [query, setQuery] = useState("");
  const [view, setView] = useState<ContextView | null>(null);
  const [error, setError] = useState<string | null>(null);
  const run = async (e: Event) => {
    e.preventDefault();
    setError(null);
    try {
      const d = await gql<{ context: ContextView }>(CONTEXT_VIEW, { id: agentId, budget, query: query || null });
      setView(d.context);
    } catch (err) {
      setView(null);
      setError((err as Error).message);
    }
  };
  return (
    <div class="view-tool" data-testid="context-view-tool">
      <form onSubmit={run}>
        <label>budget <input type="number" min={1} value={budget} aria-label="budget tokens"
                             onInput={(e) => setBudget(Number(e.currentTarget.value))} /></label>
        <label>query <input value={query} aria-label="query" onInput={(e) => setQuery(e.currentTarget.value)} /></label>
        <button type="submit">View</button>
      </form>
      {error && <p class="error">{error}</p>}
      {view && <ContextItems view={view} />}
    </div>
  );
}

export function ContextItems({ view }: { view: ContextView }) {
  return (
    <div data-testid="context-view">
      <p>{view.tokens} of {view.budgetTokens} tokens, {view.items.length} items
        {view.omittedPinned.length > 0 && <span class="error"> · {view.omittedPinned.length} pinned did not fit</span>}</p>
      <ol class="items">
        {view.items.map((i, n) => <li key={n} class={`tier-${i.tier}`}><small>{i.tier}/{i.kind} · {i.tokens}</small> {i.content}</li>)}
      </ol>
    </div>
  );
}
