"""RayExecutor: a fixed-size horovod_cpp job whose workers are Ray actors (Horovod's API).

start() reserves a placement group, starts one actor per worker in it, asks each actor where
it landed, derives the places (placement.py), serves the Gloo rendezvous store from this
(driver) process with a fresh secret, and gives every actor the contract's variables. Then
run()/execute() call functions on all workers at once; their hvd.init() joins the job, and
the dicts they send with ray_logger.log() reach run()'s callbacks (ray_logger.py).
shutdown() ends horovod_cpp in every actor, ends the actors, frees the placement group and
stops the store.
"""

import time
from dataclasses import dataclass
from typing import Optional

import ray
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from ..runner import gloo_launch
from ..runner.rendezvous import StoreServer
from . import placement, ray_logger
from .worker import Worker


@dataclass
class Settings:
    """The job's settings (RayExecutor.create_settings() makes them).

    timeout_s: how long the workers may take to start and to meet at the store
    (HOROVOD_GLOO_TIMEOUT_SECONDS). placement_group_timeout_s: how long start() waits for Ray
    to reserve the workers' resources. nics: the interface Gloo binds (HOROVOD_GLOO_IFACE).
    ssh_identity_file and ssh_str are accepted for Horovod's signature; Ray starts the
    workers, so no ssh is used.
    """
    timeout_s: float = 30
    placement_group_timeout_s: float = 100
    nics: Optional[str] = None
    ssh_identity_file: Optional[str] = None
    ssh_str: Optional[str] = None

    def env(self):
        """Variables every worker gets besides its place."""
        out = {"HOROVOD_GLOO": "1", "HOROVOD_CONTROLLER": "gloo",
               "HOROVOD_GLOO_TIMEOUT_SECONDS": f"{self.timeout_s:g}"}
        if self.nics:
            out["HOROVOD_GLOO_IFACE"] = self.nics.split(",")[0].strip()
        return out


class WorkerError(RuntimeError):
    """A function failed on one or more workers.

    `rank` is the worker that failed first for a reason of its own (the others then fail with
    ShutdownError or HorovodInternalError in the collectives that lost it), `failures` every
    (rank, error), that one first, `cause` that worker's own exception where Ray could return
    it, and `still_running` the ranks that had not finished when the executor stopped waiting.
    """

    def __init__(self, size, failures, still_running):
        # A worker whose function raised shuts horovod_cpp down (worker.py), so its peers'
        # collectives fail too, and their errors may reach the driver first: those follow.
        failures = sorted(failures, key=lambda f: _is_consequence(f[1]))
        self.rank, first = failures[0]
        self.failures = failures
        self.still_running = still_running
        self.cause = getattr(first, "cause", None) or first
        lines = [f"worker rank {self.rank} (of {size}) failed: "
                 f"{type(self.cause).__name__}: {_first_line(self.cause)}"]
        for rank, err in failures[1:]:
            cause = getattr(err, "cause", None) or err
            lines.append(f"then rank {rank} failed: {type(cause).__name__}: {_first_line(cause)}")
        if still_running:
            lines.append(f"ranks {still_running} were still running")
        lines.append(f"rank {self.rank}'s error:\n{first}")
        super().__init__("\n".join(lines))


#: The errors a worker gets because another worker failed or shut down.
_CONSEQUENCES = ("ShutdownError", "HorovodInternalError")


def _is_consequence(err):
    return type(getattr(err, "cause", None) or err).__name__ in _CONSEQUENCES


def _first_line(err):
    text = str(err).strip()
    return text.splitlines()[0] if text else ""


def older_name(who, name, value, old_name, old_value, default):
    """The value of keyword `name`, which Horovod's older API called `old_name`: whichever of
    the two was given (not both), else `default`."""
    if value is not None and old_value is not None:
        raise ValueError(f"{who}: give {name} or {old_name} (Horovod's older name), not both")
    if value is not None:
        return value
    return old_value if old_value is not None else default


