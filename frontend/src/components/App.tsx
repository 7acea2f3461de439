import { useEffect, useMemo, useState } from "preact/hooks";
import { ApiError, gql, setToken } from "../api/gql";
import { POOLS } from "../api/queries";
import { forgetToken, keepToken, storedToken, tokenFromFragment } from "../auth";
import { href, useRoute } from "../route";
import { LiveStore } from "../state/store";
import { useStore } from "../state/useStore";
import { AgentDetail } from "./AgentDetail";
import { AgentTable } from "./AgentTable";
import { Charts } from "./Charts";
import { LinkStatus } from "./LinkStatus";
import { LiveView } from "./LiveView";
import { Login } from "./Login";
import { ReplayScrubber } from "./ReplayScrubber";
import { TurnStory } from "./TurnStory";
import { VerifyPanel } from "./VerifyPanel";
import { WhatIfPanel } from "./WhatIfPanel";

export function App() {
  const initial = useMemo(() => tokenFromFragment() ?? storedToken(), []);
  const [store, setStore] = useState<LiveStore | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);

  const login = async (token: string) => {
    setBusy(true);
    setError(null);
    setToken(token);
    try {
      await gql(POOLS); // checks the token before anything is kept
      keepToken(token);
      const s = new LiveStore();
      await s.start();
      setStore(s);
    } catch (err) {
      forgetToken();
      setError(err instanceof ApiError ? err.message : String(err));
    } finally {
      setBusy(false);
    }
  };

  useEffect(() => {
    if (initial) void login(initial);
  }, []);

  if (!store) return <Login error={error} busy={busy} onLogin={(t) => void login(t)} />;
  return <Console store={store} onLogout={() => { store.stop(); forgetToken(); setStore(null); }} />;
}

function Console({ store, onLogout }: { store: LiveStore; onLogout: () => void }) {
  useStore(store);
  const route = useRoute();
  const [turn, setTurn] = useState<string | null>(null);
  const tab = (view: string, label: string, link: string) => (
    <a href={link} class={route.view === view ? "tab active" : "tab"} aria-current={route.view === view ? "page" : undefined}>{label}</a>
  );
  return (
    <div class="console" data-testid="console">
      <header class="top">
        <h1>AgentRM</h1>
        <nav>
          {tab("live", "Live", href.live())}
          {tab("agents", "Agents", href.agents())}
          {tab("replay", "Replay & audit", href.replay())}
          {tab("charts", "Charts", href.charts())}
        </nav>
        <label>pool{" "}
          <select aria-label="pool" value={store.pool} onChange={(e) => store.setPool(e.currentTarget.value)}>
            {store.pools.map((p) => <option key={p.name}>{p.name}</option>)}
          </select>
        </label>
        <LinkStatus store={store} />
        <button type="button" onClick={onLogout}>Log out</button>
      </header>
      <main>
        {route.view === "live" && <LiveView store={store} onTurn={setTurn} />}
        {route.view === "agents" && (route.arg
          ? <AgentDetail store={store} agentId={route.arg} onTurn={setTurn} />
          : <AgentTable store={store} />)}
        {route.view === "replay" && (
          <>
            <ReplayScrubber store={store} initial={route.arg ? Number(route.arg) : null} />
            <div class="grid">
              <WhatIfPanel pool={store.pool} from={0} to={store.head} />
              <VerifyPanel />
            </div>
          </>
        )}
        {route.view === "charts" && <Charts store={store} />}
      </main>
      {turn && <TurnStory turnId={turn} onClose={() => setTurn(null)} />}
    </div>
  );
}
