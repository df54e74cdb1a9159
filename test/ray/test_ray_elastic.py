"""ElasticRayExecutor on the shared local Ray cluster: 3 workers training with
horovod_cpp.elastic (ObjectState, committing every step) lose one actor to ray.kill in the
middle of training and finish on the 2 survivors with identical parameters, equal to a replay
of the steps at the sizes they ran at, and a committed step sequence with no gap or repeat;
too few slots for min_workers fails with a clear error, in bounded time.

Growing the job (a Ray node joining) is not tested here: it needs a cluster of its own
(ray.cluster_utils, as test_ray_multinode.py) and the hvdrun tests (test_elastic_jobs.py) cover
the same rounds' growth.
"""

import faulthandler
import os
import threading
import time

import numpy as np
import pytest

from conftest import NUM_CPUS, skip_without_ray

ray = skip_without_ray()
from horovod_cpp.ray import ElasticRayExecutor  # noqa: E402

STEPS = 40
KILL_AT_STEP = 8  # the last rank of generation 0 asks to be killed after this commit


@pytest.fixture(autouse=True)
def per_test_timeout():
    """A test that hangs dumps the stacks and ends the run instead of blocking CI."""
    faulthandler.dump_traceback_later(float(os.environ.get("HVD_TEST_TIMEOUT_S", "300")),
                                      exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


# ---- run inside the workers ------------------------------------------------------------------
def gradient(step, rank):
    """Rank `rank`'s gradient at `step`: integers, so sums are exact in any order."""
    return np.random.default_rng(1000 * step + rank).integers(-100, 100, 8).astype(np.float64)


def elastic_job(marker):
    """A training loop under the elastic run loop; returns (worker id, parameters, log of
    (step, size) committed). The last rank of generation 0 writes its id to `marker` after
    committing KILL_AT_STEP and keeps training until the test kills its actor."""
    import horovod_cpp as hvd
    import horovod_cpp.elastic as elastic

    wid = os.environ["HOROVOD_CPP_WORKER_ID"]
    hvd.init()
    state = elastic.ObjectState(step=0, params=np.zeros(8), log=[])

    @elastic.run
    def train(state):
        while state.step < STEPS:
            step = state.step + 1
            total = hvd.allreduce(gradient(step, hvd.rank()), op=hvd.Sum, name="t.grad")
            state.params = state.params + total
            state.step = step
            state.log.append((step, hvd.size()))
            state.commit()
            if (step == KILL_AT_STEP and hvd.rank() == hvd.size() - 1
                    and not os.path.exists(marker)):
                with open(marker + ".tmp", "w") as f:
                    f.write(wid)
                os.replace(marker + ".tmp", marker)
            time.sleep(0.1)
        return wid, state.params.tolist(), state.log

    return train(state)


# ---- the tests -------------------------------------------------------------------------------
def settings(**kw):
    # A loaded CI machine starts actors slowly: a generous start timeout.
    return ElasticRayExecutor.create_settings(timeout_s=120, **kw)


def test_actor_killed_mid_training_job_goes_on(ray_cluster, tmp_path):
    marker = str(tmp_path / "kill_me")
    ex = ElasticRayExecutor(settings(elastic_timeout=60), min_workers=2, max_workers=3)
    ex.start()
    out, generations = {}, []

    def driver():
        try:
            out["results"] = ex.run(lambda: elastic_job(marker),
                                    callbacks=[lambda g, ws: generations.append((g, ws))])
        except BaseException as e:  # reported by the main thread
            out["error"] = e

    thread = threading.Thread(target=driver, daemon=True)
    try:
        thread.start()
        deadline = time.monotonic() + 180
        while not os.path.exists(marker) and thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert os.path.exists(marker), f"no worker reached step {KILL_AT_STEP}: {out}"
        victim = open(marker).read()
        ray.kill(ex.workers[victim], no_restart=True)
        thread.join(timeout=180)
        assert not thread.is_alive(), "run() did not return"
    finally:
        ex.shutdown()
    assert "error" not in out, out.get("error")
    results = out["results"]
    assert len(generations) >= 2 and len(generations[0][1]) == 3, generations
    # The cluster's only node is blacklisted for good (no cooldown): 2 survivors finish.
    assert len(results) == 2, results
    wids = [r[0] for r in results]
    assert victim not in wids and set(wids) <= set(generations[0][1])
    _, params, log = results[0]
    for _, p, lg in results[1:]:
        assert p == params and lg == log
    assert [s for s, _ in log] == list(range(1, STEPS + 1))  # no gap, no repeat
    sizes = [n for _, n in log]
    assert sizes[:KILL_AT_STEP] == [3] * KILL_AT_STEP and sizes[-1] == 2, sizes
    assert sizes == sorted(sizes, reverse=True), sizes
    want = np.zeros(8)
    for step, n in log:
        want += sum(gradient(step, r) for r in range(n))
    np.testing.assert_array_equal(np.array(params), want)


def test_min_workers_not_met_fails_clearly(ray_cluster):
    ex = ElasticRayExecutor(settings(elastic_timeout=2), min_workers=NUM_CPUS + 1)
    ex.start()
    t0 = time.monotonic()
    try:
        with pytest.raises(RuntimeError, match=rf"only {NUM_CPUS} workers available, fewer "
                                               rf"than --min-np {NUM_CPUS + 1}"):
            ex.run(lambda: elastic_job("/nonexistent"))
    finally:
        ex.shutdown()
    assert time.monotonic() - t0 < 30
