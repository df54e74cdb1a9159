"""Unit tests of the elastic membership logic (horovod_cpp.runner.elastic_rounds): no process,
no socket; time is given. Failures, removals, additions, blacklist and cooldown, the min-np
wait, the reset limit, rank order (survivors first) and local/cross ranks.

    python -m pytest test/runner/test_elastic_rounds.py
"""

import random

import pytest

from horovod_cpp.runner import elastic_rounds as er
from horovod_cpp.runner.gloo_launch import Place


def settings(**kw):
    base = dict(np=None, min_np=1, max_np=None, reset_limit=None, cooldown=None,
                elastic_timeout=600.0, ready_timeout=15.0)
    base.update(kw)
    return er.Settings(**base)


class FixedRng:
    """uniform(a, b) returns a + frac * (b - a): the cooldown's random part is known."""

    def __init__(self, frac):
        self.frac = frac

    def uniform(self, a, b):
        return a + self.frac * (b - a)


def keys(cmds):
    return {c.key: c.value for c in cmds if isinstance(c, er.SetKey)}


def kinds(cmds, kind):
    return [c for c in cmds if isinstance(c, kind)]


def acts(cmds):
    """The commands other than notes to the user."""
    return [c for c in cmds if not isinstance(c, er.Note)]


def start(hosts, rng=None, **kw):
    r = er.Rounds(settings(**kw), rng or random.Random(0))
    return r, r.discovered(hosts, 0.0)


def test_generation_0_places_slot_by_slot_and_sets_keys_before_starting():
    r, cmds = start([("a", 2), ("b", 2)], np=3)
    assert keys(cmds) == {"assign/a:0/0": "0,3,0,2,0,2,0", "assign/a:1/0": "1,3,1,2,0,1,0",
                          "assign/b:0/0": "2,3,0,1,1,2,0"}
    assert kinds(cmds, er.Start) == [er.Start("a:0", "a", 0), er.Start("a:1", "a", 1),
                                     er.Start("b:0", "b", 0)]
    first_start = next(i for i, c in enumerate(cmds) if isinstance(c, er.Start))
    assert all(isinstance(c, er.SetKey) for c in cmds[:first_start])
    assert r.generation == 0 and r.members == ["a:0", "a:1", "b:0"]
    assert r.ready_keys() == [("a:0", "ready/a:0/1"), ("a:1", "ready/a:1/1"),
                              ("b:0", "ready/b:0/1")]


def test_generation_0_bounded_by_max_np_and_all_slots_without_np():
    r, cmds = start([("a", 2), ("b", 2)], max_np=3)
    assert len(kinds(cmds, er.Start)) == 3
    r, cmds = start([("a", 2), ("b", 2)])
    assert len(kinds(cmds, er.Start)) == 4


def test_places_for_survivors_keep_host_order_of_first_appearance():
    got = er.places_for([("b:0", "b"), ("a:0", "a"), ("b:1", "b"), ("c:0", "c")])
    assert got == [Place(0, 4, 0, 2, 0, 3, "b"), Place(1, 4, 0, 1, 1, 3, "a"),
                   Place(2, 4, 1, 2, 0, 1, "b"), Place(3, 4, 0, 1, 2, 3, "c")]


def test_killed_worker_round_survivors_first_and_host_blacklisted():
    r, _ = start([("a", 2), ("b", 2)], np=4)
    # Survivors not ready yet; members still connecting generation 0 are told to give it up.
    assert r.exited("a:1", -9, 1.0) == [
        er.SetKey("elastic/abort/0", "worker a:1 on host a was killed by signal 9")]
    assert r.blacklist.blocked("a", 1.0)
    assert r.ready("b:1", 2.0) == []
    assert r.ready("a:0", 2.5) == []
    cmds = r.ready("b:0", 3.0)
    # No new worker: a is blacklisted, b is full. Rank order kept: a:0, b:0, b:1.
    assert keys(cmds) == {"assign/a:0/1": "0,3,0,1,0,2,1", "assign/b:0/1": "1,3,0,2,1,2,1",
                          "assign/b:1/1": "2,3,1,2,0,1,1"}
    assert kinds(cmds, er.Start) == []
    assert r.generation == 1 and r.resets == 1
    assert r.ready_keys() == [("a:0", "ready/a:0/2"), ("b:0", "ready/b:0/2"),
                              ("b:1", "ready/b:1/2")]


