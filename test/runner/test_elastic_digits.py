"""The C++ elastic API end to end (issue 37): examples/digits_elastic (hvd::elastic::run with a
TensorState) under this harness playing hvdrun's elastic driver through the store.

Three workers train; one is SIGKILLed after some commits: the two survivors restore their last
commit, re-init at generation 1 (size 2) and go on; then the harness flags
`elastic/hosts_updated/1` and starts a new worker: the survivors stop at their next commit
(HostsUpdatedInterrupt), re-init at generation 2 with it (size 3), and all three finish. From
the workers' commit logs (HVD_ELASTIC_LOG): every worker's committed positions strictly
increase (no committed step repeated), the generations' workers logged the same commits, and
the three final parameter checksums are equal (each worker also checks bitwise against rank 0
and its held-out accuracy, exiting non-zero otherwise).

The example's binary: $HVD_DIGITS_ELASTIC, else <repo>/build/examples/digits_elastic;
skipped when neither exists or the build has no Gloo.
"""

import os
import re
import signal
import subprocess
import sys
import time

import pytest

import horovod_cpp
from horovod_cpp.runner import gloo_launch, rendezvous

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from test_elastic_core import elastic_env  # noqa: E402
from test_gloo_fault import OP_TIMEOUT_S, SLACK_S, Lines, place_list  # noqa: E402

BINARY = os.environ.get("HVD_DIGITS_ELASTIC") or os.path.join(
    HERE, "..", "..", "build", "examples", "digits_elastic")

pytestmark = [
    pytest.mark.skipif(not horovod_cpp.gloo_built(), reason="this build has no Gloo"),
    pytest.mark.skipif(not os.path.exists(BINARY), reason=f"no digits_elastic at {BINARY}"),
]

EPOCHS = 10
COMMIT = re.compile(r"^commit epoch=(\d+) batch=(\d+) rank=(\d+) size=(\d+) generation=(\d+)$")
FINAL = re.compile(r"^final epoch=(\d+) rank=(\d+) size=(\d+) checksum=([0-9a-f]{16})$")


def read_log(log_dir, wid):
    path = os.path.join(log_dir, wid + ".log")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [ln.rstrip("\n") for ln in f]


def commits(lines):
    return [tuple(int(g) for g in m.groups()) for m in map(COMMIT.match, lines) if m]


def output_of(lines, wid):
    """The last lines worker `wid` printed."""
    time.sleep(0.2)
    while not lines.q.empty():
        lines.seen.append(lines.q.get())
    return [ln for _, i, ln in lines.seen if i == wid][-20:]


def wait_until(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {timeout} s")
        time.sleep(0.05)


def test_digits_loses_a_worker_then_grows_and_ends_identical(tmp_path):
    secret = gloo_launch.new_secret()
    store = rendezvous.StoreServer(secret).start()
    log_dir = str(tmp_path)
    places3 = place_list(3, False)
    ids = ["node0:0", "node1:0", "node2:0"]
    procs, lines = {}, Lines()

    def start(wid, place, n_assign, generation):
        store.set(f"assign/{wid}/{n_assign}", gloo_launch.assignment(place, generation))
        env = elastic_env(place, wid, store, secret, HVD_ELASTIC_LOG=log_dir,
                          HOROVOD_CPP_GLOO_OP_TIMEOUT_SECONDS=str(OP_TIMEOUT_S),
                          HOROVOD_ELASTIC_TIMEOUT="120")
        p = subprocess.Popen([BINARY, "--epochs", str(EPOCHS), "--commit-every", "5",
                              "--step-sleep-ms", "40"], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, start_new_session=True)
        procs[wid] = p
        lines.follow(wid, p.stdout)

    def assign(members, places, n, generation):
        for wid, place in zip(members, places):
            store.set(f"assign/{wid}/{n}", gloo_launch.assignment(place, generation))

    try:
        for wid, place in zip(ids, places3):
            start(wid, place, 0, 0)
        wait_until(lambda: len(commits(read_log(log_dir, ids[0]))) >= 2, 120,
                   "two commits of generation 0")
        procs[ids[2]].kill()
        survivors = ids[:2]
        for wid in survivors:
            assert store.get(f"ready/{wid}/1", OP_TIMEOUT_S + SLACK_S + 10) == b"1", (
                wid, procs[wid].poll(), output_of(lines, wid))
        assign(survivors, place_list(2, False), 1, 1)
        wait_until(lambda: any(c[4] == 1 for c in commits(read_log(log_dir, ids[0]))), 120,
                   "a commit of generation 1")
        store.set("elastic/hosts_updated/1", "1")
        for wid in survivors:  # they come back at their next commit
            assert store.get(f"ready/{wid}/2", 60) == b"1", (wid, output_of(lines, wid))
        newcomer = "node2:0.1"
        members = survivors + [newcomer]
        start(newcomer, places3[2], 0, 2)
        assign(survivors, places3[:2], 2, 2)
        for wid in members:
            assert procs[wid].wait(timeout=120) == 0, (wid, output_of(lines, wid))
    finally:
        for p in procs.values():
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        store.stop()

    logs = {wid: read_log(log_dir, wid) for wid in ids + [newcomer]}
    for wid, log in logs.items():
        seq = [(c[0], c[1]) for c in commits(log)]
        assert seq == sorted(set(seq)), (wid, seq)  # strictly increasing: none repeated
    by_gen = {}
    for wid in survivors:
        for c in commits(logs[wid]):
            by_gen.setdefault(c[4], {}).setdefault(wid, []).append((c[0], c[1], c[3]))
    assert sorted(by_gen) == [0, 1, 2], by_gen
    for gen, per_worker in by_gen.items():
        assert per_worker[survivors[0]] == per_worker[survivors[1]], (gen, per_worker)
    assert {c[3] for c in commits(logs[survivors[0]]) if c[4] == 1} == {2}
    assert {c[3] for c in commits(logs[newcomer])} == {3}
    finals = [FINAL.match(logs[wid][-1]) for wid in members]
    assert all(finals), {wid: logs[wid][-1:] for wid in members}
    assert {f.group(1) for f in finals} == {str(EPOCHS)}
    assert {f.group(3) for f in finals} == {"3"}
    assert len({f.group(4) for f in finals}) == 1, [f.group(0) for f in finals]
