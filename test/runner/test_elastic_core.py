"""The library's side of elastic training (issue 37) with the real library; this harness
plays hvdrun's elastic driver through the store (the elastic contract's keys):

- an elastic init() SETs `ready/<id>/<n>` before it GETs `assign/<id>/<n>`, and waits for the
  assignment up to HOROVOD_ELASTIC_TIMEOUT (not HOROVOD_GLOO_TIMEOUT_SECONDS);
- `end,<reason>` as the assignment fails init() with an error that gives the reason;
- elastic_hosts_updated() answers the same on every rank, at the same step: False, then True
  once `elastic/hosts_updated/<generation>` is set;
- a lost peer does not end the survivors (no abort watchdog in elastic mode): they get
  HorovodInternalError, wait past the default 5 s grace, and re-init at the next generation.

Skipped when the build has no Gloo (horovod_cpp.gloo_built()).

    python -m pytest test/runner/test_elastic_core.py
"""

import os
import subprocess
import sys
import time

import pytest

import horovod_cpp
from horovod_cpp.runner import gloo_launch, rendezvous

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "elastic_core_worker.py")
sys.path.insert(0, HERE)
from test_gloo_fault import (OP_TIMEOUT_S, SLACK_S, Lines, place_list, spawn,  # noqa: E402
                             stop_all)

pytestmark = pytest.mark.skipif(not horovod_cpp.gloo_built(),
                                reason="this build has no Gloo (horovod_cpp.gloo_built())")

#: The abort grace of fixed mode, which elastic mode must not apply.
DEFAULT_GRACE_S = 5
PLACE_VARS = ("HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE",
              "HOROVOD_CROSS_RANK", "HOROVOD_CROSS_SIZE")


def elastic_env(place, wid, store, secret, **extra):
    """An elastic worker's variables as the driver sets them: no place variables."""
    env = dict(os.environ)
    env.update(gloo_launch.worker_env(place, "127.0.0.1", store.port, secret,
                                      {"HOROVOD_GLOO": "1"}))
    for var in PLACE_VARS:
        env.pop(var, None)
    env.pop("HOROVOD_CPP_ABORT_GRACE_SECONDS", None)
    env.update(HOROVOD_ELASTIC="1", HOROVOD_CPP_WORKER_ID=wid, **extra)
    return env


def run_init(env, timeout=60):
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, WORKER, "init"], env=env, capture_output=True,
                         text=True, timeout=timeout)
    return out, time.monotonic() - t0


class OrderRecorder:
    """The store's resolver: for each GET/CHECK of a missing `assign/` key, whether the
    matching `ready/` key was there already."""

    def __init__(self):
        self.store = None
        self.seen = []

    def __call__(self, key):
        if key.startswith("assign/"):
            ready = "ready/" + key[len("assign/"):]
            self.seen.append((key, self.store.check(ready)))
        return None