def test_rank_0_of_next_generation_is_the_lowest_surviving_rank():
    r, _ = start([("a", 1), ("b", 1), ("c", 1)])
    r.exited("a:0", 1, 1.0)
    r.ready("c:0", 2.0)
    cmds = r.ready("b:0", 2.0)
    assert keys(cmds) == {"assign/b:0/1": "0,2,0,1,0,2,1", "assign/c:0/1": "1,2,0,1,1,2,1"}


def test_late_member_is_dropped_after_the_ready_timeout_and_blacklisted():
    r, _ = start([("a", 1), ("b", 1), ("c", 1)], ready_timeout=15.0)
    assert r.ready("a:0", 10.0) == []
    assert r.tick(24.9) == []
    cmds = r.tick(25.0)
    assert kinds(cmds, er.Terminate) == [er.Terminate("b:0"), er.Terminate("c:0")]
    assert kinds(cmds, er.SetKey)[:2] == [
        er.SetKey("elastic/abort/0", "worker b:0 on host b was not ready in time"),
        er.SetKey("elastic/abort/0", "worker c:0 on host c was not ready in time")]
    assert keys(kinds(cmds, er.SetKey)[2:]) == {"assign/a:0/1": "0,1,0,1,0,1,1"}
    assert r.blacklist.blocked("b", 25.0) and r.blacklist.blocked("c", 25.0)
    assert r.exited("b:0", -15, 26.0) == []  # its end is no new event


def test_a_member_still_starting_has_the_start_timeout_then_is_dropped():
    # Generation 0 starts at 0; a round starts at 10 (a:0 ready). c:0 is still importing its
    # framework: the round waits for it up to its start timeout (40 s from its start), not
    # only the ready timeout (15 s from the round's start).
    r, _ = start([("a", 1), ("b", 1), ("c", 1)], ready_timeout=15.0, start_timeout=40.0)
    assert r.ready("a:0", 10.0) == [] and r.ready("b:0", 11.0) == []
    assert r.tick(25.0) == [] and r.tick(39.9) == []
    cmds = r.tick(40.0)
    assert kinds(cmds, er.Terminate) == [er.Terminate("c:0")]
    assert keys(cmds)["elastic/abort/0"] == "worker c:0 on host c was not ready in time"
    assert r.generation == 1 and r.members == ["a:0", "b:0"]
    # Once seen ready, a member has the ready timeout only: b:0 is late in the next round.
    r.ready("a:0", 100.0)
    assert r.tick(114.9) == []
    assert kinds(r.tick(115.0), er.Terminate) == [er.Terminate("b:0")]


def test_a_started_member_that_comes_forms_the_round_at_once():
    r, _ = start([("a", 1), ("b", 1)], ready_timeout=15.0, start_timeout=40.0)
    assert r.ready("a:0", 10.0) == [] and r.tick(30.0) == []
    assert keys(r.ready("b:0", 31.0)) == {"assign/a:0/1": "0,2,0,1,0,2,1",
                                          "assign/b:0/1": "1,2,0,1,1,2,1"}


def test_failure_without_any_ready_survivor_still_ends_in_bounded_time():
    r, _ = start([("a", 1), ("b", 1)], min_np=1, ready_timeout=15.0, elastic_timeout=5.0)
    r.exited("a:0", 1, 0.0)
    assert r.tick(14.0) == []
    cmds = r.tick(15.0)
    # Then no worker: the min-np wait, said once.
    assert acts(cmds) == [er.Terminate("b:0"), er.SetKey(
        "elastic/abort/0", "worker b:0 on host b was not ready in time")]
    assert kinds(cmds, er.Note) == [er.Note(
        "0 workers available, fewer than --min-np 1: waiting up to --elastic-timeout 5 s for "
        "hosts (hosts: a:1 blacklisted, b:1 blacklisted)")]
    assert r.tick(19.9) == []
    fin = kinds(r.tick(20.0), er.Finish)
    assert fin[0].rc == 1 and "only 0 workers available, fewer than --min-np 1" in fin[0].message


def test_host_removed_terminates_its_workers_without_blacklisting():
    r, _ = start([("a", 2), ("b", 1)])
    cmds = r.discovered([("b", 1)], 5.0)
    assert kinds(cmds, er.Terminate) == [er.Terminate("a:0"), er.Terminate("a:1")]
    assert not r.blacklist.blocked("a", 5.0)
    assert r.exited("a:0", -15, 5.5) == [] and r.exited("a:1", -15, 5.5) == []
    cmds = r.ready("b:0", 8.0)
    assert keys(cmds) == {"assign/b:0/1": "0,1,0,1,0,1,1"}
    # a comes back: free slots again, no blacklist: hosts_updated for generation 1.
    assert keys(r.discovered([("b", 1), ("a", 2)], 9.0)) == {"elastic/hosts_updated/1": "1"}


