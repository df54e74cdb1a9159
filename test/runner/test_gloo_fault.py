"""Fault tests of the Gloo controller with the real library (issue 36): a worker killed with
SIGKILL in the middle of a long allreduce loop; a wrong secret and a vanished store at init().

- Elastic-ready: 3 workers started by this harness exactly as the contract says (a store
  served here, the variables, `assign/<id>/0` keys); one is killed; the other two must get
  HorovodInternalError within the op timeout, then shutdown() + init() from the new
  assignments (`assign/<id>/1`, size 2, written here) and allreduce correctly at size 2.
- Fixed mode: `hvdrun --gloo -np 3` with a worker killed exits non-zero naming the dead rank.

Skipped when the build has no Gloo (horovod_cpp.gloo_built()).

    python -m pytest test/runner/test_gloo_fault.py
"""

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time

import pytest

import horovod_cpp
from horovod_cpp.runner import gloo_launch, rendezvous

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "gloo_fault_worker.py")
sys.path.insert(0, HERE)
from test_hvdrun import hvdrun_cmd  # noqa: E402

pytestmark = pytest.mark.skipif(not horovod_cpp.gloo_built(),
                                reason="this build has no Gloo (horovod_cpp.gloo_built())")

OP_TIMEOUT_S = 5
#: Allowance over the op timeout for a loaded two-core machine.
SLACK_S = 10


class Lines:
    """Every line the workers print, as (time, worker index, line), in arrival order."""

    def __init__(self):
        self.q = queue.Queue()
        self.seen = []

    def follow(self, index, stream):
        def pump():
            for line in stream:
                self.q.put((time.monotonic(), index, line.rstrip("\n")))
        threading.Thread(target=pump, daemon=True).start()

    def wait_for(self, pattern, count, timeout):
        """The first `count` lines matching `pattern` (with their time and worker)."""
        deadline = time.monotonic() + timeout
        found = [x for x in self.seen if re.search(pattern, x[2])]
        while len(found) < count:
            try:
                item = self.q.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"{count} lines matching {pattern!r} did not come within "
                                     f"{timeout} s; so far:\n" +
                                     "\n".join(f"  [{i}] {ln}" for _, i, ln in self.seen))
            self.seen.append(item)
            if re.search(pattern, item[2]):
                found.append(item)
        return found[:count]


def spawn(argv, env, index, procs, lines):
    """Starts a worker in a session of its own, appended to `procs`, its output followed by
    `lines` as `index`."""
    p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, start_new_session=True)
    procs.append(p)
    lines.follow(index, p.stdout)
    return p


def stop_all(procs, store):
    """Kills what is left of `procs` (with their process groups), then stops `store`."""
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
        p.wait()
    store.stop()


def place_list(n, one_host):
    hosts = [("node", n)] if one_host else [(f"node{i}", 1) for i in range(n)]
    return gloo_launch.place_workers(hosts, n)


@pytest.mark.parametrize("one_host, extra_env", [
    (False, {}),
    (True, {"HOROVOD_CPP_SHM": "0"}),
    (True, {}),
], ids=["three_hosts", "one_host_gloo_only", "one_host_shared_memory"])
def test_killed_peer_then_reinit_at_size_2(one_host, extra_env):
    """Three hosts (distinct HOROVOD_HOSTNAMEs: Gloo between all), or one host (with shared
    memory off: Gloo there too; with it on: the shared-memory transports)."""
    secret = gloo_launch.new_secret()
    store = rendezvous.StoreServer(secret).start()
    places = place_list(3, one_host)
    ids = [f"w{i}" for i in range(3)]
    procs, lines = [], Lines()
    try:
        for wid, place in zip(ids, places):
            store.set(f"assign/{wid}/0", gloo_launch.assignment(place))
            env = dict(os.environ)
            env.update(gloo_launch.worker_env(place, "127.0.0.1", store.port, secret,
                                              {"HOROVOD_GLOO": "1"}))
            env.update(HOROVOD_CPP_WORKER_ID=wid,
                       HOROVOD_CPP_GLOO_OP_TIMEOUT_SECONDS=str(OP_TIMEOUT_S),
                       # The harness plays the membership driver: a survivor that learns of the
                       # loss at once must not end the job (the fixed mode's abort grace) while
                       # the other still waits out the op timeout before the new keys come.
                       HOROVOD_CPP_ABORT_GRACE_SECONDS="60", **extra_env)
            spawn([sys.executable, WORKER], env, place.rank, procs, lines)
        lines.wait_for(r"^LOOPING", 3, 120)
        time.sleep(0.3)  # well inside the loop: an allreduce is in flight
        t_kill = time.monotonic()
        procs[2].kill()
        errors = lines.wait_for(r"^INTERNAL_ERROR", 2, OP_TIMEOUT_S + SLACK_S + 30)
        assert sorted(i for _, i, _ in errors) == [0, 1]
        for t, i, line in errors:
            print(f"rank {i}: HorovodInternalError {t - t_kill:.2f} s after the kill")
            assert t - t_kill < OP_TIMEOUT_S + SLACK_S, (i, t - t_kill, line)
        survivors = place_list(2, one_host)
        for wid, place in zip(ids[:2], survivors):
            store.set(f"assign/{wid}/1", gloo_launch.assignment(place, generation=1))
        done = lines.wait_for(r"^REINIT OK", 2, 120)
        assert sorted(ln for _, _, ln in done) == ["REINIT OK rank=0 size=2",
                                                   "REINIT OK rank=1 size=2"]
        for p in procs[:2]:
            assert p.wait(timeout=60) == 0
        assert not any("WRONG" in ln for _, _, ln in lines.seen)
    finally:
        stop_all(procs, store)