def test_ready_before_assign_then_elastic_timeout():
    secret = gloo_launch.new_secret()
    order = OrderRecorder()
    store = rendezvous.StoreServer(secret, resolve=order)
    order.store = store
    place = place_list(1, True)[0]
    with store:
        # The driver answers a waiting worker once it has announced itself.
        env = elastic_env(place, "h:0", store, secret)
        p = subprocess.Popen([sys.executable, WORKER, "init"], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
        try:
            assert store.get("ready/h:0/0", 60) == b"1"
            assert not store.check("assign/h:0/0")
            store.set("assign/h:0/0", gloo_launch.assignment(place, generation=4))
            out = p.communicate(timeout=60)[0]
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        assert p.returncode == 0, out
        assert "INIT_OK size=1 generation=4" in out, out
        assert order.seen and all(ready for _, ready in order.seen), order.seen

        # Nobody answers: init() gives up after HOROVOD_ELASTIC_TIMEOUT (2 s), well before the
        # store's connect timeout (30 s) would have.
        env = elastic_env(place, "h:1", store, secret, HOROVOD_ELASTIC_TIMEOUT="2",
                          HOROVOD_GLOO_TIMEOUT_SECONDS="30")
        out, took = run_init(env)
    assert out.returncode == 3, out.stdout + out.stderr
    assert "INIT_ERROR ShutdownError" in out.stdout, out.stdout
    assert "assign/h:1/0" in out.stdout and "HOROVOD_ELASTIC_TIMEOUT" in out.stdout, out.stdout
    assert 2 <= took < 2 + SLACK_S, took
    assert ("assign/h:1/0", True) in order.seen, order.seen


def test_end_assignment_fails_init_with_the_reason():
    secret = gloo_launch.new_secret()
    place = place_list(1, True)[0]
    reason = "the reset limit (3) was reached"
    with rendezvous.StoreServer(secret) as store:
        store.set("assign/h:0/0", "end," + reason)
        out, _ = run_init(elastic_env(place, "h:0", store, secret))
    assert out.returncode == 3, out.stdout + out.stderr
    assert "INIT_ERROR ShutdownError" in out.stdout, out.stdout
    assert reason in out.stdout, out.stdout


def test_hosts_updated_agrees_and_a_lost_peer_leaves_the_survivors_to_reinit():
    secret = gloo_launch.new_secret()
    store = rendezvous.StoreServer(secret).start()
    places = place_list(3, False)
    ids = [f"node{i}:0" for i in range(3)]
    procs, lines = [], Lines()
    try:
        for wid, place in zip(ids, places):
            store.set(f"assign/{wid}/0", gloo_launch.assignment(place))
            env = elastic_env(place, wid, store, secret,
                              HOROVOD_CPP_GLOO_OP_TIMEOUT_SECONDS=str(OP_TIMEOUT_S),
                              HOROVOD_ELASTIC_TIMEOUT="120")
            spawn([sys.executable, WORKER, "loop"], env, place.rank, procs, lines)
        looping = lines.wait_for(r"^LOOPING", 3, 120)
        assert sorted(ln for _, _, ln in looping) == [
            f"LOOPING rank={r} size=3 generation=0" for r in range(3)]
        time.sleep(0.5)  # some steps with hosts_updated() False
        assert not any("UPDATED" in ln for _, _, ln in lines.seen)
        store.set("elastic/hosts_updated/0", "1")
        updated = lines.wait_for(r"^UPDATED", 3, 60)
        steps = {ln.split("step=")[1] for _, _, ln in updated}
        assert len(steps) == 1, updated  # the same call returned True on every rank

        time.sleep(0.3)  # an allreduce is in flight
        t_kill = time.monotonic()
        procs[2].kill()
        errors = lines.wait_for(r"^INTERNAL_ERROR", 2, OP_TIMEOUT_S + SLACK_S + 30)
        assert sorted(i for _, i, _ in errors) == [0, 1]
        for wid in ids[:2]:  # both survivors wait for their next assignment
            assert store.get(f"ready/{wid}/1", OP_TIMEOUT_S + SLACK_S) == b"1", wid
        # Past fixed mode's abort grace: the survivors must still be there, waiting.
        time.sleep(max(0.0, DEFAULT_GRACE_S + 3 - (time.monotonic() - t_kill)))
        for i, p in enumerate(procs[:2]):
            assert p.poll() is None, (i, p.returncode, [ln for _, j, ln in lines.seen if j == i])
        for wid, place in zip(ids[:2], place_list(2, False)):
            store.set(f"assign/{wid}/1", gloo_launch.assignment(place, generation=1))
        done = lines.wait_for(r"^REINIT OK", 2, 120)
        assert sorted(ln for _, _, ln in done) == [
            f"REINIT OK rank={r} size=2 generation=1 updated=False" for r in range(2)]
        for p in procs[:2]:
            assert p.wait(timeout=60) == 0
        assert not any("WRONG" in ln for _, _, ln in lines.seen)
    finally:
        stop_all(procs, store)


@pytest.mark.parametrize("one_host", [False, True], ids=["three_hosts", "one_host"])
def test_generation_that_loses_a_member_while_connecting_is_given_up_then_the_next_joins(
        one_host):
    """The driver counted node2:0 into generation 0, then heard that it died before it
    connected (under Ray: its node went down). The members waiting for it in the connect stop
    when the driver sets elastic/abort/0, announce ready/<id>/1 in the same init() call, and
    that init() returns in generation 1, where allreduces are right."""
    secret = gloo_launch.new_secret()
    store = rendezvous.StoreServer(secret).start()
    places = place_list(3, one_host)
    ids = [f"node{i}:0" for i in range(3)] if not one_host else [f"node:{i}" for i in range(3)]
    procs, lines = [], Lines()
    try:
        for wid, place in zip(ids, places):
            store.set(f"assign/{wid}/0", gloo_launch.assignment(place))
        for i, (wid, place) in enumerate(zip(ids[:2], places[:2])):  # ids[2] never comes
            env = elastic_env(place, wid, store, secret, HOROVOD_GLOO_TIMEOUT_SECONDS="120",
                              HOROVOD_ELASTIC_TIMEOUT="120")
            spawn([sys.executable, WORKER, "init_sum"], env, i, procs, lines)
        for wid in ids[:2]:
            assert store.get(f"ready/{wid}/0", 60) == b"1", wid
        time.sleep(1.0)  # both wait in the connect for ids[2]
        assert all(p.poll() is None for p in procs)
        why = f"worker {ids[2]} on host {places[2].host} was killed by signal 9"
        t_abort = time.monotonic()
        store.set("elastic/abort/0", why)
        for wid in ids[:2]:  # announced again within a poll, not the 120 s connect timeout
            assert store.get(f"ready/{wid}/1", 20) == b"1", (wid, lines.seen)
        assert time.monotonic() - t_abort < 20
        warned = lines.wait_for(r"elastic generation 0 did not connect", 2, 10)
        assert all(why in ln for _, _, ln in warned), warned
        for wid, place in zip(ids[:2], place_list(2, one_host)):
            store.set(f"assign/{wid}/1", gloo_launch.assignment(place, generation=1))
        done = lines.wait_for(r"^INIT_OK", 2, 60)
        assert sorted(ln for _, _, ln in done) == ["INIT_OK size=2 generation=1"] * 2
        for p in procs:
            assert p.wait(timeout=60) == 0
    finally:
        stop_all(procs, store)


def test_member_lost_after_the_world_connected_the_others_join_the_next_generation():
    """The third member of generation 0 connects the world and dies before the init-time
    agreement (HOROVOD_CPP_TEST_EXIT_AFTER_CONNECT): the others' init() sees the lost peer,
    announces ready/<id>/1 itself and returns in generation 1."""
    secret = gloo_launch.new_secret()
    store = rendezvous.StoreServer(secret).start()
    places = place_list(3, False)
    ids = [f"node{i}:0" for i in range(3)]
    procs, lines = [], Lines()
    try:
        for i, (wid, place) in enumerate(zip(ids, places)):
            store.set(f"assign/{wid}/0", gloo_launch.assignment(place))
            extra = {"HOROVOD_CPP_TEST_EXIT_AFTER_CONNECT": "1"} if i == 2 else {}
            env = elastic_env(place, wid, store, secret, HOROVOD_GLOO_TIMEOUT_SECONDS="120",
                              HOROVOD_ELASTIC_TIMEOUT="120",
                              HOROVOD_CPP_GLOO_OP_TIMEOUT_SECONDS=str(OP_TIMEOUT_S), **extra)
            spawn([sys.executable, WORKER, "init_sum"], env, i, procs, lines)
        assert procs[2].wait(timeout=60) == 9
        for wid in ids[:2]:
            assert store.get(f"ready/{wid}/1", OP_TIMEOUT_S + SLACK_S + 10) == b"1", \
                (wid, lines.seen)
        warned = lines.wait_for(r"elastic generation 0 lost a member while it was set up", 2, 10)
        assert len({i for _, i, _ in warned}) == 2, warned
        for wid, place in zip(ids[:2], place_list(2, False)):
            store.set(f"assign/{wid}/1", gloo_launch.assignment(place, generation=1))
        done = lines.wait_for(r"^INIT_OK", 2, 60)
        assert sorted(ln for _, _, ln in done) == ["INIT_OK size=2 generation=1"] * 2
        for p in procs[:2]:
            assert p.wait(timeout=60) == 0
    finally:
        stop_all(procs, store)
