"""RayExecutor on a local Ray cluster: collectives with 2 and 3 workers checked element by
element, the digits job (examples/ray/train_digits_ray.py's training function), a worker's
failure, the executable object, and a clean shutdown.

The functions below run inside the actors (conftest sends this module by value). Each worker
checks its own results against what it computes itself, then returns them so that the test
checks them again against the same expectation.
"""

import glob
import importlib.util
import os
import socket
import sys
import time
import warnings

import numpy as np
import pytest

from conftest import NUM_CPUS, NUM_GPUS, skip_without_ray

ray = skip_without_ray()
from horovod_cpp.ray import RayExecutor, WorkerError  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DIGITS = os.path.join(REPO, "examples", "data", "digits.csv.gz")
EXAMPLE = os.path.join(REPO, "examples", "ray", "train_digits_ray.py")


def digits_example():
    """examples/ray/train_digits_ray.py as a module whose functions travel by value."""
    if "train_digits_ray" not in sys.modules:
        spec = importlib.util.spec_from_file_location("train_digits_ray", EXAMPLE)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules["train_digits_ray"] = module
    module = sys.modules["train_digits_ray"]
    ray.cloudpickle.register_pickle_by_value(module)
    return module


def settings():
    # A loaded CI machine starts actors slowly: a generous start timeout.
    return RayExecutor.create_settings(timeout_s=120, placement_group_timeout_s=120)


# ---- run inside the workers ------------------------------------------------------------------
def seeded(k, shape):
    """Rank k's integer data (exact sums whatever the reduction order)."""
    return np.random.default_rng(1000 + k).integers(-1000, 1000, size=shape).astype(np.float64)


def expected(r, n):
    """What rank r of n must get from each collective of collectives_job()."""
    total = sum(seeded(k, (5, 3)) for k in range(n))
    stacked = np.stack([seeded(k, (5, 3)) for k in range(n)])
    return {
        "sum": total,
        "average": total / n,
        "min": stacked.min(axis=0),
        "max": stacked.max(axis=0),
        "allgather": np.concatenate([seeded(k, (k + 1, 3)) for k in range(n)]),
        "broadcast": seeded(n - 1, (4,)),
        "alltoall": np.concatenate([np.full((r + 1, 2), 100.0 * k + r) for k in range(n)]),
        "alltoall_splits": np.full(n, r + 1),
        "reducescatter": sum(seeded(k, (2 * n, 3)) for k in range(n))[2 * r:2 * r + 2],
    }


def collectives_job():
    import horovod_cpp as hvd
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    sends = np.concatenate([np.full((j + 1, 2), 100.0 * r + j) for j in range(n)])
    out, splits = hvd.alltoall(sends, splits=[j + 1 for j in range(n)], name="t.alltoall")
    got = {
        "sum": hvd.allreduce(seeded(r, (5, 3)), op=hvd.Sum, name="t.sum"),
        "average": hvd.allreduce(seeded(r, (5, 3)), op=hvd.Average, name="t.avg"),
        "min": hvd.allreduce(seeded(r, (5, 3)), op=hvd.Min, name="t.min"),
        "max": hvd.allreduce(seeded(r, (5, 3)), op=hvd.Max, name="t.max"),
        "allgather": hvd.allgather(seeded(r, (r + 1, 3)), name="t.allgather"),
        "broadcast": hvd.broadcast(seeded(r, (4,)), root_rank=n - 1, name="t.bcast"),
        "alltoall": out,
        "alltoall_splits": np.asarray(splits),
        "reducescatter": hvd.reducescatter(seeded(r, (2 * n, 3)), op=hvd.Sum, name="t.rs"),
    }
    check_results(got, expected(r, n))
    place = (r, n, hvd.local_rank(), hvd.local_size(), hvd.cross_rank(), hvd.cross_size())
    return place, got


