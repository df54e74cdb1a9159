"""Keras model.fit with the elastic callbacks against a membership driver played here (the
harness of test/runner/test_elastic_api.py): 3 workers on the Gloo controller, one SIGKILLs
itself in the middle of an epoch (between two commits); the survivors' fit fails inside the
graph (TensorFlow's InternalError from horovod_cpp's ops), the run loop restores the last
commit, the survivors re-init at size 2 and finish every epoch with identical weights.

Runs once per CI pass: on rank 0 of the 2-rank pytest session (the workers are separate
processes); skipped elsewhere and where the build has no Gloo."""

import os
import re
import signal
import sys

import pytest

import horovod_cpp.tensorflow as hvd

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "runner"))
from elastic_harness import Driver, field  # noqa: E402

WORKER = os.path.join(HERE, "elastic_keras_worker.py")


def test_keras_fit_survives_a_killed_worker():
    if hvd.size() != 2 or hvd.rank() != 0 or not hvd.gloo_built():
        pytest.skip("runs on rank 0 of the 2-rank session, in builds with Gloo")
    d = Driver()
    first = ["node0:0", "node1:0", "node2:0"]
    try:
        d.assign(first, {w: 0 for w in first}, generation=0)
        for i, w in enumerate(first):
            argv = [sys.executable, WORKER, "--worker", w, "--seed", str(i)]
            d.start(w, argv + (["--die-at", "1,3"] if i == 2 else []))
        assert d.procs["node2:0"].wait(timeout=180) == -signal.SIGKILL
        survivors = first[:2]
        d.wait_ready(survivors, 1, 60)
        d.assign(survivors, {w: 1 for w in survivors}, generation=1)
        trains = d.lines.wait_for(r"^TRAIN .*size=2", 2, 60)
        # Batch 3 of epoch 1 never completed: the last commit was (1, 2).
        assert {(field(ln, "epoch"), field(ln, "batch")) for _, _, ln in trains} == {(1, 2)}
        done = d.lines.wait_for(r"^DONE ", 2, 120)
        for w in survivors:
            assert d.procs[w].wait(timeout=60) == 0, w
        assert sorted((field(ln, "rank"), field(ln, "size"), field(ln, "epoch"))
                      for _, _, ln in done) == [(0, 2, 3), (1, 2, 3)]
        params = {re.search(r"params=(\w+)", ln).group(1) for _, _, ln in done}
        assert len(params) == 1, "the survivors finished with different weights"
        # Every epoch has its length in the committed history: the resumed epoch 1 trains
        # its 4 batches left (3..6) and ends, none trained twice after the restore.
        assert {field(ln, "steps") for _, _, ln in done} == {3 * 6}
        for w in survivors:
            commits = [(field(ln, "epoch"), field(ln, "batch")) for _, _, ln in d.lines.seen
                       if ln.startswith(f"COMMIT worker={w} ") and "size=2" in ln]
            assert commits == [(1, 4), (1, 6), (2, 0), (2, 2), (2, 4), (2, 6), (3, 0)], commits
    except AssertionError:
        for _, i, ln in d.lines.seen + list(d.lines.q.queue):  # the workers' story
            print(f"[{i}] {ln}")
        raise
    finally:
        d.close()
