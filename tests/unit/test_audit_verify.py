"""The invariant checker over logs built with the pure core, clean and deliberately forged."""
from __future__ import annotations

from app.audit import Record
from app.audit.verify import verify
from app.domain import events as ev
from app.domain.decide import decide
from app.domain.settings import PoolSettings


class Log:
    """A recorded log as the real scheduler writes it: inputs in their own streams, the
    decisions they cause in pool-<name> with `cause` = the input's position."""

    def __init__(self, at: float = 1000.0, **settings):
        self.settings = PoolSettings(**{"name": "p", "lanes": 2, "rpm": 600, "tpm": 100_000, "policy": "mlfq",
                                        **settings})
        self.pool = self.settings.name
        self.records: list[Record] = []
        self.versions: dict[str, int] = {}
        self.append(f"pool-{self.pool}", ev.POOL_CREATED, {"settings": self.settings.to_dict(), "at": at})
        from app.domain.apply import new_pool
        self.state = new_pool(self.records[0].data)

    def append(self, stream: str, type_: str, data: dict) -> Record:
        version = self.versions.get(stream, -1) + 1
        self.versions[stream] = version
        record = Record(len(self.records) + 1, stream, version, type_, data)
        self.records.append(record)
        return record

    def forge(self, type_: str, **data) -> Record:
        """A decision the scheduler never made, appended to the pool stream."""
        return self.append(f"pool-{self.pool}", type_, data)

    def _decisions(self, decided) -> list[tuple[str, dict]]:
        for type_, data in decided:
            self.append(f"pool-{self.pool}", type_, data)
        return decided

    def input(self, stream: str, type_: str, now: float, **data) -> list[tuple[str, dict]]:
        data = {**data, "pool": self.pool, "at": now}
        record = self.append(stream, type_, data)
        return self._decisions(decide(self.state, type_, data, now, cause=record.position))

    def tick(self, now: float) -> list[tuple[str, dict]]:
        return self._decisions(decide(self.state, None, None, now))

    def register(self, agent_id: str, now: float, cls: str = ev.INTERACTIVE):
        return self.input(f"agent-{agent_id}", ev.AGENT_REGISTERED, now, agent_id=agent_id, name=agent_id,
                          priority_class=cls)

    def request(self, turn_id: str, agent_id: str, now: float, est: int = 100, out: int = 100):
        return self.input(f"turn-{turn_id}", ev.TURN_REQUESTED, now, turn_id=turn_id, agent_id=agent_id,
                          estimated_tokens=est, max_output_tokens=out)

    def complete(self, turn_id: str, now: float, outcome: str = ev.OK, p: int = 80, c: int = 40):
        agent_id = self.state.turns[turn_id].agent_id if turn_id in self.state.turns else "?"
        return self.input(f"turn-{turn_id}", ev.COMPLETION_REPORTED, now, turn_id=turn_id, agent_id=agent_id,
                          outcome=outcome, prompt_tokens=p, completion_tokens=c)

    def heartbeat(self, turn_id: str, now: float):
        return self.input(f"turn-{turn_id}", ev.HEARTBEAT_SENT, now, turn_id=turn_id,
                          agent_id=self.state.turns[turn_id].agent_id)


def one_lane_two_agents() -> Log:
    log = Log(lanes=1, lease_seconds=30.0)
    log.register("a", 1000.0)
    log.register("b", 1000.0)
    log.request("t1", "a", 1001.0)          # granted lane 0
    log.request("t2", "b", 1002.0)          # queued behind t1
    return log


def test_a_clean_log_satisfies_every_invariant():
    log = one_lane_two_agents()
    log.heartbeat("t1", 1010.0)
    log.complete("t1", 1020.0)              # frees lane 0 for t2
    log.tick(1052.0)                        # t2's lease (granted at 1020) expires at 1050: reaped
    log.request("t3", "a", 1053.0)
    report = verify(log.records)
    assert report.ok, report.first
    assert report.pools == ["p"]
    types = [r.type for r in log.records]
    assert ev.TURN_REAPED in types and types.count(ev.TURN_GRANTED) == 3