def check_results(got, want):
    assert sorted(got) == sorted(want)
    for key in want:
        assert got[key].shape == want[key].shape, key
        if key == "average":
            np.testing.assert_allclose(got[key], want[key], rtol=1e-12, err_msg=key)
        else:
            np.testing.assert_array_equal(got[key], want[key], err_msg=key)



def log_from_every_node():
    """Every rank sends 3 dicts naming its rank and Ray node (ray_logger, chief_only=False)."""
    from horovod_cpp.ray import ray_logger
    node = ray.get_runtime_context().get_node_id()
    for i in range(3):
        ray_logger.log({"rank": int(os.environ["HOROVOD_RANK"]), "node": node, "i": i},
                       chief_only=False)


def run_two_by_two():
    """RayExecutor(num_hosts=2, num_workers_per_host=2) running collectives_job on a cluster of
    two nodes or more, every result checked, then log_from_every_node (the workers' dicts
    reach the driver from both nodes, each rank's in order): (places as tuples, the store's
    address, the run's results). Used by the multi-node drivers (multinode_driver.py,
    test/multihost/ray_hosts.py)."""
    ex = RayExecutor(settings(), num_hosts=2, num_workers_per_host=2)
    logged = []
    try:
        ex.start()
        places = [tuple(p) for p in ex.places]
        store = ex.store_address[0]
        results = ex.run(collectives_job)
        for r, (_, got) in enumerate(results):
            check_results(got, expected(r, len(results)))
        ex.run(log_from_every_node, callbacks=[logged.append])
    finally:
        ex.shutdown()
    for r in range(4):
        assert [d["i"] for d in logged if d["rank"] == r] == [0, 1, 2], logged
    assert len(logged) == 12 and len({d["node"] for d in logged}) == 2, logged
    return places, store, results

def fail_job(bad_rank):
    import horovod_cpp as hvd
    hvd.init()
    if hvd.rank() == bad_rank:
        raise ValueError(f"rank {bad_rank} fails on purpose")
    # The bad rank never joins: the others' collective fails after the op timeout.
    hvd.allreduce(np.ones(4), name="t.after_failure")
    return "finished"


def reinit_job():
    import horovod_cpp as hvd
    hvd.shutdown()
    hvd.init()
    return hvd.allreduce(np.array([float(hvd.rank())]), op=hvd.Sum, name="t.reinit")[0]


def shm_job():
    """A large allreduce (the shared-memory path on one host); returns the pid and the
    library's shared-memory segments this process maps (unlinked already, still mapped)."""
    import horovod_cpp as hvd
    hvd.init()
    got = hvd.allreduce(np.full(1 << 20, float(hvd.rank() + 1)), op=hvd.Sum, name="t.big")
    want = hvd.size() * (hvd.size() + 1) / 2
    assert np.all(got == want), (got[:4], want)
    with open("/proc/self/maps") as f:
        mapped = sorted({line.split()[5] for line in f if "/dev/shm/hvdcpp." in line})
    return os.getpid(), mapped


class Counter:
    """The executable of test_executable: built once per worker by start()."""

    def __init__(self, start, step=1):
        self.value = start
        self.step = step

    def bump(self):
        import horovod_cpp as hvd
        hvd.init()
        self.value += self.step * hvd.rank()
        return self.value


#: How many dicts logging_job's ranks log in each of its two rounds.
LOGGED = 4


def chief_dict(i):
    """Rank 0's i-th dict in logging_job: nested values, to check that contents arrive whole."""
    return {"i": i, "loss": 1.0 / (i + 1), "tags": ["a", str(i)], "nested": {"step": [i, -i]}}


def logging_job(marker):
    """Every rank logs LOGGED dicts with chief_only=True (only rank 0's are sent); rank 0 then
    waits (up to 60 s) for `marker`, which a driver callback writes on receiving its last one;
    then every rank logs LOGGED dicts with chief_only=False. Returns (rank 0: whether the
    marker came while the job ran, the run's log queue as the worker has it)."""
    import horovod_cpp as hvd
    from horovod_cpp.ray import ray_logger

    hvd.init()
    r = hvd.rank()
    for i in range(LOGGED):
        ray_logger.log(chief_dict(i))
    seen = None
    if r == 0:
        seen = wait_for(lambda: os.path.exists(marker), timeout_s=60)
    for i in range(LOGGED):
        ray_logger.log({"rank": r, "i": i}, chief_only=False)
    return seen, ray_logger._queue


