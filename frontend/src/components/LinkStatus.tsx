import type { LiveStore } from "../state/store";

/** Whether the live view is live, and from where it resumed after an outage. */
export function LinkStatus({ store }: { store: LiveStore }) {
  const link = store.link;
  let text: string;
  let cls: string;
  switch (link.kind) {
    case "live":
      cls = "live";
      text = link.resumedFrom === null ? "live" : `live, resumed after position ${link.resumedFrom}`;
      break;
    case "connecting":
      cls = "wait";
      text = "connecting…";
      break;
    case "reconnecting":
      cls = "down";
      text = `server unreachable, reconnecting (attempt ${link.attempt})…`;
      break;
    case "unauthenticated":
      cls = "down";
      text = "the server rejected the operator token";
      break;
  }
  return (
    <span class={`link-status ${cls}`} data-testid="link-status" data-state={link.kind} role="status">
      {text} · position <b data-testid="live-position">{store.head}</b>
    </span>
  );
}
