import { useEffect, useState } from "preact/hooks";

/** The wall clock in seconds, ticking locally (countdowns; no server round trip). */
export function useNow(intervalMs = 500): number {
  const [now, setNow] = useState(Date.now() / 1000);
  useEffect(() => {
    const timer = window.setInterval(() => setNow(Date.now() / 1000), intervalMs);
    return () => window.clearInterval(timer);
  }, [intervalMs]);
  return now;
}