def unconfigured_logging():
    """ray_logger.log() in a run without callbacks: the warnings it gives."""
    from horovod_cpp.ray import ray_logger

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ray_logger.log({"x": 1})
        ray_logger.log({"x": 2})
    return [str(w.message) for w in caught]


# ---- the tests -------------------------------------------------------------------------------
@pytest.mark.parametrize("n", [2, 3])
def test_collectives(ray_cluster, n):
    ex = RayExecutor(settings(), num_workers=n)
    ex.start()
    try:
        assert ex.store_address[0] == "127.0.0.1"  # every worker is on this node
        results = ex.run(collectives_job)
    finally:
        ex.shutdown()
    assert len(results) == n
    for r, (place, got) in enumerate(results):
        assert place == (r, n, r, n, 0, 1)  # one node: local rank = rank, one cross group
        check_results(got, expected(r, n))


def test_places_follow_the_actors_nodes(ray_cluster):
    ex = RayExecutor(settings(), num_workers=3)
    ex.start()
    try:
        places = ex.places
        seen = ex.run(lambda: __import__("os").environ["HOROVOD_CPP_WORKER_ID"])
    finally:
        ex.shutdown()
    assert [p.rank for p in places] == [0, 1, 2]
    assert len({p.host for p in places}) == 1
    assert seen == [f"{places[0].host}:{r}" for r in range(3)]


def test_horovods_older_names_num_slots_and_cpus_per_slot(ray_cluster):
    """Horovod's examples/ray build RayExecutor(settings, num_hosts=..., num_slots=...,
    cpus_per_slot=...): the older names mean num_workers_per_host and cpus_per_worker."""
    with pytest.raises(ValueError, match="give num_workers_per_host or num_slots"):
        RayExecutor(settings(), num_hosts=1, num_workers_per_host=2, num_slots=2)
    with pytest.raises(ValueError, match="give gpus_per_worker or gpus_per_slot"):
        RayExecutor(settings(), num_workers=1, use_gpu=True, gpus_per_worker=1, gpus_per_slot=1)
    ex = RayExecutor(settings(), num_hosts=1, num_slots=2, cpus_per_slot=2)
    assert ex.num_workers == 2
    ex.start()
    try:
        places = ex.places
        cpus = ex.run(lambda: __import__("ray").get_runtime_context().get_assigned_resources())
    finally:
        ex.shutdown()
    assert [(p.rank, p.local_rank, p.local_size) for p in places] == [(0, 0, 2), (1, 1, 2)]
    assert [c.get("CPU") for c in cpus] == [2.0, 2.0], cpus


@pytest.mark.parametrize("n", [2, 3])
def test_digits_job(ray_cluster, n):
    ex = RayExecutor(settings(), num_workers=n)
    ex.start()
    try:
        t0 = time.monotonic()
        # The example's training function (examples/python/train_digits.py's recipe).
        results = ex.run(digits_example().train, args=[DIGITS, 20])
        print(f"digits on {n} workers: {time.monotonic() - t0:.1f} s, "
              f"accuracy {[round(a, 4) for a, _ in results]}")
    finally:
        ex.shutdown()
    for acc, _ in results:
        assert acc >= 0.95
    for _, flat in results[1:]:
        np.testing.assert_array_equal(flat, results[0][1])


