import type { Resource } from "../api/queries";

/** Shared resources (tools, files, sandboxes): who holds each and who waits. Shown when
 *  the server has the resources query. */
export function Resources({ resources, name }: { resources: Resource[]; name: (id: string) => string }) {
  // "hidden": another agent's lease, which an agent's token is not told the owner of.
  const whose = (id: string) => (id === "hidden" ? "another agent" : name(id));
  return (
    <section class="panel" data-testid="resources">
      <h2>Resources <small>{resources.length}</small></h2>
      {resources.length === 0 && <p class="muted">none defined</p>}
      <table class="turns">
        <tbody>
          {resources.map((r) => (
            <tr key={r.name} data-resource={r.name}>
              <td><b>{r.name}</b> <small>{r.holders.length}/{r.capacity}</small></td>
              <td>{r.holders.map((h) => `${whose(h.agentId)} (${h.mode.toLowerCase()})`).join(", ") || "free"}</td>
              <td>{r.waiters.length > 0 && `waiting: ${r.waiters.map((w) => whose(w.agentId)).join(", ")}`}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </section>
  );
}
