import { useEffect, useState } from "preact/hooks";
import { gql } from "../api/gql";
import { EXPLAIN_TURN } from "../api/queries";

/** A turn's story, told by the server's `explainTurn` (queued, why it waited, granted, ...). */
export function TurnStory({ turnId, onClose }: { turnId: string; onClose: () => void }) {
  const [lines, setLines] = useState<string[] | null>(null);
  const [error, setError] = useState<string | null>(null);
  useEffect(() => {
    setLines(null);
    setError(null);
    gql<{ explainTurn: string[] }>(EXPLAIN_TURN, { turnId })
      .then((d) => setLines(d.explainTurn))
      .catch((e: Error) => setError(e.message));
  }, [turnId]);
  return (
    <aside class="drawer" data-testid="turn-story" aria-label={`turn ${turnId}`}>
      <header>
        <h2>Turn <code>{turnId}</code></h2>
        <button type="button" onClick={onClose} aria-label="close">×</button>
      </header>
      {error && <p class="error">{error}</p>}
      {lines === null && !error && <p>loading…</p>}
      {lines && <ol class="story">{lines.map((l, i) => <li key={i}>{l}</li>)}</ol>}
    </aside>
  );
}
