"""ElasticRayExecutor on the shared local Ray cluster: 3 workers training with
horovod_cpp.elastic (ObjectState, committing every step) lose one actor to ray.kill in the
middle of training and finish on the 2 survivors with identical parameters, equal to a replay
of the steps at the sizes they ran at, and a committed step sequence with no gap or repeat;
too few slots for min_workers fails with a clear error, in bounded time.

Nodes: a Ray node joins a 2-worker job, and a node of a 4-worker job is lost (its raylet
killed) (elastic_nodes_driver.py, its own cluster made with ray.cluster_utils, run as a
separate driver process as test_ray_multinode.py does). Cooldown and the reset limit:
test_ray_elastic_limits.py.
"""

import json
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from conftest import NUM_CPUS, skip_without_ray

ray = skip_without_ray()
from horovod_cpp.ray import ElasticRayExecutor, placement  # noqa: E402

STEPS = 40
#: elastic_nodes_driver.py's job (growing, its workers wait for the new node after MARK_STEP).
GROW_STEPS, GROW_SLEEP_S = 40, 0.2
HERE = os.path.dirname(os.path.abspath(__file__))
MARK_STEP = 8  # the last rank of generation 0 writes the marker after this commit


# ---- run inside the workers ------------------------------------------------------------------
def gradient(step, rank):
    """Rank `rank`'s gradient at `step`: integers, so sums are exact in any order."""
    return np.random.default_rng(1000 * step + rank).integers(-100, 100, 8).astype(np.float64)


def elastic_job(marker, mark_step=MARK_STEP, steps=STEPS, sleep_s=0.1, hold_step=None,
                log_steps=False):
    """A training loop of `steps` steps under the elastic run loop; returns (worker id,
    parameters, log of (step, size) committed). With `log_steps`, rank 0 sends
    {"step", "size", "wid"} to the driver with ray_logger.log() before each commit (the
    driver's callbacks get them). The last rank of generation 0 writes its id
    to `marker` just before committing `mark_step` (the test then kills that actor or a node,
    or adds a node). With `hold_step`, every rank waits (up to 120 s) after committing that
    step for the file `marker`.go, written by the test once the membership it wants to see
    next is possible (a node joined, a cooldown ended): all ranks are past that commit's
    collective, so they wait at the same point and leave it together."""
    import horovod_cpp as hvd
    import horovod_cpp.elastic as elastic

    wid = os.environ["HOROVOD_CPP_WORKER_ID"]
    hvd.init()
    state = elastic.ObjectState(step=0, params=np.zeros(8), log=[])

    @elastic.run
    def train(state):
        while state.step < steps:
            step = state.step + 1
            total = hvd.allreduce(gradient(step, hvd.rank()), op=hvd.Sum, name="t.grad")
            state.params = state.params + total
            state.step = step
            state.log.append((step, hvd.size()))
            if log_steps:
                from horovod_cpp.ray import ray_logger
                ray_logger.log({"step": step, "size": hvd.size(), "wid": wid})
            if (step == mark_step and hvd.rank() == hvd.size() - 1
                    and not os.path.exists(marker)):
                with open(marker + ".tmp", "w") as f:
                    f.write(wid)
                os.replace(marker + ".tmp", marker)
            state.commit()
            deadline = time.monotonic() + 120
            while (step == hold_step and not os.path.exists(marker + ".go")
                   and time.monotonic() < deadline):
                time.sleep(0.05)
            time.sleep(sleep_s)
        return wid, state.params.tolist(), state.log

    return train(state)


def check_job(results, steps):
    """Checks elastic_job's results: every worker holds the same parameters and log, the
    committed steps are 1..steps (no gap, no repeat), and the parameters are the sum of the
    gradients of ranks 0..n-1 at each step, n the size that step ran at. Returns the sizes."""
    _, params, log = results[0]
    for _, p, lg in results[1:]:
        assert p == params and lg == log
    assert [s for s, _ in log] == list(range(1, steps + 1)), log
    want = np.zeros(8)
    for step, n in log:
        want += sum(gradient(step, r) for r in range(n))
    np.testing.assert_array_equal(np.array(params), want)
    return [n for _, n in log]


# ---- the tests -------------------------------------------------------------------------------
def settings(**kw):
    # A loaded CI machine starts actors slowly: a generous start timeout.
    return ElasticRayExecutor.create_settings(timeout_s=120, **kw)


def run_and_kill(ex, marker, on_generation=None, callbacks=None, **job_kwargs):
    """Runs elastic_job on `ex` in a thread (run()'s `callbacks` given), kills the actor that
    wrote `marker` (the last rank of generation 0, at MARK_STEP) and waits for run() to end.
    Returns (out, generations, victim): out holds "results" or "error"."""
    out, generations = {}, []

    def record(g, ws):
        generations.append((g, ws))
        if on_generation is not None:
            on_generation(g, ws)

    def driver():
        try:
            out["results"] = ex.run(lambda: elastic_job(marker, **job_kwargs),
                                    callbacks=callbacks, on_membership=[record])
        except BaseException as e:  # reported by the test
            out["error"] = e

    thread = threading.Thread(target=driver, daemon=True)
    thread.start()
    deadline = time.monotonic() + 180
    while not os.path.exists(marker) and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert os.path.exists(marker), f"no worker reached step {MARK_STEP}: {out}"
    victim = open(marker).read()
    ray.kill(ex.workers[victim], no_restart=True)
    thread.join(timeout=180)
    assert not thread.is_alive(), "run() did not return"
    return out, generations, victim


