"""The garbage collector's pauses, as `agentrm_gc_pause_seconds` counts them."""
import gc

from prometheus_client import CollectorRegistry, generate_latest

from app.observability.gc_pauses import BUCKETS, PAUSES, GcPauses, install


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def pause(p: GcPauses, clock: Clock, generation: int, seconds: float) -> None:
    p.callback("start", {"generation": generation})
    clock.now += seconds
    p.callback("stop", {"generation": generation, "collected": 0, "uncollectable": 0})


def samples(p: GcPauses) -> dict:
    family = next(p.collect())
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for s in family.samples}


def test_each_collection_lands_in_its_generation_and_bucket():
    clock = Clock()
    p = GcPauses(clock)
    pause(p, clock, 0, 0.003)      # (0.0025, 0.005]
    pause(p, clock, 0, 0.005)      # a bound belongs to its own bucket: le="0.005"
    pause(p, clock, 1, 0.07)
    pause(p, clock, 2, 9.0)        # above every bound: only +Inf
    s = samples(p)
    le = lambda g, b: s[("agentrm_gc_pause_seconds_bucket", (("generation", g), ("le", b)))]  # noqa: E731
    assert le("0", "0.0025") == 0 and le("0", "0.005") == 2 and le("0", "+Inf") == 2
    assert s[("agentrm_gc_pause_seconds_count", (("generation", "0"),))] == 2
    assert abs(s[("agentrm_gc_pause_seconds_sum", (("generation", "0"),))] - 0.008) < 1e-9
    assert le("1", "0.05") == 0 and le("1", "0.1") == 1
    assert le("2", repr(BUCKETS[-1])) == 0 and le("2", "+Inf") == 1
    assert s[("agentrm_gc_pause_seconds_sum", (("generation", "2"),))] == 9.0


def test_buckets_are_cumulative_and_end_at_the_count():
    clock = Clock()
    p = GcPauses(clock)
    for seconds in (0.0005, 0.002, 0.02, 0.2, 2.0, 0.02):
        pause(p, clock, 0, seconds)
    s = samples(p)
    values = [s[("agentrm_gc_pause_seconds_bucket", (("generation", "0"), ("le", repr(b))))] for b in BUCKETS]
    assert values == sorted(values) and values[0] == 1 and values[-1] == 6
    assert s[("agentrm_gc_pause_seconds_bucket", (("generation", "0"), ("le", "+Inf")))] == 6


def test_a_stop_without_its_start_counts_nothing():
    clock = Clock()
    p = GcPauses(clock)
    p.callback("stop", {"generation": 0})
    pause(p, clock, 5, 0.1)        # no such generation
    assert all(n == 0 for counts in p.counts for n in counts) and p.sums == [0.0, 0.0, 0.0]


def test_installed_once_it_records_the_processs_real_collections():
    install()
    install()
    assert gc.callbacks.count(PAUSES.callback) == 1
    before = sum(PAUSES.counts[1])
    gc.collect(1)
    assert sum(PAUSES.counts[1]) == before + 1
    registry = CollectorRegistry()
    registry.register(PAUSES)
    text = generate_latest(registry).decode()
    assert '# TYPE agentrm_gc_pause_seconds histogram' in text
    assert 'agentrm_gc_pause_seconds_count{generation="1"}' in text
