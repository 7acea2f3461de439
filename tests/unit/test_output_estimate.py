"""app/gateway/output_estimate.py: what a gateway call that names no output bound reserves."""
from __future__ import annotations

import pytest

from app.gateway.output_estimate import CAP_TOKENS, MAX_MODELS, PRIOR_TOKENS, OutputEstimator


def test_before_any_sample_a_call_reserves_the_prior():
    est = OutputEstimator()
    assert est.reserve("default", "gpt-4o") == PRIOR_TOKENS == 256
    assert CAP_TOKENS == 1024 and MAX_MODELS == 256


def test_it_reserves_the_90th_percentile_of_recent_answers_by_nearest_rank():
    est = OutputEstimator()
    est.observe("p", "m", 40)
    assert est.reserve("p", "m") == 40                  # one sample: that answer
    for n in range(1, 11):
        est.observe("p", "q", n * 10)
    assert est.reserve("p", "q") == 90                  # ceil(0.9 * 10) = 9th of 10
    wide = OutputEstimator(window=100)
    for n in range(1, 101):
        wide.observe("p", "r", 101 - n)                 # arrival order does not matter
    assert wide.reserve("p", "r") == 90


def test_the_reservation_never_exceeds_the_cap():
    est = OutputEstimator()
    for _ in range(5):
        est.observe("p", "long-writer", 5000)
    assert est.reserve("p", "long-writer") == 1024


def test_only_the_window_of_recent_answers_counts():
    est = OutputEstimator(window=4)
    for tokens in (900, 900, 900, 900):
        est.observe("p", "m", tokens)
    assert est.reserve("p", "m") == 900
    for tokens in (30, 30, 30, 30):                     # the model now answers briefly
        est.observe("p", "m", tokens)
    assert est.reserve("p", "m") == 30


def test_an_answer_cut_at_its_own_bound_is_not_a_sample():
    est = OutputEstimator()
    est.observe("p", "m", 64, bound=64)                 # stopped by max_tokens: censored
    est.observe("p", "m", 70, bound=64)                 # a provider that overran: censored too
    assert est.reserve("p", "m") == PRIOR_TOKENS
    est.observe("p", "m", 20, bound=64)                 # stopped on its own: a sample
    est.observe("p", "m", -1)                           # nonsense usage: ignored
    assert est.reserve("p", "m") == 20


def test_pools_and_models_learn_apart():
    est = OutputEstimator()
    est.observe("a", "m", 10)
    est.observe("b", "m", 500)
    est.observe("a", "n", 700)
    assert (est.reserve("a", "m"), est.reserve("b", "m"), est.reserve("a", "n")) == (10, 500, 700)
    assert est.reserve("b", "n") == PRIOR_TOKENS


def test_the_table_keeps_the_most_recently_used_models_only():
    est = OutputEstimator(max_models=3)
    for model in ("m1", "m2", "m3"):
        est.observe("p", model, 100)
    assert est.reserve("p", "m1") == 100                # m1 is now the most recently used
    est.observe("p", "m4", 100)                         # a fourth drops the least recent: m2
    assert len(est) == 3
    assert est.reserve("p", "m2") == PRIOR_TOKENS
    assert [est.reserve("p", m) for m in ("m1", "m3", "m4")] == [100, 100, 100]
    for i in range(1000):                               # many models: still bounded
        est.observe("p", f"x{i}", 1)
    assert len(est) == 3


@pytest.mark.parametrize("kw", [{"quantile": 0}, {"quantile": 1.5}, {"window": 0}, {"max_models": 0},
                                {"prior": 2000}, {"prior": -1}])
def test_bad_settings_are_refused(kw):
    with pytest.raises(ValueError):
        OutputEstimator(**kw)