def test_worker_failure_names_its_rank(ray_cluster):
    ex = RayExecutor(settings(), num_workers=3)
    ex.start(extra_env_vars={"HOROVOD_CPP_GLOO_OP_TIMEOUT_SECONDS": "2"})
    try:
        with pytest.raises(WorkerError) as info:
            ex.run(fail_job, args=[2])
        err = info.value
        assert err.rank == 2
        assert isinstance(err.cause, ValueError)
        assert "worker rank 2 (of 3) failed: ValueError: rank 2 fails on purpose" in str(err)
        # Rank 2's worker shut horovod_cpp down: the others' collective fails at once.
        others = {rank: type(getattr(e, "cause", e)).__name__ for rank, e in err.failures[1:]}
        assert set(others) == {0, 1}, err
        assert set(others.values()) <= {"ShutdownError", "HorovodInternalError"}, err
        assert err.still_running == []
        # shutdown() + init() in every worker: the job works again.
        assert ex.run(reinit_job) == [3.0, 3.0, 3.0]
    finally:
        ex.shutdown()


def test_executable_and_calls(ray_cluster):
    ex = RayExecutor(settings(), num_workers=2)
    ex.start(executable_cls=Counter, executable_args=[10], executable_kwargs={"step": 5},
             extra_env_vars={"HVD_RAY_TEST_MARK": "seen"})
    try:
        assert ex.execute(lambda c: c.bump()) == [10, 15]
        assert ex.execute(lambda c: c.bump()) == [10, 20]  # the object lives on
        assert ex.execute_single(lambda c: (os.environ["HOROVOD_RANK"], c.value)) == ("0", 10)
        assert ex.run(lambda k: os.environ["HVD_RAY_TEST_MARK"] + k, args=["!"]) == ["seen!"] * 2
        refs = ex.run_remote(lambda base, add=0: base + add + int(os.environ["HOROVOD_RANK"]),
                             args=[100], kwargs={"add": 1})
        assert ray_cluster.get(refs) == [101, 102]
    finally:
        ex.shutdown()
    with pytest.raises(RuntimeError, match="start"):
        ex.run(lambda: 0)


def gpu_view():
    """What a worker sees of its GPUs (no horovod_cpp: the cluster's GPUs are declared, not
    real)."""
    import ray
    return os.environ["CUDA_VISIBLE_DEVICES"], [str(g) for g in ray.get_gpu_ids()]


def test_use_gpu_pins_the_hosts_gpus_in_local_rank_order(ray_cluster):
    ex = RayExecutor(settings(), num_workers=2, use_gpu=True)
    ex.start()
    try:
        views = ex.run(gpu_view)
        local_ranks = [p.local_rank for p in ex.places]
    finally:
        ex.shutdown()
    own = [ids for _, ids in views]
    assert all(len(ids) == 1 for ids in own) and own[0] != own[1], views
    # Both workers see both GPUs, listed by local rank: device local_rank is their own.
    listing = ",".join(ids[0] for ids in own)
    for (visible, ids), local in zip(views, local_ranks):
        assert visible == listing
        assert visible.split(",")[local] == ids[0]
    assert wait_for(lambda: ray_cluster.available_resources().get("GPU") == NUM_GPUS)


def wait_for(cond, timeout_s=30.0):
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_shutdown_leaves_nothing(ray_cluster):
    ex = RayExecutor(settings(), num_workers=2)
    ex.start()
    pids, mapped = zip(*ex.run(shm_job))
    # The job took the shared-memory path: segments named after the first rank's pid.
    assert all(m and all(name.startswith(f"/dev/shm/hvdcpp.{pids[0]}.") for name in m)
               for m in mapped), mapped
    host, port = ex.store_address
    with socket.create_connection((host, port), timeout=5):
        pass  # the store serves while the job runs
    assert all(pid_alive(p) for p in pids)
    ex.shutdown()
    ex.shutdown()  # idempotent
    assert wait_for(lambda: not any(pid_alive(p) for p in pids)), f"workers {pids} still alive"
    assert wait_for(lambda: ray_cluster.available_resources().get("CPU") == NUM_CPUS), \
        ray_cluster.available_resources()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((host, port), timeout=5)
    left = [f for p in pids for f in glob.glob(f"/dev/shm/hvdcpp.{p}.*")]
    assert left == []