def test_a_second_grant_of_a_busy_lane_is_the_first_violation():
    log = one_lane_two_agents()
    forged = log.forge(ev.TURN_GRANTED, turn_id="t2", agent_id="b", lane=0, level=0,
                       lease_expires_at=1032.0, reserved_tokens=200, at=1002.0)
    log.complete("t1", 1020.0)
    report = verify(log.records)
    assert not report.ok and report.first.position == forged.position
    assert "lane 0" in report.first.message and "t1" in report.first.message


def test_a_turn_granted_twice():
    log = one_lane_two_agents()
    log.complete("t1", 1010.0)               # t2 granted on lane 0
    log.complete("t2", 1011.0)
    forged = log.forge(ev.TURN_GRANTED, turn_id="t2", agent_id="b", lane=0, level=0,
                       lease_expires_at=1041.0, reserved_tokens=200, at=1012.0)
    report = verify(log.records)
    assert report.first.position == forged.position and "granted twice" in report.first.message


def test_an_early_reap_is_caught_even_after_a_lease_extension():
    log = one_lane_two_agents()
    log.heartbeat("t1", 1025.0)              # lease now ends at 1055, not 1031
    forged = log.forge(ev.TURN_REAPED, turn_id="t1", agent_id="a", lane=0, lease_expires_at=1031.0,
                       granted_at=1001.0, at=1040.0)
    report = verify(log.records)
    assert report.first.position == forged.position
    assert "before its lease expired at 1055.000" in report.first.message


def test_a_completion_twice():
    log = one_lane_two_agents()
    log.complete("t1", 1010.0)
    forged = log.forge(ev.TURN_COMPLETED, turn_id="t1", agent_id="a", lane=0, outcome="OK",
                       prompt_tokens=1, completion_tokens=1, lane_seconds=9.0, reserved_tokens=200,
                       level=0, queued_at=1001.0, granted_at=1001.0, at=1011.0)
    report = verify(log.records)
    assert report.first.position == forged.position and "completed twice" in report.first.message


def test_a_demotion_without_an_exhausted_allotment():
    log = one_lane_two_agents()
    forged = log.forge(ev.AGENT_DEMOTED, agent_id="b", from_level=0, to_level=1, reason="lane-seconds",
                       used_seconds=0.0, used_tokens=0.0, allotment_seconds=30.0, allotment_tokens=32000,
                       at=1003.0)
    report = verify(log.records)
    assert report.first.position == forged.position and "not used up" in report.first.message


def test_a_real_demotion_passes():
    log = Log(lanes=1, allotment_seconds=(5.0, 100.0, float("inf")))
    log.register("a", 1000.0)
    log.request("t1", "a", 1001.0)
    decided = log.complete("t1", 1010.0)     # 9 lane-seconds > 5: demoted
    assert ev.AGENT_DEMOTED in [t for t, _ in decided]
    assert verify(log.records).ok


def test_a_grant_beyond_the_request_bucket():
    log = Log(lanes=2, rpm=1)                 # one request per minute
    log.register("a", 1000.0)
    log.register("b", 1000.0)
    log.request("t1", "a", 1001.0)            # takes the only request
    log.request("t2", "b", 1002.0)            # waits for the bucket, not for a lane
    assert log.state.turns["t2"].status == ev.QUEUED
    forged = log.forge(ev.TURN_GRANTED, turn_id="t2", agent_id="b", lane=1, level=0,
                       lease_expires_at=1033.0, reserved_tokens=200, at=1003.0)
    report = verify(log.records)
    assert report.first.position == forged.position and "rate budget" in report.first.message


def test_a_lane_beyond_capacity():
    log = one_lane_two_agents()
    forged = log.forge(ev.TURN_GRANTED, turn_id="t2", agent_id="b", lane=1, level=0,
                       lease_expires_at=1033.0, reserved_tokens=200, at=1003.0)
    report = verify(log.records)
    assert report.first.position == forged.position and "has 1 lanes" in report.first.message


def test_only_the_named_pool_is_checked():
    log = one_lane_two_agents()
    log.forge(ev.TURN_COMPLETED, turn_id="nope", agent_id="a", lane=0, outcome="OK", prompt_tokens=1,
              completion_tokens=1, lane_seconds=1.0, reserved_tokens=1, level=0, queued_at=0, granted_at=0,
              at=1004.0)
    assert not verify(log.records).ok
    assert verify(log.records, pool="other").ok