def test_host_added_flags_hosts_updated_once_and_grows_at_the_next_round():
    r, _ = start([("a", 1)])
    cmds = r.discovered([("a", 1), ("b", 2)], 3.0)
    assert keys(cmds) == {"elastic/hosts_updated/0": "1"}
    assert r.discovered([("a", 1), ("b", 2), ("c", 1)], 4.0) == []  # already flagged
    assert r.tick(100.0) == []  # no ready timeout runs before the first ready
    cmds = r.ready("a:0", 200.0)
    assert keys(cmds) == {"assign/a:0/1": "0,4,0,1,0,3,1", "assign/b:0/0": "1,4,0,2,1,3,1",
                          "assign/b:1/0": "2,4,1,2,0,1,1", "assign/c:0/0": "3,4,0,1,2,3,1"}
    assert kinds(cmds, er.Start) == [er.Start("b:0", "b", 0), er.Start("b:1", "b", 1),
                                     er.Start("c:0", "c", 0)]


def test_max_np_bounds_growth_and_hosts_updated():
    r, _ = start([("a", 2)], max_np=2)
    assert r.discovered([("a", 2), ("b", 2)], 1.0) == []  # already at --max-np
    r, _ = start([("a", 1), ("b", 1)])
    r.exited("b:0", 1, 0.0)
    r.ready("a:0", 1.0)
    assert r.discovered([("a", 1), ("b", 3)], 2.0) == []  # b's new slots: b is blacklisted
    r, _ = start([("a", 1)], max_np=2)
    assert keys(r.discovered([("a", 1), ("b", 4)], 1.0)) == {"elastic/hosts_updated/0": "1"}
    cmds = r.ready("a:0", 2.0)
    assert len(kinds(cmds, er.Start)) == 1 and r.members == ["a:0", "b:0"]


def test_min_np_wait_then_clear_error_naming_the_counts():
    r, cmds = start([("a", 1)], min_np=2, elastic_timeout=30.0)
    assert acts(cmds) == [] and len(kinds(cmds, er.Note)) == 1 and r.tick(29.0) == []
    fin = kinds(r.tick(30.0), er.Finish)
    assert fin and fin[0].rc == 1
    assert fin[0].message == ("only 1 workers available, fewer than --min-np 2, for "
                              "--elastic-timeout 30 s (hosts: a:1)")


def test_min_np_wait_ends_when_a_host_comes():
    r, _ = start([("a", 1)], min_np=2, elastic_timeout=30.0)
    cmds = r.discovered([("a", 1), ("b", 1)], 20.0)
    assert len(kinds(cmds, er.Start)) == 2 and r.generation == 0


def test_min_np_after_a_failure_waiting_workers_get_end():
    r, _ = start([("a", 1), ("b", 1)], min_np=2, elastic_timeout=30.0)
    r.exited("b:0", -9, 1.0)
    assert acts(r.ready("a:0", 3.0)) == []  # 1 < min-np: wait (b blacklisted, no cooldown)
    assert r.tick(32.0) == []
    cmds = r.tick(33.0)
    assert keys(cmds) == {"assign/a:0/1": "end,only 1 workers available, fewer than "
                          "--min-np 2, for --elastic-timeout 30 s (hosts: a:1, b:1 blacklisted)"}
    assert kinds(cmds, er.Terminate) == []  # it was told to end; the driver reaps it
    assert r.tick(40.0) == [] and r.ready("a:0", 41.0) == []


def test_reset_limit():
    r, _ = start([("a", 1), ("b", 1), ("c", 1)], reset_limit=1)
    r.exited("c:0", 1, 1.0)
    r.ready("a:0", 2.0)
    assert keys(r.ready("b:0", 2.0))  # the first reset is allowed
    r.exited("b:0", 1, 3.0)
    cmds = r.ready("a:0", 4.0)
    assert keys(cmds) == {"assign/a:0/2": "end,the reset limit (1) is reached: generation 2 "
                                          "would be reset 2"}
    assert kinds(cmds, er.Finish)[0].rc == 1