class RayExecutor:
    """A horovod_cpp job on Ray: `num_workers` actors, or `num_hosts` nodes with
    `num_workers_per_host` actors each, each actor reserving `cpus_per_worker` CPUs and, with
    `use_gpu`, `gpus_per_worker` GPUs (default 1). `placement_group_timeout_s` (default: the
    settings') bounds the wait for Ray to reserve them.
    """

    #: After a worker fails, how long run() waits for the others (a collective that lost a
    #: peer fails within HOROVOD_CPP_GLOO_OP_TIMEOUT_SECONDS, default 5) before raising.
    failure_grace_s = 15.0
    #: How long shutdown() lets the workers end horovod_cpp and exit before killing them.
    close_timeout_s = 30.0

    @staticmethod
    def create_settings(timeout_s=30, ssh_identity_file=None, ssh_str=None,
                        placement_group_timeout_s=100, nics=None):
        """The settings a RayExecutor takes (Horovod's signature)."""
        return Settings(timeout_s=timeout_s, placement_group_timeout_s=placement_group_timeout_s,
                        nics=nics, ssh_identity_file=ssh_identity_file, ssh_str=ssh_str)

    def __init__(self, settings, num_workers=None, num_hosts=None, num_workers_per_host=None,
                 cpus_per_worker=None, use_gpu=False, gpus_per_worker=None,
                 placement_group_timeout_s=None, num_slots=None, cpus_per_slot=None,
                 gpus_per_slot=None):
        # Horovod's older names (its examples/ray use them): num_slots, cpus_per_slot,
        # gpus_per_slot.
        num_workers_per_host = older_name("RayExecutor", "num_workers_per_host",
                                          num_workers_per_host, "num_slots", num_slots, 1)
        cpus_per_worker = older_name("RayExecutor", "cpus_per_worker", cpus_per_worker,
                                     "cpus_per_slot", cpus_per_slot, 1)
        gpus_per_worker = older_name("RayExecutor", "gpus_per_worker", gpus_per_worker,
                                     "gpus_per_slot", gpus_per_slot, None)
        if (num_workers is None) == (num_hosts is None):
            raise ValueError("RayExecutor: give num_workers, or num_hosts (with "
                             "num_workers_per_host), not both and not neither")
        for name, value in (("num_workers", num_workers), ("num_hosts", num_hosts),
                            ("num_workers_per_host", num_workers_per_host)):
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValueError(f"RayExecutor: {name} must be a positive int, got {value!r}")
        if gpus_per_worker is not None and not use_gpu:
            raise ValueError("RayExecutor: gpus_per_worker is set but use_gpu is False")
        self._settings = settings if settings is not None else Settings()
        self._num_workers = num_workers
        self._num_hosts = num_hosts
        self._num_workers_per_host = num_workers_per_host
        self._cpus_per_worker = cpus_per_worker
        self._gpus_per_worker = (gpus_per_worker or 1) if use_gpu else 0
        self._pg_timeout_s = (placement_group_timeout_s if placement_group_timeout_s is not None
                              else self._settings.placement_group_timeout_s)
        self._workers = []
        self._places = []
        self._pg = None
        self._store = None

    @property
    def num_workers(self):
        if self._num_hosts is not None:
            return self._num_hosts * self._num_workers_per_host
        return self._num_workers

    @property
    def places(self):
        """Each worker's place (gloo_launch.Place), in rank order; empty before start()."""
        return list(self._places)

    @property
    def store_address(self):
        """(host, port) of the rendezvous store while the job runs, else None."""
        return self._store.address if self._store is not None else None

    # ---- life cycle ---------------------------------------------------------------------
    def start(self, executable_cls=None, executable_args=None, executable_kwargs=None,
              extra_env_vars=None):
        """Starts the workers. `executable_cls(*executable_args, **executable_kwargs)` is then
        built on each (after the variables are set) and handed to execute()'s functions;
        `extra_env_vars` are added to every worker's environment."""
        if self._workers:
            raise RuntimeError("RayExecutor.start(): already started")
        try:
            self._start(executable_cls, list(executable_args or []),
                        dict(executable_kwargs or {}), dict(extra_env_vars or {}))
        except BaseException:
            self.shutdown()
            raise

    def _start(self, executable_cls, args, kwargs, extra_env):
        bundles, strategy, bundle_of = placement.bundles(
            self._num_workers, self._num_hosts, self._num_workers_per_host,
            self._cpus_per_worker, self._gpus_per_worker)
        self._pg = placement_group(bundles, strategy=strategy)
        ready, _ = ray.wait([self._pg.ready()], timeout=self._pg_timeout_s)
        if not ready:
            raise TimeoutError(
                f"RayExecutor: Ray did not reserve {len(bundles)} x {bundles[0]} ({strategy}) "
                f"within {self._pg_timeout_s:g} s; the cluster has {ray.available_resources()} "
                "free")
        actor_cls = ray.remote(Worker)
        self._workers = [
            actor_cls.options(
                num_cpus=self._cpus_per_worker, num_gpus=self._gpus_per_worker,
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    self._pg, placement_group_bundle_index=b)).remote()
            for b in bundle_of]
        described = self._gather([w.describe.remote() for w in self._workers],
                                 timeout_s=self._settings.timeout_s, what="starting")
        infos = [placement.ActorInfo(d[0], d[1], d[2]) for d in described]
        job_places = placement.places(infos)
        addr = placement.store_address(ray.util.get_node_ip_address(), infos)
        secret = gloo_launch.new_secret()
        self._store = StoreServer(secret, host=addr,
                                  resolve=gloo_launch.fixed_assignments(job_places)).start()
        devices = placement.cuda_visible_devices(infos, job_places)
        base = dict(extra_env)
        base.update(self._settings.env())
        envs = []
        for place, dev in zip(job_places, devices):
            env = gloo_launch.worker_env(place, addr, self._store.port, secret, base)
            if dev is not None:
                env["CUDA_VISIBLE_DEVICES"] = dev
            envs.append(env)
        # From here on worker i is rank i.
        order = sorted(range(len(job_places)), key=lambda i: job_places[i].rank)
        self._workers = [self._workers[i] for i in order]
        self._places = [job_places[i] for i in order]
        envs = [envs[i] for i in order]
        self._gather([w.set_env.remote(e) for w, e in zip(self._workers, envs)],
                     timeout_s=self._settings.timeout_s, what="setting the environment")
        self._gather([w.start_executable.remote(executable_cls, args, kwargs)
                      for w in self._workers], what="building executable_cls")

    def shutdown(self):
        """Ends horovod_cpp in every worker, then the workers, the placement group and the
        store. Idempotent; a worker stuck in a function is killed after close_timeout_s."""
        workers, self._workers = self._workers, []
        self._places = []
        if workers:
            deadline = time.monotonic() + self.close_timeout_s
            closing = [w.close.remote() for w in workers]
            # Actor tasks run in order: each actor exits once its close() is done.
            exits = [w.__ray_terminate__.remote() for w in workers]
            for refs in (closing, exits):
                ray.wait(refs, num_returns=len(refs),
                         timeout=max(0.0, deadline - time.monotonic()))
            for w in workers:
                ray.kill(w, no_restart=True)
        if self._pg is not None:
            remove_placement_group(self._pg)
            self._pg = None
        if self._store is not None:
            self._store.stop()
            self._store = None

    # ---- calls --------------------------------------------------------------------------
    def run_remote(self, fn, args=None, kwargs=None):
        """fn(*args, **kwargs) on every worker; returns their object refs, in rank order."""
        self._check_started("run_remote")
        args, kwargs = list(args or []), dict(kwargs or {})
        return [w.call.remote(fn, args, kwargs) for w in self._workers]

    def run(self, fn, args=None, kwargs=None, callbacks=None):
        """fn(*args, **kwargs) on every worker; returns the results in rank order, or raises
        WorkerError naming the rank that failed. `callbacks`: callables each called here with
        every dict the workers send with ray_logger.log() while fn runs (rank 0's, or every
        rank's with chief_only=False), in order, as they arrive; all are delivered before
        run() returns (ray_logger.LogRelay)."""
        self._check_started("run")
        args, kwargs = list(args or []), dict(kwargs or {})
        return self._call_all(lambda w, q: w.call.remote(fn, args, kwargs, q), callbacks, fn)

    def execute(self, fn, callbacks=None):
        """fn(executable) on every worker (the object start() built from executable_cls, or
        None); returns the results in rank order. `callbacks` as in run()."""
        self._check_started("execute")
        return self._call_all(lambda w, q: w.execute.remote(fn, q), callbacks, fn)

    def _call_all(self, submit, callbacks, fn):
        """submit(worker, log queue) on every worker, gathered; with callbacks, a LogRelay
        carries the logged dicts to them for as long as the call runs."""
        callbacks = ray_logger.check_callbacks(f"RayExecutor: {_name(fn)}", callbacks)
        if not callbacks:
            return self._gather([submit(w, None) for w in self._workers], what=_name(fn))
        relay = ray_logger.LogRelay(callbacks)
        try:
            return self._gather([submit(w, relay.queue) for w in self._workers],
                                what=_name(fn))
        finally:
            relay.close()

    def execute_single(self, fn):
        """fn(executable) on the rank 0 worker only; returns its result."""
        self._check_started("execute_single")
        return self._gather([self._workers[0].execute.remote(fn)], what=_name(fn))[0]

    def _check_started(self, method):
        if not self._workers:
            raise RuntimeError(f"RayExecutor.{method}(): call start() first")

    def _gather(self, refs, timeout_s=None, what="the call"):
        """The results of `refs` (one per worker, rank order). The first failure starts a
        grace period for the others; then WorkerError names every rank that failed."""
        rank_of = {ref: r for r, ref in enumerate(refs)}
        results = [None] * len(refs)
        failures = []
        pending = list(refs)
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while pending:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            done, pending = ray.wait(pending, num_returns=1, timeout=left)
            if not done:
                break
            for ref in done:
                try:
                    results[rank_of[ref]] = ray.get(ref)
                except Exception as e:  # a RayTaskError or RayActorError
                    failures.append((rank_of[ref], e))
                    grace = time.monotonic() + self.failure_grace_s
                    deadline = grace if deadline is None else min(deadline, grace)
        still_running = sorted(rank_of[r] for r in pending)
        if failures:
            raise WorkerError(len(refs), failures, still_running)
        if still_running:
            raise TimeoutError(f"RayExecutor: {what}: ranks {still_running} did not answer "
                               f"within {timeout_s:g} s")
        return results


def _name(fn):
    return getattr(fn, "__qualname__", None) or repr(fn)
