"""The Python elastic API (horovod_cpp.torch.elastic.run + TorchState) against a membership
driver played by this harness, as test_gloo_fault.py does: a store served here, the elastic
variables (HOROVOD_ELASTIC=1, worker ids, no place variables), and the `assign/<id>/<n>` keys.

One job, three membership changes: 3 workers train; one is SIGKILLed (it kills itself as it is
about to run step DIE_AT, halfway between two commits, so that the loss costs the same steps
every time); the two survivors get
HorovodInternalError, restore their last commit, set their `ready/<id>/1` keys and re-init at
size 2 (generation 1); once they commit there, the harness SETs `elastic/hosts_updated/1`: both
get HostsUpdatedInterrupt at the same commit, keep their state and re-init at size 3 with a new
worker, which the sync brings to rank 0's state. The job must finish with identical parameters
on every rank, equal (to float rounding) to one process replaying the sizes the steps ran at:
no committed step lost, no step counted twice, no rank on a stale model.

Skipped when the build has no Gloo (horovod_cpp.gloo_built()).
"""

import os
import re
import signal
import sys

import pytest

import horovod_cpp

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "elastic_api_worker.py")
sys.path.insert(0, HERE)
from elastic_api_worker import COMMIT_EVERY, STEPS, simulate  # noqa: E402
from elastic_harness import OP_TIMEOUT_S, Driver, field  # noqa: E402

pytestmark = pytest.mark.skipif(not horovod_cpp.gloo_built(),
                                reason="this build has no Gloo (horovod_cpp.gloo_built())")

SLACK_S = 30
DIE_AT = 2 * COMMIT_EVERY + COMMIT_EVERY // 2
SEEDS = {"node0:0": 11, "node1:0": 12, "node2:0": 13, "node3:0": 14}


def worker(wid, *extra):
    return [sys.executable, WORKER, "--seed", str(SEEDS[wid]), "--worker", wid, *extra]


def test_killed_worker_then_added_worker_with_torch_state():
    d = Driver()
    first = ["node0:0", "node1:0", "node2:0"]
    try:
        d.assign(first, {w: 0 for w in first}, generation=0)
        for w in first[:2]:
            d.start(w, worker(w))
        d.start(first[2], worker(first[2], "--die-at-step", str(DIE_AT)))
        assert d.procs["node2:0"].wait(timeout=120) == -signal.SIGKILL
        survivors = first[:2]
        d.wait_ready(survivors, 1, OP_TIMEOUT_S + SLACK_S)
        d.assign(survivors, {w: 1 for w in survivors}, generation=1)
        d.lines.wait_for(r"^RESET .*size=2", 2, SLACK_S)
        # After the restore and the sync both train from the last commit before the loss.
        trains = d.lines.wait_for(r"^TRAIN .*size=2", 2, SLACK_S)
        restored = {field(ln, "step") for _, _, ln in trains}
        assert len(restored) == 1, trains
        k1 = restored.pop()
        assert k1 == DIE_AT - DIE_AT % COMMIT_EVERY, trains  # the last commit before the loss

        # Grow: once both committed at size 2, flag generation 1 for a new membership.
        d.lines.wait_for(r"^COMMIT .*size=2", 2, SLACK_S)
        d.store.set("elastic/hosts_updated/1", "1")
        d.wait_ready(survivors, 2, SLACK_S)
        grown = survivors + ["node3:0"]
        d.assign(grown, {"node0:0": 2, "node1:0": 2, "node3:0": 0}, generation=2)
        d.start("node3:0", worker("node3:0"))
        resets = d.lines.wait_for(r"^RESET .*size=3", 2, SLACK_S)
        kept = {field(ln, "step") for _, _, ln in resets}
        assert len(kept) == 1, resets  # the interrupt came at the same commit on both
        k2 = kept.pop()
        assert k2 % COMMIT_EVERY == 0 and k2 > k1, (k1, k2)
        # All three train from there after the sync, the new worker included.
        trains = d.lines.wait_for(r"^TRAIN .*step=[1-9]\d* .*size=3", 3, SLACK_S)
        assert sorted(ln.split()[1] for _, _, ln in trains) == [f"worker={w}" for w in grown]
        assert {field(ln, "step") for _, _, ln in trains} == {k2}, trains

        done = d.lines.wait_for(r"^DONE ", 3, 120)
        for wid in grown:
            assert d.procs[wid].wait(timeout=60) == 0, wid
        ranks = sorted((field(ln, "rank"), field(ln, "size"), field(ln, "step"))
                       for _, _, ln in done)
        assert ranks == [(0, 3, STEPS), (1, 3, STEPS), (2, 3, STEPS)]
        params = {re.search(r"params=(\w+)", ln).group(1) for _, _, ln in done}
        assert len(params) == 1, "the ranks finished with different parameters"

        import numpy as np
        import torch
        got = torch.from_numpy(np.frombuffer(bytes.fromhex(params.pop()), dtype=np.float32).copy())
        sizes = [3] * k1 + [2] * (k2 - k1) + [3] * (STEPS - k2)
        want = simulate(SEEDS["node0:0"], sizes)
        assert torch.allclose(got, want, rtol=1e-5, atol=1e-6), (got - want).abs().max()
        assert not torch.allclose(got, simulate(SEEDS["node0:0"], [3] * STEPS),
                                  rtol=1e-5, atol=1e-6)
    finally:
        d.close()
