import { useState } from "preact/hooks";
import { gql } from "../api/gql";
import { VERIFY, type VerifyReport } from "../api/queries";
import { href } from "../route";

/** `audit verify` over the whole log; the first violation links to its position. */
export function VerifyPanel() {
  const [report, setReport] = useState<VerifyReport | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  const run = async () => {
    setBusy(true);
    setError(null);
    try {
      setReport((await gql<{ verify: VerifyReport }>(VERIFY, {})).verify);
    } catch (err) {
      setError((err as Error).message);
    } finally {
      setBusy(false);
    }
  };
  const v = report?.firstViolation;
  return (
    <section class="panel" data-testid="verify">
      <h2>Audit verify</h2>
      <button type="button" onClick={() => void run()} disabled={busy}>{busy ? "checking…" : "Verify the log"}</button>
      {error && <p class="error">{error}</p>}
      {report && report.ok && (
        <p class="ok" data-testid="verify-result">all invariants hold over {report.decisionsChecked} decisions of {report.pools.length} pool(s)</p>
      )}
      {report && v && (
        <p class="error" data-testid="verify-result">
          VIOLATION at <a href={href.replay(v.position)}>position {v.position}</a> ({v.type} in {v.stream}): {v.message}
        </p>
      )}
    </section>
  );
}
