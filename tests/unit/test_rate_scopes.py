"""What a 429 or a provider's headers hold back, and for whom: the call's model, the pool, or
(for an agent's own report, a claim) the agent alone. Worked examples through decide_many,
each with its numbers, then the replay of the state they leave."""
from __future__ import annotations

import json

import pytest

from app.domain import events as ev
from app.domain.apply import apply, new_pool
from app.domain.decide import decide_many, next_deadline
from app.domain.settings import PoolSettings
from app.domain.state import PoolState

GATEWAY = "gateway"


class Pool:
    def __init__(self, agents=("a", "b", "c"), **settings):
        s = PoolSettings(**{"lanes": 64, "rpm": 600, "tpm": 600_000, "jitter_seconds": 0.0, "lease_seconds": 3600.0,
                            "boost_seconds": 3600.0,
                            # Grants in arrival order: these tests are about rate scopes, and
                            # one agent's turns here are in flight together by design (so no
                            # light-agent reserve either: test_light_agent_reserve.py).
                            "agent_backlog_slack_seconds": 0.0, "light_agent_reserve": 0.0,
                            **settings}).validate()
        self.created = {"settings": s.to_dict(), "at": 0.0}
        self.state = new_pool(self.created)
        self.log: list[tuple[str, dict]] = []
        self.position = 0
        self.batch(0.0, *[(ev.AGENT_REGISTERED, {"agent_id": a, "name": a, "priority_class": ev.INTERACTIVE})
                          for a in agents])

    def batch(self, now: float, *inputs: tuple[str, dict]) -> list[tuple[str, dict]]:
        numbered = []
        for type_, data in inputs:
            self.position += 1
            numbered.append((type_, {**data, "at": now}, self.position))
        out = decide_many(self.state, numbered, now)
        self.log += out
        return out

    @staticmethod
    def ask(turn_id: str, agent: str = "a", model: str | None = None, gateway: bool = False) -> tuple[str, dict]:
        data = {"turn_id": turn_id, "agent_id": agent, "estimated_tokens": 10, "max_output_tokens": 0}
        if model is not None:
            data["model"] = model
        if gateway:
            data["holder"] = GATEWAY
        return ev.TURN_REQUESTED, data

    @staticmethod
    def done(turn_id: str, outcome: str = ev.OK, headers: dict | None = None, **extra) -> tuple[str, dict]:
        data = {"turn_id": turn_id, "outcome": outcome, "prompt_tokens": 10, "completion_tokens": 0, **extra}
        if headers is not None:
            data["rate_limit_headers"] = headers
        return ev.COMPLETION_REPORTED, data


def granted(out) -> list[str]:
    return [d["turn_id"] for t, d in out if t == ev.TURN_GRANTED]


def only(out, type_: str) -> dict:
    found = [d for t, d in out if t == type_]
    assert len(found) == 1, out
    return found[0]


