"""The fixed scenario of `agentrm bench abuse`: the pool, the honest agents' loop, the four
abusers' settings and the GraphQL documents both sides send.

Every number here was chosen before the first run and is not tuned to its results. The pool
is a realistic provider's: 4 lanes, 600 requests and 400,000 tokens a minute (the default
pool's limits). An honest agent's cycle is a turn (reserve 600 + 200 tokens, hold it
0.3 s, complete OK), then 0.5-1.5 s of thinking; every second turn it also appends two
ordinary messages and reads its context view at 4,000 tokens. Eight such agents use about
60% of the pool's request rate, 70% of its token rate and under half its lanes, so a clean
run has headroom and the grant latency it measures is the scheduler's, not a saturated
queue's.
"""
from __future__ import annotations

import httpx

POOL = "abuse"
POOL_LANES, POOL_RPM, POOL_TPM, POOL_LEASE_S = 4, 600, 400_000, 30.0

ESTIMATED_TOKENS, MAX_OUTPUT_TOKENS = 600, 200
HOLD_S = 0.3                        # a turn's provider call
THINK_MIN_S, THINK_MAX_S = 0.5, 1.5  # between turns, uniform (so agents do not march in step)
WAIT_S = 30.0                       # requestTurn's waitSeconds: a grant not given by then is a miss
VIEW_EVERY = 2                      # turns between context reads
VIEW_BUDGET = 4_000
MESSAGES_PER_VIEW = 2               # ordinary messages appended before each read

# (1) The flooder asks for turns at 100x an honest agent's rate (one turn per hold + mean
# think), open loop, and completes at once whatever it is granted: greedy, not broken.
FLOOD_FACTOR = 100
FLOOD_RATE_PER_S = FLOOD_FACTOR / (HOLD_S + (THINK_MIN_S + THINK_MAX_S) / 2)
FLOOD_CONNECTIONS = 64              # its HTTP connections (the per-agent queue cap is 32)
# (2) The junk appender: one message of 20k-100k characters of runs that are hard for
# tokenizers and pattern matchers, every 0.5 s (one in flight), and a compaction request
# after every fourth.
JUNK_INTERVAL_S = 0.5
JUNK_CHARS = (20_000, 100_000)      # within the API's 100,000-character message limit
JUNK_RUNS = ("1,", "1.", "a.", "a-", "a/", "a1-", "Europe/A", "@a.", "x:1", "http://a.b/c?d=e&f=")
COMPACT_EVERY = 4
# (3) The subscriber: 50 WebSocket connections with 4 `events` subscriptions each, all
# opened at the start and held to the end.
SUB_CONNECTIONS, SUBS_PER_CONNECTION = 50, 4
SUB_ANSWER_S = 10.0                 # a subscription with no first answer by then is "no answer"
# (4) The false claimant: an honest agent's cycle, but every turn completes RATE_LIMITED
# with retryAfterSeconds 3600 and rate-limit headers saying nothing remains for an hour.
CLAIM_RETRY_AFTER_S = 3600.0
CLAIM_HEADERS = {"retry-after": "3600", "x-ratelimit-remaining-requests": "0",
                 "x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-requests": "1h",
                 "x-ratelimit-reset-tokens": "1h"}

REQUEST = (f"mutation($wait: Float!) {{ requestTurn(input: {{estimatedTokens: {ESTIMATED_TOKENS}, "
           f"maxOutputTokens: {MAX_OUTPUT_TOKENS}, waitSeconds: $wait}}) {{ id status }} }}")
COMPLETE_OK = (f"mutation($id: ID!) {{ completeTurn(input: {{turnId: $id, outcome: OK, promptTokens: "
               f"{ESTIMATED_TOKENS}, completionTokens: {MAX_OUTPUT_TOKENS}}}) {{ status }} }}")
COMPLETE_CLAIM = ("mutation($id: ID!, $retry: Float, $headers: JSON) { completeTurn(input: {turnId: $id, "
                  "outcome: RATE_LIMITED, promptTokens: 0, completionTokens: 0, retryAfterSeconds: $retry, "
                  "rateLimitHeaders: $headers}) { status } }")
CANCEL = "mutation($id: ID!) { cancelTurn(turnId: $id) { status } }"
HEARTBEAT = "mutation($id: ID!) { heartbeat(turnId: $id) { status } }"
APPEND = ("mutation($r: String!, $c: String!) { appendContext(input: {role: $r, content: $c}) "
          "{ hotTokens } }")
COMPACT = "mutation { compactContext { compacted tokensBefore tokensAfter } }"
VIEW = "query($b: Int!) { context(budgetTokens: $b) { tokens items { role content } } }"
SUBSCRIBE = "subscription($after: Int) { events(after: $after) { position type } }"


def error_code(body: dict) -> str:
    return str(((body.get("errors") or [{}])[0].get("extensions") or {}).get("code", "ERROR"))


async def graphql(http: httpx.AsyncClient, token: str | None, query: str,
                  variables: dict | None = None) -> tuple[dict | None, str | None]:
    """(data, None), or (None, why): the error's code, `HTTP <status>` for a body that is
    not JSON, or the transport error's name."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        response = await http.post("/graphql", json={"query": query, "variables": variables or {}},
                                   headers=headers)
    except httpx.HTTPError as exc:
        return None, type(exc).__name__
    try:
        body = response.json()
    except ValueError:
        return None, f"HTTP {response.status_code}"
    if body.get("errors"):
        return None, error_code(body)
    return body.get("data"), None