def test_fixed_mode_job_ends_naming_the_dead_rank():
    p = subprocess.Popen(hvdrun_cmd() + ["--gloo", "-np", "3", sys.executable, WORKER,
                                         "--no-reinit"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=dict(os.environ,
                                  HOROVOD_CPP_GLOO_OP_TIMEOUT_SECONDS=str(OP_TIMEOUT_S)))
    lines = Lines()
    lines.follow(0, p.stdout)
    try:
        lines.wait_for(r"<stdout>:LOOPING", 3, 120)
        pid = _worker_pid(p.pid, rank=2)
        os.kill(pid, signal.SIGKILL)
        err = p.communicate(timeout=OP_TIMEOUT_S + SLACK_S + 30)[1]
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 128 + 9, err
    assert "rank 2 on host localhost was killed by SIGKILL" in err, err


def _worker_pid(hvdrun_pid, rank):
    """The pid of hvdrun's child whose environment says HOROVOD_RANK=rank."""
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                ppid = int(f.read().split(") ", 1)[1].split()[1])
            if ppid != hvdrun_pid:
                continue
            with open(f"/proc/{name}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if f"HOROVOD_RANK={rank}".encode() in env:
            return int(name)
    raise AssertionError(f"no child of hvdrun ({hvdrun_pid}) has HOROVOD_RANK={rank}")


INIT_ONLY = ("import sys, horovod_cpp as hvd\n"
             "try:\n    hvd.init()\nexcept Exception as e:\n"
             "    print('INIT_ERROR', type(e).__name__, e, flush=True)\n    sys.exit(3)\n"
             "print('INIT_OK', hvd.size(), flush=True)\n")


def run_one_worker(store_port, secret, timeout_s=2):
    """A job of one worker (rank 0 of 1) whose init() meets the store at `store_port`."""
    place = place_list(1, True)[0]
    env = dict(os.environ)
    env.update(gloo_launch.worker_env(place, "127.0.0.1", store_port, secret,
                                      {"HOROVOD_GLOO": "1"}))
    env["HOROVOD_GLOO_TIMEOUT_SECONDS"] = str(timeout_s)
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-c", INIT_ONLY], env=env, capture_output=True,
                         text=True, timeout=60)
    return out, time.monotonic() - t0


def test_wrong_secret_is_a_clear_init_error():
    secret = gloo_launch.new_secret()
    with rendezvous.StoreServer(secret) as store:
        out, _ = run_one_worker(store.port, gloo_launch.new_secret())
        good, _ = run_one_worker(store.port, secret)
    assert out.returncode == 3, out.stdout + out.stderr
    assert "INIT_ERROR" in out.stdout and "secret" in out.stdout, out.stdout
    assert good.returncode == 0 and "INIT_OK 1" in good.stdout, good.stdout + good.stderr


def test_vanished_store_is_a_clear_init_error_within_the_timeout():
    secret = gloo_launch.new_secret()
    store = rendezvous.StoreServer(secret).start()
    port = store.port
    store.stop()  # nothing listens there any more
    out, took = run_one_worker(port, secret, timeout_s=2)
    assert out.returncode == 3, out.stdout + out.stderr
    assert "INIT_ERROR" in out.stdout and f"127.0.0.1:{port}" in out.stdout, out.stdout
    assert took < 2 + SLACK_S, took