def test_actor_killed_mid_training_job_goes_on(ray_cluster, tmp_path):
    marker = str(tmp_path / "kill_me")
    ex = ElasticRayExecutor(settings(elastic_timeout=60), min_workers=2, max_workers=3)
    ex.start()
    try:
        # The store is served where any node of the cluster reaches it (Ray's node address).
        assert ex.store_address[0] == placement.elastic_store_address(
            ray.util.get_node_ip_address())
        logs = []
        out, generations, victim = run_and_kill(ex, marker, callbacks=[logs.append],
                                                log_steps=True)
    finally:
        ex.shutdown()
    assert "error" not in out, out.get("error")
    results = out["results"]
    assert len(generations) >= 2 and len(generations[0][1]) == 3, generations
    # The cluster's only node is blacklisted for good (no cooldown): 2 survivors finish.
    assert len(results) == 2, results
    wids = [r[0] for r in results]
    assert victim not in wids and set(wids) <= set(generations[0][1])
    sizes = check_job(results, STEPS)
    assert sizes[:MARK_STEP] == [3] * MARK_STEP and sizes[-1] == 2, sizes
    assert sizes == sorted(sizes, reverse=True), sizes
    # ray_logger: the rank 0 of each generation logged every step it ran, in order (a step
    # redone after the loss is logged again), from both generations.
    steps = [d["step"] for d in logs]
    assert steps == sorted(steps) and set(steps) == set(range(1, STEPS + 1)), logs
    assert all(sorted(d) == ["size", "step", "wid"] for d in logs), logs
    logged = {(d["step"], d["size"]) for d in logs}
    assert set(enumerate(sizes, start=1)) <= logged, (sizes, logs)
    assert {d["size"] for d in logs} >= {3, 2}, logs
    members = set().union(*(ws for _, ws in generations))
    assert {d["wid"] for d in logs} <= members - {victim}, logs


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


def env_size_and_sum():
    """In a worker: the variable passed by env_vars, the job's size and an allreduce of ones."""
    import horovod_cpp as hvd

    hvd.init()
    total = float(hvd.allreduce(np.ones(1), op=hvd.Sum, name="older_names.sum")[0])
    out = (os.environ.get("HVD_RAY_OLDER_NAMES"), hvd.size(), total)
    hvd.shutdown()
    return out


def test_horovods_older_names_cpus_per_slot_and_env_vars(ray_cluster):
    """Horovod's examples/ray build ElasticRayExecutor(settings, use_gpu=..., cpus_per_slot=2):
    the older names size the slots, and env_vars reaches every worker."""
    with pytest.raises(ValueError, match="give cpus_per_worker or cpus_per_slot"):
        ElasticRayExecutor(settings(), cpus_per_worker=1, cpus_per_slot=1)
    ex = ElasticRayExecutor(settings(elastic_timeout=30), cpus_per_slot=2,
                            env_vars={"HVD_RAY_OLDER_NAMES": "7"})
    ex.start()
    try:
        results = ex.run(env_size_and_sum)
    finally:
        ex.shutdown()
    n = NUM_CPUS // 2  # slots of 2 CPUs on the cluster's NUM_CPUS
    assert results == [("7", n, float(n))] * n, results


def run_nodes_driver(scenario):
    """elastic_nodes_driver.py's scenario: its JSON line, checked with check_job, and the
    committed sizes."""
    proc = subprocess.run([sys.executable, os.path.join(HERE, "elastic_nodes_driver.py"),
                           scenario], capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    return out, check_job(out["results"], GROW_STEPS)


def test_node_joins_job_grows():
    out, sizes = run_nodes_driver("grow")
    # Generation 0 on the head node's 2 slots; the joined node's 2 slots added at a commit.
    assert sizes[0] == 2 and sizes[-1] == 4 and sizes == sorted(sizes), sizes
    assert [len(ws) for _, ws in out["generations"]] == [2, 4], out["generations"]


def test_node_lost_job_goes_on():
    out, sizes = run_nodes_driver("lose")
    # Both nodes' workers until the second node's raylet is killed, the head's 2 after.
    assert sizes[:MARK_STEP] == [4] * MARK_STEP and sizes[-1] == 2, sizes
    assert sizes == sorted(sizes, reverse=True), sizes
    # A worker of the lost node may announce itself for generation 1 before its process goes
    # (Ray reports its death later): generation 1 is then given up for one without it.
    generations = out["generations"]
    counts = [len(ws) for _, ws in generations]
    assert counts[0] == 4 and counts[-1] == 2 and counts == sorted(counts, reverse=True), \
        generations
    assert len(out["results"]) == 2 and set(generations[-1][1]) < set(generations[0][1])
    assert sorted(r[0] for r in out["results"]) == sorted(generations[-1][1])
