// The live feed: the `events` subscription over graphql-transport-ws, resumed after the last
// position seen whenever the connection drops. The server's subscription is gapless and
// repeat-free from `after`; re-subscribing from the last delivered position (and dropping
// anything at or below it) keeps that promise across reconnects.
import { createClient, type Client } from "graphql-ws";
import { authorization, classify } from "./gql";
import { EVENTS_SUBSCRIPTION, type LogEvent } from "./queries";

export type LinkState =
  | { kind: "connecting" }
  | { kind: "live"; resumedFrom: number | null }
  | { kind: "reconnecting"; attempt: number; reason: string }
  | { kind: "unauthenticated"; reason: string };

export interface LiveFeedOptions {
  after: number;
  onEvents: (batch: LogEvent[]) => void;
  onState: (state: LinkState) => void;
}

const MAX_BACKOFF_MS = 5000;

export class LiveFeed {
  private client: Client | null = null;
  private stopped = false;
  private lastPosition: number;
  private attempt = 0;
  private retryTimer: number | undefined;
  private unsubscribe: (() => void) | null = null;
  private everConnected = false;

  constructor(private readonly options: LiveFeedOptions) {
    this.lastPosition = options.after;
  }

  get position(): number {
    return this.lastPosition;
  }

  start(): void {
    const url = `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/graphql`;
    this.client = createClient({
      url,
      lazy: true,
      retryAttempts: 0, // this class resubscribes itself, from the last position it saw
      connectionParams: () => ({ authorization: authorization() }),
      keepAlive: 10_000,
    });
    this.subscribe();
  }

  stop(): void {
    this.stopped = true;
    window.clearTimeout(this.retryTimer);
    this.unsubscribe?.();
    void this.client?.dispose();
  }

  private subscribe(): void {
    if (this.stopped || !this.client) return;
    this.options.onState(this.attempt === 0 && !this.everConnected
      ? { kind: "connecting" } : { kind: "reconnecting", attempt: this.attempt, reason: "connecting" });
    const from = this.lastPosition;
    this.unsubscribe = this.client.subscribe<{ events: LogEvent }>(
      { query: EVENTS_SUBSCRIPTION, variables: { after: from } },
      {
        next: (result) => {
          if (result.errors?.length) {
            this.fail(classify(result.errors as never).kind === "unauthenticated", result.errors[0].message);
            return;
          }
          const event = result.data?.events;
          if (!event) return;
          if (event.position <= this.lastPosition) return; // never twice
          this.lastPosition = event.position;
          this.options.onEvents([event]);
        },
        error: (err) => this.fail(isAuthClose(err), describe(err)),
        complete: () => this.fail(false, "the server ended the subscription"),
      },
    );
    // The socket's `connected` event tells when the subscription is live (the server
    // acknowledged connection_init); the first event may come much later.
    const off = this.client.on("connected", () => {
      off();
      this.attempt = 0;
      this.options.onState({ kind: "live", resumedFrom: this.everConnected ? from : null });
      this.everConnected = true;
    });
  }

  private fail(unauthenticated: boolean, reason: string): void {
    this.unsubscribe?.();
    this.unsubscribe = null;
    if (this.stopped) return;
    if (unauthenticated) {
      this.options.onState({ kind: "unauthenticated", reason });
      return;
    }
    this.attempt += 1;
    this.options.onState({ kind: "reconnecting", attempt: this.attempt, reason });
    const delay = Math.min(MAX_BACKOFF_MS, 250 * 2 ** Math.min(this.attempt - 1, 5));
    this.retryTimer = window.setTimeout(() => this.subscribe(), delay);
  }
}

function isAuthClose(err: unknown): boolean {
  // A refused subscription arrives as GraphQL errors (UNAUTHENTICATED); a refused
  // connection_init as close code 4403.
  if (Array.isArray(err)) return classify(err).kind === "unauthenticated";
  return typeof err === "object" && err !== null && "code" in err && (err as CloseEvent).code === 4403;
}

function describe(err: unknown): string {
  if (err instanceof Error) return err.message;
  if (typeof err === "object" && err !== null && "code" in err) {
    const e = err as CloseEvent;
    return e.reason ? `connection closed (${e.code}: ${e.reason})` : `connection closed (${e.code})`;
  }
  if (Array.isArray(err) && err[0]?.message) return String(err[0].message);
  return "connection lost";
}
