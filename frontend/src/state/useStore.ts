import { useEffect, useState } from "preact/hooks";
import type { LiveStore } from "./store";

/** Re-renders the calling component whenever the store changed (once per frame at most). */
export function useStore(store: LiveStore): LiveStore {
  const [, setVersion] = useState(store.version);
  useEffect(() => store.subscribe(() => setVersion(store.version)), [store]);
  return store;
}