EMPTY = {"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "5s"}


# -- provider headers override the model ------------------------------------------------

def test_remaining_zero_with_a_reset_holds_that_models_grants_until_the_reset():
    # The gateway's call to m1 answers remaining 0, reset 5 s, at t=1: m1's next turn waits
    # until 6 s; a turn of m2 and one that names no model go at once.
    p = Pool()
    p.batch(0.0, p.ask("g1", model="m1", gateway=True))
    out = p.batch(1.0, p.done("g1", headers=EMPTY), p.ask("next", model="m1", gateway=True),
                  p.ask("other", model="m2", gateway=True), p.ask("plain", agent="b"))
    observed = only(out, ev.RATE_OBSERVED)
    assert (observed["model"], observed["hold_until"], observed["hold_requests"]) == ("m1", 6.0, 0.0)
    assert granted(out) == ["other", "plain"]
    assert next_deadline(p.state, 1.0) == pytest.approx(6.0)
    assert granted(p.batch(5.99)) == []
    assert granted(p.batch(6.0)) == ["next"]
    assert p.state.holds == {}   # a hold over is forgotten


def test_headers_of_a_call_without_a_model_hold_the_whole_pool():
    p = Pool()
    p.batch(0.0, p.ask("g1", gateway=True))
    out = p.batch(1.0, p.done("g1", headers=EMPTY), p.ask("next", agent="b", model="m2", gateway=True))
    assert "model" not in only(out, ev.RATE_OBSERVED) and granted(out) == []
    assert granted(p.batch(6.0)) == ["next"]


def test_remaining_n_lets_n_more_through_until_the_reset_less_what_was_granted_since():
    # remaining 3 at g1's admission; g2 was granted after g1, so 2 more until the reset at 11 s.
    p = Pool()
    p.batch(0.0, p.ask("g1", model="m", gateway=True), p.ask("g2", model="m", gateway=True))
    out = p.batch(1.0, p.done("g1", headers={"x-ratelimit-remaining-requests": "3",
                                             "x-ratelimit-reset-requests": "10s"}),
                  *[p.ask(f"t{i}", model="m", gateway=True) for i in range(4)])
    assert only(out, ev.RATE_OBSERVED)["hold_requests"] == 2.0
    assert granted(out) == ["t0", "t1"]
    assert granted(p.batch(11.0)) == ["t2", "t3"]


def test_a_token_bucket_holds_remaining_zero_only_as_long_as_one_request_refills():
    # OpenAI's reset is the time to refill the whole bucket: at rpm 600 one request is back
    # in 0.1 s, so the hold ends at 1.1 s, not at the 5 s reset.
    p = Pool(limiter="token-bucket")
    p.batch(0.0, p.ask("g1", model="m", gateway=True))
    out = p.batch(1.0, p.done("g1", headers=EMPTY), p.ask("next", model="m", gateway=True))
    assert only(out, ev.RATE_OBSERVED)["hold_until"] == pytest.approx(1.1) and granted(out) == []
    assert granted(p.batch(1.1)) == ["next"]


def test_an_older_calls_headers_do_not_replace_a_later_calls():
    # g2 (granted at 1 s) says remaining 0 until 11 s; g1 (granted at 0) answers after it with
    # remaining 50: the provider's later state stands.
    p = Pool()
    p.batch(0.0, p.ask("g1", model="m", gateway=True))
    p.batch(1.0, p.ask("g2", model="m", gateway=True))
    p.batch(2.0, p.done("g2", headers={"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "9s"}))
    late = {"x-ratelimit-remaining-requests": "50", "x-ratelimit-reset-requests": "1s"}
    out = p.batch(3.0, p.done("g1", headers=late), p.ask("next", model="m", gateway=True))
    assert granted(out) == [] and p.state.holds["m"].until == 11.0
    assert granted(p.batch(11.0)) == ["next"]


def test_an_agents_own_headers_hold_nothing():
    p = Pool()
    p.batch(0.0, p.ask("own"))
    out = p.batch(1.0, p.done("own", headers={"x-ratelimit-remaining-requests": "0",
                                              "x-ratelimit-reset-requests": "3600s"}), p.ask("next", agent="b"))
    assert "hold_until" not in only(out, ev.RATE_OBSERVED) and granted(out) == ["next"]


# -- a 429 pauses what it concerns --------------------------------------------------------

def test_a_429_on_one_model_pauses_that_model_and_halves_its_factor_only():
    # The gateway's call to m1 draws a 429 with retry-after 4 at t=1: m1 waits until 5 s with
    # factor 0.5; m2 goes on, and the pool is neither paused nor slowed.
    p = Pool(rpm=10)
    p.batch(0.0, p.ask("g1", model="m1", gateway=True))
    out = p.batch(1.0, p.done("g1", outcome=ev.RATE_LIMITED, retry_after_seconds=4.0),
                  p.ask("m1-next", model="m1", gateway=True), p.ask("m2-next", agent="b", model="m2", gateway=True))
    paused = only(out, ev.MODEL_PAUSED)
    assert (paused["model"], paused["until"], paused["rate_factor"], paused["reporter"]) == ("m1", 5.0, 0.5, GATEWAY)
    assert ev.POOL_PAUSED not in [t for t, _ in out]
    assert granted(out) == ["m2-next"]
    assert p.state.paused_until is None and p.state.rate_factor == 1.0
    assert granted(p.batch(5.0)) == ["m1-next"]


def test_after_its_pause_a_model_is_admitted_at_its_own_factor():
    # rpm 10, factor 0.5 for m1: the window holds 5.03 for m1 at 5 s. Two grants are in it
    # (g1 and m2's), so m1 gets 3 and its fourth waits; m2 still fits the pool's 10.
    p = Pool(rpm=10)
    p.batch(0.0, p.ask("g1", model="m1", gateway=True), p.ask("m2-a", agent="b", model="m2", gateway=True))
    p.batch(1.0, p.done("g1", outcome=ev.RATE_LIMITED, retry_after_seconds=4.0))
    out = p.batch(5.0, *[p.ask(f"m1-{i}", model="m1", gateway=True) for i in range(4)],
                  p.ask("m2-b", agent="b", model="m2", gateway=True))
    assert granted(out) == ["m1-0", "m1-1", "m1-2", "m2-b"]


def test_a_429_of_a_call_without_a_model_pauses_the_pool():
    p = Pool()
    p.batch(0.0, p.ask("g1", gateway=True))
    out = p.batch(1.0, p.done("g1", outcome=ev.RATE_LIMITED, retry_after_seconds=4.0), p.ask("x", agent="b"))
    paused = only(out, ev.POOL_PAUSED)
    assert (paused["until"], paused["rate_factor"], paused["reporter"]) == (5.0, 0.5, GATEWAY)
    assert granted(out) == [] and granted(p.batch(5.0)) == ["x"]


# -- an agent's report is a claim ----------------------------------------------------------

def test_an_agents_429_pauses_only_that_agent_for_at_most_the_cap():
    # Agent a claims retry-after 3600 at t=1: it waits 30 s (the cap); b is granted at once.
    p = Pool()
    p.batch(0.0, p.ask("a1"))
    out = p.batch(1.0, p.done("a1", outcome=ev.RATE_LIMITED, retry_after_seconds=3600.0),
                  p.ask("a2"), p.ask("b1", agent="b"))
    paused = only(out, ev.AGENT_PAUSED)
    assert (paused["agent_id"], paused["until"], paused["retry_after"], paused["claimed_retry_after"]) == \
        ("a", 31.0, 30.0, 3600.0)
    assert ev.POOL_PAUSED not in [t for t, _ in out] and ev.MODEL_PAUSED not in [t for t, _ in out]
    assert granted(out) == ["b1"] and p.state.rate_factor == 1.0
    assert next_deadline(p.state, 1.0) == pytest.approx(31.0)
    assert granted(p.batch(30.9)) == [] and granted(p.batch(31.0)) == ["a2"]


def test_a_second_agents_report_within_the_cap_pauses_the_pool():
    p = Pool()
    p.batch(0.0, p.ask("a1"), p.ask("a2"), p.ask("b1", agent="b"))
    p.batch(1.0, p.done("a1", outcome=ev.RATE_LIMITED, retry_after_seconds=60.0))
    again = p.batch(2.0, p.done("a2", outcome=ev.RATE_LIMITED, retry_after_seconds=60.0))
    assert [t for t, _ in again if t.endswith("Paused")] == [ev.AGENT_PAUSED]   # the same agent: still a claim
    out = p.batch(10.0, p.done("b1", outcome=ev.RATE_LIMITED, retry_after_seconds=60.0), p.ask("c1", agent="c"))
    paused = only(out, ev.POOL_PAUSED)
    assert (paused["until"], paused["retry_after"], paused["reporter"]) == (40.0, 30.0, "b")
    assert granted(out) == []


def test_a_report_after_the_cap_is_a_claim_again():
    p = Pool()
    p.batch(0.0, p.ask("a1"), p.ask("b1", agent="b"))
    p.batch(1.0, p.done("a1", outcome=ev.RATE_LIMITED))
    out = p.batch(31.0, p.done("b1", outcome=ev.RATE_LIMITED))
    assert only(out, ev.AGENT_PAUSED)["agent_id"] == "b" and p.state.rate_reports == [[31.0, "b", None]]


def test_the_gateways_429_corroborates_an_agents_on_the_same_model_or_none():
    p = Pool()
    p.batch(0.0, p.ask("g1", model="m1", gateway=True), p.ask("a1"))
    p.batch(1.0, p.done("g1", outcome=ev.RATE_LIMITED, retry_after_seconds=2.0))
    out = p.batch(2.0, p.done("a1", outcome=ev.RATE_LIMITED, retry_after_seconds=2.0))
    assert only(out, ev.POOL_PAUSED)["reporter"] == "a"


def test_a_pool_recorded_before_the_rule_trusts_an_agents_report():
    settings = PoolSettings(lanes=4, jitter_seconds=0.0).to_dict()
    for key in ("limiter", "agent_retry_after_cap_seconds"):
        del settings[key]
    state = new_pool({"settings": settings, "at": 0.0})
    decide_many(state, [(ev.AGENT_REGISTERED, {"agent_id": "a", "name": "a", "priority_class": ev.INTERACTIVE}, 1),
                        (ev.TURN_REQUESTED, {"turn_id": "t", "agent_id": "a", "estimated_tokens": 1}, 2)], 0.0)
    out = decide_many(state, [(ev.COMPLETION_REPORTED, {"turn_id": "t", "outcome": ev.RATE_LIMITED,
                                                        "retry_after_seconds": 3600.0}, 3)], 1.0)
    assert dict(out)[ev.POOL_PAUSED] == {"at": 1.0, "cause": 3, "turn_id": "t", "until": 3601.0,
                                         "retry_after": 3600.0, "jitter": 0.0, "rate_factor": 0.5}


def test_the_state_of_the_rules_replays_from_the_log_and_forgets_what_is_over():
    p = Pool()
    p.batch(0.0, p.ask("g1", model="m1", gateway=True), p.ask("a1"), p.ask("g2", model="m2", gateway=True))
    # a's claim comes first (nothing corroborates it yet), then the gateway's 429 on m1.
    p.batch(1.0, p.done("a1", outcome=ev.RATE_LIMITED), p.done("g1", outcome=ev.RATE_LIMITED, retry_after_seconds=4.0),
            p.done("g2", headers=EMPTY))
    assert set(p.state.model_limits) == {"m1"} and set(p.state.agent_pauses) == {"a"} and set(p.state.holds) == {"m2"}
    replayed = new_pool(p.created)
    for type_, data in json.loads(json.dumps(p.log)):
        apply(replayed, type_, data)
    assert replayed.canonical_json() == p.state.canonical_json()
    assert PoolState.from_dict(json.loads(p.state.canonical_json())).canonical_json() == p.state.canonical_json()
    p.batch(600.0, p.ask("late", agent="b"))   # m1's factor is back at 1 by 1 + 5 min
    assert (p.state.model_limits, p.state.agent_pauses, p.state.holds, p.state.rate_reports) == ({}, {}, {}, [])
