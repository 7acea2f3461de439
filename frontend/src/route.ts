import { useEffect, useState } from "preact/hooks";

// Views are addressed by the fragment: #/live, #/agents, #/agents/<id>, #/replay,
// #/replay/<position>, #/charts. Links can point at a turn's agent or a violation's position.
export interface Route {
  view: "live" | "agents" | "replay" | "charts";
  arg: string | null;
}

export function parseRoute(hash: string): Route {
  const [, view, arg] = hash.replace(/^#/, "").split("/");
  if (view === "agents" || view === "replay" || view === "charts") return { view, arg: arg ? decodeURIComponent(arg) : null };
  return { view: "live", arg: null };
}

export function useRoute(): Route {
  const [route, setRoute] = useState(parseRoute(location.hash));
  useEffect(() => {
    const onChange = () => setRoute(parseRoute(location.hash));
    window.addEventListener("hashchange", onChange);
    return () => window.removeEventListener("hashchange", onChange);
  }, []);
  return route;
}

export const href = {
  live: () => "#/live",
  agents: () => "#/agents",
  agent: (id: string) => `#/agents/${encodeURIComponent(id)}`,
  replay: (position?: number) => (position === undefined ? "#/replay" : `#/replay/${position}`),
  charts: () => "#/charts",
};
