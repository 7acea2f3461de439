import { useMemo, useState } from "preact/hooks";
import type { Agent, AgentActivity } from "../api/queries";
import { href } from "../route";
import type { LiveStore } from "../state/store";
import { useStore } from "../state/useStore";
import { num, since } from "../format";
import { AgentActions } from "./AgentActions";
import { useNow } from "./hooks";
import { VirtualList } from "./VirtualList";

interface Row {
  agent: Agent;
  activity: AgentActivity | undefined;
}

type Key = "name" | "pool" | "priorityClass" | "level" | "state" | "turns" | "tokens" | "reaps" | "lastActivityAt";

const COLUMNS: { key: Key; label: string }[] = [
  { key: "name", label: "name" }, { key: "pool", label: "pool" }, { key: "priorityClass", label: "class" }, { key: "level", label: "level" },
  { key: "state", label: "state" }, { key: "turns", label: "turns" }, { key: "tokens", label: "tokens" },
  { key: "reaps", label: "reaps" }, { key: "lastActivityAt", label: "last activity" },
];

function value(r: Row, key: Key): string | number {
  switch (key) {
    case "turns": return r.activity?.turns ?? 0;
    case "tokens": return r.activity?.tokens ?? 0;
    case "lastActivityAt": return r.activity?.lastActivityAt ?? "";
    default: return r.agent[key];
  }
}

/** Every agent of every pool: sortable by any column, filterable by name, class and state. */
export function AgentTable({ store }: { store: LiveStore }) {
  useStore(store);
  const now = useNow(1000);
  const [sort, setSort] = useState<{ key: Key; desc: boolean }>({ key: "name", desc: false });
  const [text, setText] = useState("");
  const [cls, setCls] = useState("");
  const [state, setState] = useState("");
  const rows = useMemo(() => {
    const needle = text.trim().toLowerCase();
    const out: Row[] = [];
    for (const agent of store.agents.values()) {
      if (needle && !agent.name.toLowerCase().includes(needle) && !agent.id.startsWith(needle)) continue;
      if (cls && agent.priorityClass !== cls) continue;
      if (state && agent.state !== state) continue;
      out.push({ agent, activity: store.activity.get(agent.id) });
    }
    const sign = sort.desc ? -1 : 1;
    out.sort((a, b) => {
      const x = value(a, sort.key), y = value(b, sort.key);
      return (x < y ? -1 : x > y ? 1 : 0) * sign;
    });
    return out;
  }, [store.version, text, cls, state, sort]);
  return (
    <section class="panel" data-testid="agent-table">
      <h2>Agents <small data-testid="agent-count">{rows.length} of {store.agents.size}</small></h2>
      <div class="filters">
        <input aria-label="filter agents" placeholder="name or id" value={text} onInput={(e) => setText(e.currentTarget.value)} />
        <select aria-label="class" value={cls} onChange={(e) => setCls(e.currentTarget.value)}>
          <option value="">all classes</option><option>INTERACTIVE</option><option>BATCH</option><option>BACKGROUND</option>
        </select>
        <select aria-label="state" value={state} onChange={(e) => setState(e.currentTarget.value)}>
          <option value="">all states</option><option>ACTIVE</option><option>HIBERNATED</option><option>QUARANTINED</option>
        </select>
      </div>
      <VirtualList items={rows} rowHeight={28} height={520} testId="agent-rows"
        header={
          <div class="row agent head">
            {COLUMNS.map((c) => (
              <button type="button" key={c.key} class="sort" aria-sort={sort.key === c.key ? (sort.desc ? "descending" : "ascending") : "none"}
                      onClick={() => setSort({ key: c.key, desc: sort.key === c.key ? !sort.desc : false })}>
                {c.label}{sort.key === c.key ? (sort.desc ? " ▼" : " ▲") : ""}
              </button>
            ))}
            <span>actions</span>
          </div>
        }
        row={({ agent, activity }) => (
          <div class="row agent" key={agent.id} data-agent={agent.id}>
            <a href={href.agent(agent.id)}>{agent.name}</a>
            <span>{agent.pool}</span>
            <span>{agent.priorityClass.toLowerCase()}</span>
            <span>L{agent.level}</span>
            <span class={`state-${agent.state}`}>{agent.state.toLowerCase()}</span>
            <span>{num(activity?.turns ?? 0)}</span>
            <span>{num(activity?.tokens ?? 0)}</span>
            <span>{agent.reaps}</span>
            <span>{since(activity?.lastActivityAt, now)} ago</span>
            <AgentActions agent={agent} store={store} />
          </div>
        )} />
    </section>
  );
}
