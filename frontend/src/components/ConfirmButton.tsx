import { useState } from "preact/hooks";

interface Props {
  label: string;
  question: string;
  action: () => Promise<void>;
}

/** An operator action: a click asks first, a second click (Confirm) does it. */
export function ConfirmButton({ label, question, action }: Props) {
  const [asking, setAsking] = useState(false);
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string | null>(null);
  if (!asking) {
    return <button type="button" class="action" onClick={() => { setError(null); setAsking(true); }}>{label}</button>;
  }
  return (
    <span class="confirm" role="alertdialog" aria-label={question}>
      {question}{" "}
      <button type="button" class="danger" disabled={busy} onClick={async () => {
        setBusy(true);
        try {
          await action();
          setAsking(false);
        } catch (e) {
          setError((e as Error).message);
        } finally {
          setBusy(false);
        }
      }}>Confirm</button>
      <button type="button" onClick={() => setAsking(false)}>Cancel</button>
      {error && <span class="error"> {error}</span>}
    </span>
  );
}