def test_resources_beyond_the_cluster_time_out(ray_cluster):
    ex = RayExecutor(settings(), num_workers=NUM_CPUS + 1, placement_group_timeout_s=2)
    with pytest.raises(TimeoutError, match="did not reserve"):
        ex.start()
    assert wait_for(lambda: ray_cluster.available_resources().get("CPU") == NUM_CPUS)


def test_shutdown_kills_a_stuck_worker(ray_cluster):
    ex = RayExecutor(settings(), num_workers=2)
    ex.close_timeout_s = 2.0
    ex.start()
    pids = ex.run(os.getpid)
    ex.run_remote(time.sleep, args=[3600])  # never returns: close() cannot run after it
    t0 = time.monotonic()
    ex.shutdown()
    assert time.monotonic() - t0 < 20
    assert wait_for(lambda: not any(pid_alive(p) for p in pids)), f"workers {pids} still alive"
    assert wait_for(lambda: ray_cluster.available_resources().get("CPU") == NUM_CPUS)


def test_ray_logger_reaches_every_callback_in_order(ray_cluster, tmp_path):
    """ray_logger.log() in the workers, run(callbacks=...) on the driver: rank 0's dicts (and
    with chief_only=False every rank's) reach each callback whole and in order while the job
    runs; a callback that raises is warned about and dropped, the others get everything; the
    run's queue actor is gone after run(); a run without callbacks leaves log() unconfigured."""
    marker = str(tmp_path / "last_chief_dict_delivered")
    first, second, raised = [], [], []

    def mark(d):
        if d == chief_dict(LOGGED - 1):
            open(marker, "w").close()

    def boom(d):
        raised.append(d)
        raise ValueError("boom from a callback")

    ex = RayExecutor(settings(), num_workers=2)
    ex.start()
    try:
        with pytest.warns(RuntimeWarning, match="raised ValueError: boom from a callback"):
            results = ex.run(logging_job, args=[marker],
                             callbacks=[first.append, boom, mark, second.append])
        warned = ex.run(unconfigured_logging)
    finally:
        ex.shutdown()
    assert results[0][0] is True, "rank 0's dicts were not delivered while the job ran"
    assert first == second, (first, second)
    assert raised == first[:1]  # called once, then dropped
    # Each rank's dicts in the order it logged them (the ranks' interleave as they ran): rank
    # 0's chief_only ones then its chief_only=False ones; rank 1's chief_only=False ones only.
    everyone = [[{"rank": r, "i": i} for i in range(LOGGED)] for r in range(2)]
    assert [d for d in first if d.get("rank") != 1] == [chief_dict(i) for i in range(LOGGED)] + \
        everyone[0], first
    assert [d for d in first if d.get("rank") == 1] == everyone[1], first
    assert len(first) == 3 * LOGGED, first
    # Both workers had the run's queue; its actor ended with the run.
    queue = results[1][1]
    assert queue is not None and results[0][1] is not None
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(queue.actor.qsize.remote(), timeout=60)
    # Without callbacks nothing listens: rank 0 warns once, rank 1 (chief_only) sends nothing.
    assert len(warned[0]) == 1 and "not configured" in warned[0][0], warned
    assert warned[1] == [], warned


def test_ray_logger_outside_a_run_warns_once(monkeypatch):
    """No cluster needed: log() in a process no run configured (here, the test's) warns once;
    a callback that is not callable is refused before anything starts."""
    from horovod_cpp.ray import ray_logger

    monkeypatch.setattr(ray_logger, "_warned", False)
    monkeypatch.delenv("HOROVOD_RANK", raising=False)
    with pytest.warns(UserWarning, match="logging is not configured"):
        ray_logger.log({"x": 1})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ray_logger.log({"x": 2})  # once only
    with pytest.raises(TypeError, match="RayExecutor: f: callbacks must be callables"):
        ray_logger.check_callbacks("RayExecutor: f", [print, "not callable"])