def test_blacklist_cooldown_doubles_and_the_host_comes_back():
    r, _ = start([("a", 1), ("b", 1)], rng=FixedRng(0.5), cooldown=(10.0, 100.0))
    r.exited("b:0", 1, 0.0)
    # First time: 10 * 2^0 + 0.5 * 10 = 15 s.
    assert r.blacklist.blocked("b", 14.9) and not r.blacklist.blocked("b", 15.0)
    cmds = r.ready("a:0", 1.0)
    assert keys(cmds) == {"assign/a:0/1": "0,1,0,1,0,1,1"}
    assert r.tick(14.0) == []
    assert keys(r.tick(15.0)) == {"elastic/hosts_updated/1": "1"}
    cmds = r.ready("a:0", 16.0)
    assert kinds(cmds, er.Start) == [er.Start("b:0.1", "b", 0)]  # a new id for the slot
    assert keys(cmds)["assign/b:0.1/0"] == "1,2,0,1,1,2,2"
    r.exited("b:0.1", 1, 20.0)
    # Second time: 10 * 2^1 + 5 = 25 s.
    assert r.blacklist.blocked("b", 44.9) and not r.blacklist.blocked("b", 45.0)
    # The upper bound: 10 * 2^3 + 5 = 85, 10 * 2^4 + 5 > 100 -> 100.
    bl = er._Blacklist((10.0, 100.0), FixedRng(0.5))
    for _ in range(4):
        bl.add("h", 0.0)
    assert not bl.blocked("h", 85.0)
    bl.add("h", 0.0)
    assert bl.blocked("h", 99.9) and not bl.blocked("h", 100.0)


def test_blacklisted_without_cooldown_is_permanent():
    r, _ = start([("a", 1), ("b", 1)])
    r.exited("b:0", 1, 0.0)
    assert r.blacklist.blocked("b", 1e9)


def test_all_exit_0_is_success_and_a_late_ready_is_told_to_end():
    r, _ = start([("a", 2)])
    assert r.exited("a:0", 0, 1.0) == []
    assert r.exited("a:1", 0, 1.5) == [er.Finish(0, "")]
    r, _ = start([("a", 2)])
    r.exited("a:0", 0, 1.0)
    cmds = r.ready("a:1", 2.0)
    assert keys(cmds) == {"assign/a:1/1": "end,the job is finishing: another worker already "
                                          "exited 0"}
    fin = kinds(cmds, er.Finish)[0]
    assert fin.rc == 1 and "a:1 asked for a new membership" in fin.message


def test_failure_while_finishing_is_the_job_status():
    r, _ = start([("a", 2)])
    r.exited("a:0", 0, 1.0)
    assert r.exited("a:1", -9, 2.0) == [er.Finish(137, "worker a:1 on host a was killed by "
                                                       "signal 9")]


def test_everyone_failing_restarts_on_remaining_hosts():
    r, _ = start([("a", 1), ("b", 1), ("c", 1)], np=2)
    # b may still come to the round.
    assert acts(r.exited("a:0", 1, 1.0)) == [
        er.SetKey("elastic/abort/0", "worker a:0 on host a exited with status 1")]
    cmds = r.exited("b:0", 1, 1.0)  # no member runs: the round forms at once on c
    assert kinds(cmds, er.Start) == [er.Start("c:0", "c", 0)]
    assert keys(cmds) == {"elastic/abort/0": "worker b:0 on host b exited with status 1",
                          "assign/c:0/0": "0,1,0,1,0,1,1"}


def test_member_lost_while_its_generation_connects_is_given_up_and_the_next_forms():
    """A worker that announced itself and then died (its node lost: the driver hears of it
    late) is counted into generation 1; when its death is reported, generation 1 is given up
    (abort key), its other members announce themselves again and generation 2 forms without
    it, on the hosts that remain."""
    r, _ = start([("a", 2), ("b", 2)])
    assert keys(r.exited("b:1", -9, 1.0)) == {
        "elastic/abort/0": "worker b:1 on host b was killed by signal 9"}
    for w in ("a:0", "a:1"):
        r.ready(w, 1.5)
    cmds = r.ready("b:0", 1.6)  # b:0 announced itself before it went too
    assert r.generation == 1 and r.members == ["a:0", "a:1", "b:0"]
    assert keys(r.exited("b:0", -9, 5.0)) == {
        "elastic/abort/1": "worker b:0 on host b was killed by signal 9"}
    # The survivors gave generation 1 up (their connect saw the abort key) and announce
    # themselves again: their next init is their third (ready/<id>/2).
    assert r.ready_keys() == [("a:0", "ready/a:0/2"), ("a:1", "ready/a:1/2")]
    assert r.ready("a:0", 5.3) == []
    cmds = r.ready("a:1", 5.3)
    assert keys(cmds) == {"assign/a:0/2": "0,2,0,2,0,1,2", "assign/a:1/2": "1,2,1,2,0,1,2"}
    assert kinds(cmds, er.Start) == [] and r.generation == 2
