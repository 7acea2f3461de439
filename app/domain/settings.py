"""Pool settings: one provider/model budget and its MLFQ parameters.

Defaults and why (docs/reference/pool-settings.md lists them):
- 3 levels. Interactive agents enter at 0, batch at 1, background at 2.
- Allotment per level, in lane-seconds and in tokens, whichever runs out first: level 0
  30 s / 32k tokens, level 1 120 s / 128k tokens, the last level unbounded. An
  interactive agent making short calls with think time in between rarely uses 30
  lane-seconds per boost period; a batch agent running long calls back to back uses it
  in a few calls and sinks, which is exactly the FIFO head-of-line blocking we remove.
- Boost every 60 s (OSTEP rule 5): every agent goes back to its entry level and every
  turn that has waited a whole period is lifted to level 0, so nothing starves.
- Lease 30 s: a call that neither finishes nor heartbeats for 30 s is a zombie.
- Start deadline (for turns whose client streams): a granted call must show its first
  chunk (the client's first heartbeat) within an adaptive timeout, estimated like TCP's
  retransmission timeout (RFC 6298: SRTT + 4 RTTVAR over observed times to first chunk),
  never below 2 s, never above the lease, doubled per consecutive start-deadline reap of
  the agent (Karn's backoff). A hung call is reaped in a few seconds instead of a whole
  lease; a start-deadline reap shorter than the lease does not count towards quarantine.
- Deadlines are enforced 0.25 s late (decide.REAP_GRACE_S), and an input stamped in time
  wins over the expiry it races. A floor at or above the lease turns the start deadline off.
- Quarantine after 3 consecutive reaps.
- AIMD on the admitted rate: halve on a 429 (floor 10%), add back 10% of the
  provider's limit per minute without one (TCP Reno's shape, in rate instead of window).
- Stall deadline 6 s (for streaming turns, after the first chunk): a streaming client
  heartbeats with its chunks, at least every stall_timeout/3 s while they flow, so a stream
  that stops is reaped 4-6 s after its last chunk instead of a whole lease later. 6 s is
  far above the gap between chunks of a live stream (tens of ms at 20-100 tokens/s) and
  the same order as the first-chunk deadline.
- Outage detection: 3 consecutive start-deadline reaps with no first chunk anywhere in
  the pool in between mean the provider has stopped answering (app/domain/deadlines.py);
  the pool then sends one probe at a time instead of every queued turn, and resumes when a
  probe's first chunk arrives.
- Adaptive lanes: the number of lanes in use is learned from the provider's time to first
  chunk (app/domain/concurrency.py, a gradient limit after Netflix's Gradient2); the
  configured lanes are its ceiling.
- Limiter "sliding-window" over 60 s (app/domain/rate_window.py): a provider may enforce its
  RPM/TPM as a token bucket, a sliding window or fixed windows, and admitting no more than
  the limit in any window of 60 s (+1 s) is safe against all three, where modelling a bucket
  that starts full draws a 429 from the other two at the first refill after the burst.
- Agent reports are claims: an agent's own 429 pauses only that agent, for at most 30 s,
  unless the gateway or another agent reported one within those 30 s (decide.py).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import asdict, dataclass, field
from typing import Any

MAX_LANES = 1024
MAX_MODEL_TIMEOUTS = 32
MAX_MODEL_NAME = 200
POLICIES = ("mlfq", "fifo", "deadline")
TOKEN_BUCKET, SLIDING_WINDOW, FIXED_WINDOW = "token-bucket", "sliding-window", "fixed-window"
LIMITERS = (TOKEN_BUCKET, SLIDING_WINDOW, FIXED_WINDOW)
CONTEXT_MODES = ("off", "managed")
MAX_AGENT_RETRY_AFTER_CAP = 60.0
ORDER_FIELDS = ("class_slack_seconds", "run_slack_per_service", "run_slack_cap_seconds",
                "size_slack_per_ktoken", "size_slack_cap_seconds", "run_forget_seconds",
                "output_credit_per_ktoken", "output_credit_cap_seconds",
                "agent_backlog_slack_seconds", "agent_backlog_slack_cap_seconds")


@dataclass(frozen=True)
class PoolSettings:
    name: str = "default"
    lanes: int = 4
    rpm: int = 600
    tpm: int = 400_000
    lease_seconds: float = 30.0
    levels: int = 3
    allotment_seconds: tuple[float, ...] = (30.0, 120.0, math.inf)
    allotment_tokens: tuple[float, ...] = (32_000, 128_000, math.inf)
    boost_seconds: float = 60.0
    quarantine_after_reaps: int = 3
    start_timeout_floor_seconds: float = 2.0
    aimd_decrease: float = 0.5
    aimd_increase_per_minute: float = 0.10
    aimd_floor: float = 0.10
    retry_after_default: float = 2.0
    jitter_seconds: float = 1.0
    policy: str = "deadline"       # "mlfq", "fifo" (one level) or "deadline" (app/domain/ordering.py)
    upstream_base_url: str | None = None
    tokenizer: str = "cl100k_base"
    # Rules added after pools were first recorded (see LEGACY): a pool created before them
    # folds and decides as it always did.
    stall_timeout_seconds: float | None = 6.0   # None: a streaming turn keeps the plain lease
    outage_after_silent_reaps: int = 3          # 0: no outage detection
    adaptive_lanes: bool = True                 # False: every configured lane is used
    # Bounds of adaptive lanes and the outage probe's backoff. Their defaults are the values
    # these rules had as constants, and a setting at its default is not written (DEFAULTED),
    # so pools recorded before they were settings keep their settings JSON and state hash.
    adaptive_lanes_initial: int = 16            # lanes in use before any sample (at most `lanes`)
    adaptive_lanes_minimum: int = 2             # the learned limit never goes below this
    probe_backoff_cap: int = 2                  # a probe's start deadline doubles at most this often
    # Calls the gateway holds (it renews their leases while the upstream request is open): the
    # wall-clock limit of one call and the longest silence between a stream's chunks (before the
    # first one too), both enforced by the gateway; per model when `model_timeouts` names it
    # ((model, request timeout, stream idle timeout), ...).
    request_timeout_seconds: float = 600.0
    stream_idle_timeout_seconds: float = 120.0
    # The share of the rate budget and of the lanes (rounded up) that only a light agent (no
    # other turn of its own queued or held) may take, or a turn that has waited
    # agent_backlog_slack_cap_seconds (limiter.py): a flooding agent cannot use the budget up
    # to its last request, nor take every lane as it frees, and make every other agent's next
    # call wait for the window to slide or for its next completion.
    light_agent_reserve: float = 0.1
    model_timeouts: tuple[tuple[str, float, float], ...] = ()
    # The shape of the provider's limiter the pool admits against (app/domain/limiter.py):
    # "token-bucket" (two buckets refilled continuously, one minute's worth), "sliding-window"
    # or "fixed-window" (at most rpm x W/60 requests and tpm x W/60 tokens in any window of W
    # seconds, W = limiter_window_seconds). None: a pool recorded before the limiter was a
    # setting (a token bucket, with the rules of its time).
    limiter: str | None = SLIDING_WINDOW
    limiter_window_seconds: float = 60.0
    # The longest pause an agent's own report of a 429 may cause (its retry-after is a claim);
    # None: agents' reports are trusted as the gateway's (a pool recorded before the rule).
    agent_retry_after_cap_seconds: float | None = 30.0
    # The gateway's managed context (app/gateway/managed_context.py): "managed" keeps each
    # agent's conversation in its context and forwards a prompt assembled within the model's
    # window; "off" forwards what the client sent. The window of a model the gateway does not
    # know is context_window_tokens (None: 128,000, the window of most current models).
    context_mode: str = "off"
    context_window_tokens: int | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    # The grant order of policy "deadline" (app/domain/ordering.py has the rule and the reasons).
    # Written to the log only by pools of that policy, so logs of the other policies keep their
    # exact settings JSON and state hash.
    class_slack_seconds: tuple[float, ...] = (0.0, 6.0, 12.0)   # INTERACTIVE, BATCH, BACKGROUND
    run_slack_per_service: float = 0.0     # seconds of slack per lane-second its run has used
    run_slack_cap_seconds: float = 120.0
    size_slack_per_ktoken: float = 0.0     # seconds of slack per 1,000 reserved tokens
    size_slack_cap_seconds: float = 30.0
    run_forget_seconds: float = 600.0      # a run idle this long is forgotten (its service too)
    # While the rate budget binds: no class slack, and a turn's deadline moves earlier by this
    # many seconds per 1,000 max-output tokens, at most the cap (0: the order above everywhere).
    output_credit_per_ktoken: float = 3.0
    output_credit_cap_seconds: float = 30.0
    # Per-agent fairness, in both orders: every queued turn of an agent holding or queueing
    # n turns waits this many seconds more per turn beyond its first, at most the cap (0: off).
    agent_backlog_slack_seconds: float = 2.0
    agent_backlog_slack_cap_seconds: float = 60.0

    def entry_level(self, priority_class: str) -> int:
        if self.policy == "fifo":
            return 0
        index = {"INTERACTIVE": 0, "BATCH": 1, "BACKGROUND": 2}[priority_class]
        return min(index, self.levels - 1)

    @property
    def windowed(self) -> bool:
        """Admission counts the grants of a window (sliding or fixed), not a bucket."""
        return self.limiter in (SLIDING_WINDOW, FIXED_WINDOW)

    @property
    def rate_rules(self) -> bool:
        """The rules that came with the limiter setting: per-model pauses, and provider
        headers that hold grants until their reset. Off for a pool recorded before them."""
        return self.limiter is not None

    def allotment(self, level: int) -> tuple[float, float]:
        seconds = self.allotment_seconds[level] if level < len(self.allotment_seconds) else math.inf
        tokens = self.allotment_tokens[level] if level < len(self.allotment_tokens) else math.inf
        if level == self.levels - 1:
            return math.inf, math.inf  # nowhere lower to go
        return seconds, tokens

    def validate(self) -> PoolSettings:
        problems = []
        if not self.name or not all(c.isalnum() or c in "_." for c in self.name) or len(self.name) > 64:
            problems.append("name must be 1-64 letters, digits, '_' or '.'")
        if not 1 <= self.lanes <= MAX_LANES:
            problems.append(f"lanes must be between 1 and {MAX_LANES}")
        if not 1 <= self.rpm <= 10_000_000:
            problems.append("rpm must be between 1 and 10,000,000")
        if not 1 <= self.tpm <= 10_000_000_000:
            problems.append("tpm must be between 1 and 10,000,000,000")
        if not 1 <= self.lease_seconds <= 3600:
            problems.append("leaseSeconds must be between 1 and 3600")
        # A floor at or above the lease is allowed (the default 2 s with a 1 s lease): the
        # start deadline then never shortens a grant, which is the plain lease.
        if not 0.1 <= self.start_timeout_floor_seconds <= 3600:
            problems.append("startTimeoutFloorSeconds must be between 0.1 and 3600")
        if not 1 <= self.levels <= 8:
            problems.append("levels must be between 1 and 8")
        if self.boost_seconds <= 0:
            problems.append("boost period must be positive")
        if self.policy not in POLICIES:
            problems.append("policy must be mlfq, fifo or deadline")
        slacks = self.class_slack_seconds
        if len(slacks) != 3 or not all(isinstance(x, (int, float)) and 0 <= x <= 3600 for x in slacks):
            problems.append("classSlackSeconds must be three numbers between 0 and 3600 "
                            "(interactive, batch, background)")
        for label, value, top in (("runSlackPerService", self.run_slack_per_service, 1000),
                                  ("runSlackCapSeconds", self.run_slack_cap_seconds, 3600),
                                  ("sizeSlackPerKtoken", self.size_slack_per_ktoken, 3600),
                                  ("sizeSlackCapSeconds", self.size_slack_cap_seconds, 3600),
                                  ("outputCreditPerKtoken", self.output_credit_per_ktoken, 3600),
                                  ("outputCreditCapSeconds", self.output_credit_cap_seconds, 3600),
                                  ("agentBacklogSlackSeconds", self.agent_backlog_slack_seconds, 3600),
                                  ("agentBacklogSlackCapSeconds", self.agent_backlog_slack_cap_seconds, 3600)):
            if not (isinstance(value, (int, float)) and 0 <= value <= top):
                problems.append(f"{label} must be between 0 and {top}")
        if not (isinstance(self.run_forget_seconds, (int, float)) and 1 <= self.run_forget_seconds <= 86_400):
            problems.append("runForgetSeconds must be between 1 and 86400")
        if not 0 < self.aimd_floor <= 1:
            # A floor of 0 lets a run of 429s drive the factor to 0: the buckets then never
            # refill and the pool would admit nothing, ever.
            problems.append("aimdFloor must be greater than 0 and at most 1")
        if not 0 < self.aimd_decrease <= 1:
            problems.append("aimdDecrease must be greater than 0 and at most 1")
        if self.stall_timeout_seconds is not None and not 0.5 <= self.stall_timeout_seconds <= 3600:
            problems.append("stallTimeoutSeconds must be between 0.5 and 3600, or null for none")
        if not _is_int(self.outage_after_silent_reaps) or not 0 <= self.outage_after_silent_reaps <= 1000:
            problems.append("outageAfterSilentReaps must be between 0 (off) and 1000, a whole number")
        if not isinstance(self.adaptive_lanes, bool):
            problems.append("adaptiveLanes must be true or false")
        initial, minimum = self.adaptive_lanes_initial, self.adaptive_lanes_minimum
        if not _is_int(initial) or not 1 <= initial <= MAX_LANES:
            problems.append(f"adaptiveLanesInitial must be a whole number between 1 and {MAX_LANES}")
        elif not _is_int(minimum) or not 1 <= minimum <= initial:
            # A floor above the start would be reached at the first sample anyway: say so
            # instead of silently starting higher than asked.
            problems.append("adaptiveLanesMinimum must be a whole number between 1 and adaptiveLanesInitial")
        if not _is_int(self.probe_backoff_cap) or not 0 <= self.probe_backoff_cap <= 16:
            problems.append("probeBackoffCap must be a whole number between 0 and 16 (doublings)")
        for label, value in (("requestTimeoutSeconds", self.request_timeout_seconds),
                             ("streamIdleTimeoutSeconds", self.stream_idle_timeout_seconds)):
            if not (isinstance(value, (int, float)) and 1 <= value <= 86_400):
                problems.append(f"{label} must be between 1 and 86400 seconds")
        if len(self.model_timeouts) > MAX_MODEL_TIMEOUTS or not all(
                len(entry) == 3 and isinstance(entry[0], str) and 1 <= len(entry[0]) <= MAX_MODEL_NAME
                and all(isinstance(v, (int, float)) and 1 <= v <= 86_400 for v in entry[1:])
                for entry in self.model_timeouts):
            problems.append(f"modelTimeouts must be at most {MAX_MODEL_TIMEOUTS} entries of a model name "
                            f"(1-{MAX_MODEL_NAME} characters) and two timeouts between 1 and 86400 seconds")
        if self.limiter is not None and self.limiter not in LIMITERS:
            problems.append("limiter must be token-bucket, sliding-window or fixed-window")
        window = self.limiter_window_seconds
        if not (isinstance(window, (int, float)) and not isinstance(window, bool) and 1 <= window <= 3600):
            problems.append("limiterWindowSeconds must be between 1 and 3600")
        elif self.windowed and self.rpm * window / 60.0 < 1:
            # Fewer than one request per window could never be admitted.
            problems.append("a window limiter needs rpm x limiterWindowSeconds / 60 of at least 1 request")
        cap = self.agent_retry_after_cap_seconds
        if cap is not None and not (isinstance(cap, (int, float)) and not isinstance(cap, bool)
                                    and 0 <= cap <= MAX_AGENT_RETRY_AFTER_CAP):
            problems.append(f"agentRetryAfterCapSeconds must be between 0 and {MAX_AGENT_RETRY_AFTER_CAP:g}")
        reserve = self.light_agent_reserve
        if not (isinstance(reserve, (int, float)) and not isinstance(reserve, bool) and 0 <= reserve <= 0.5):
            problems.append("lightAgentReserve must be between 0 and 0.5")
        if self.context_mode not in CONTEXT_MODES:
            problems.append("contextMode must be OFF or MANAGED")
        context_window = self.context_window_tokens
        if context_window is not None and not (_is_int(context_window) and 1_024 <= context_window <= 10_000_000):
            problems.append("contextWindowTokens must be a whole number between 1024 and 10000000, or null")
        if self.tokenizer not in ("cl100k_base", "o200k_base"):
            problems.append("tokenizer must be cl100k_base or o200k_base")
        if problems:
            raise ValueError("; ".join(problems))
        return self

    # JSON has no infinity: store it as null. A rule added later is written only when it is
    # not at its legacy value, so an old pool's stored settings (and every hash over them)
    # stay byte for byte what they were.
    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("extra")
        for key in ("allotment_seconds", "allotment_tokens"):
            d[key] = [None if math.isinf(v) else v for v in d[key]]
        for key, legacy in LEGACY.items():
            if d[key] == legacy:
                del d[key]
        for key, default in DEFAULTED.items():
            if d[key] == default:
                del d[key]
        if self.policy != "deadline":
            for key in ORDER_FIELDS:
                d.pop(key, None)
        else:
            d["class_slack_seconds"] = list(d["class_slack_seconds"])
            for key, legacy in LEGACY_ORDER.items():
                if d[key] == legacy:
                    del d[key]
        return d

    def timeouts_for(self, model: str | None) -> tuple[float, float]:
        """(request timeout, stream idle timeout) of a held call to `model`."""
        for name, request, idle in self.model_timeouts:
            if name == model:
                return float(request), float(idle)
        return self.request_timeout_seconds, self.stream_idle_timeout_seconds

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PoolSettings:
        d = dict(d)
        if isinstance(d.get("model_timeouts"), list):
            d["model_timeouts"] = tuple(tuple(entry) for entry in d["model_timeouts"])
        for key in ("allotment_seconds", "allotment_tokens"):
            if key in d:
                d[key] = tuple(math.inf if v is None else v for v in d[key])
        if isinstance(d.get("class_slack_seconds"), list):
            d["class_slack_seconds"] = tuple(d["class_slack_seconds"])
        known = set(cls.__dataclass_fields__) - {"extra"}
        legacy = dict(LEGACY)
        if d.get("policy", cls.__dataclass_fields__["policy"].default) == "deadline":
            legacy.update(LEGACY_ORDER)
        return cls(**{**legacy, **{k: v for k, v in d.items() if k in known}})

    def legacy(self) -> PoolSettings:
        """These settings with every later rule off (as a pool recorded before them)."""
        return dataclasses.replace(self, **LEGACY, **LEGACY_ORDER)


# The value each later rule had before it existed. Stored settings that lack a key were
# written before its rule, so they read it as off: replay and what-if of an old log decide
# exactly as the recorded scheduler did.
LEGACY: dict[str, Any] = {"stall_timeout_seconds": None, "outage_after_silent_reaps": 0, "adaptive_lanes": False,
                          "limiter": None, "agent_retry_after_cap_seconds": None, "light_agent_reserve": 0.0}
# The same for a rule of the deadline order (written, like the order's other fields, only by
# pools of that policy): a deadline pool stored without the key ran without the rule.
LEGACY_ORDER: dict[str, Any] = {"output_credit_per_ktoken": 0.0, "agent_backlog_slack_seconds": 0.0}

# Settings that were constants before they were settings: not written at their default,
# which is what a stored pool without the key meant all along.
DEFAULTED: dict[str, Any] = {key: PoolSettings.__dataclass_fields__[key].default
                   for key in ("adaptive_lanes_initial", "adaptive_lanes_minimum", "probe_backoff_cap",
                               "output_credit_cap_seconds", "agent_backlog_slack_cap_seconds",
                               "request_timeout_seconds",
                               "stream_idle_timeout_seconds", "model_timeouts", "limiter_window_seconds",
                               "context_mode", "context_window_tokens")}


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
