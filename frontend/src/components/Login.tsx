import { useState } from "preact/hooks";

interface Props {
  error: string | null;
  busy: boolean;
  onLogin: (token: string) => void;
}

/** The operator token, asked once per browser session (`agentrm token` prints it). */
export function Login({ error, busy, onLogin }: Props) {
  const [token, setToken] = useState("");
  return (
    <form class="login panel" data-testid="login" onSubmit={(e) => { e.preventDefault(); onLogin(token.trim()); }}>
      <h1>AgentRM console</h1>
      <label>Operator token
        <input type="password" name="token" autoComplete="current-password" value={token} aria-label="operator token"
               placeholder="printed by `agentrm token`" onInput={(e) => setToken(e.currentTarget.value)} />
      </label>
      <button type="submit" disabled={busy || !token.trim()}>{busy ? "checking…" : "Log in"}</button>
      {error && <p class="error" role="alert" data-testid="login-error">{error}</p>}
      <p class="muted">Kept for this browser session only.</p>
    </form>
  );
}
