"""ElasticRayExecutor: an elastic horovod_cpp job whose workers are Ray actors (Horovod's API).

The membership logic is the one `hvdrun`'s elastic mode uses (runner/elastic_rounds.Rounds, a
pure class); this file feeds it from Ray instead of from processes and a discovery script:

- discovery: RayHostDiscovery, Ray's alive nodes, each a host with CPUs // cpus_per_worker
  slots (and, with use_gpu, at most GPUs // gpus_per_worker), polled every
  `discovery_interval_s`: the node's total CPUs, as Horovod counts them, since its free ones
  move with every actor this job starts or ends; max_workers bounds the job
  (docs/running.md, "Elastic jobs on Ray"). With override_discovery=False, the
  settings' own `discovery` object instead (Horovod's way to choose the hosts);
- a worker's exit: the "done" ref of the call running the user's function (a result is an
  exit 0, an exception raised by the function an exit 1, a dead actor (RayActorError) a
  kill);
- readiness: the store's `ready/<id>/<n>` keys, which the workers' init() sets.

Its commands become store keys (assignments, `end,<reason>`, hosts_updated), new actors
pinned to their node (with the elastic contract's variables: HOROVOD_ELASTIC=1,
HOROVOD_CPP_WORKER_ID, no place variables) and ray.kill() of actors. The store is served by
the driver (this process) as under RayExecutor.
"""

import os
import random
import sys
import time
from dataclasses import dataclass

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from ..runner import elastic_driver, elastic_rounds as er, gloo_launch
from ..runner.rendezvous import StoreServer
from . import placement, ray_logger
from .executor import Settings, older_name
from .worker import Worker


@dataclass
class ElasticSettings(Settings):
    """Settings of an elastic job (ElasticRayExecutor.create_settings() makes them): those of
    RayExecutor plus Horovod's elastic ones. min_np / max_np / reset_limit are the defaults of
    the executor's min_workers / max_workers / reset_limit; elastic_timeout_s: how long the job
    waits for at least min_np workers before it fails."""
    min_np: int = 1
    max_np: int = None
    reset_limit: int = None
    elastic_timeout_s: float = 600
    #: The hosts of an executor made with override_discovery=False: any object with
    #: find_available_hosts_and_slots() -> {host: slots} (a RayHostDiscovery subclass, say).
    discovery: object = None


class RayHostDiscovery:
    """The hosts of an elastic job on Ray (Horovod's horovod.ray.elastic.RayHostDiscovery):
    Ray's alive nodes, each with `CPU // cpus_per_slot` slots and, with `use_gpu`, at most
    `GPU // gpus_per_slot`; nodes with no slot are left out. A node's host name is its
    address, or `address~<node id prefix>` for a node whose address another node already
    had (several raylets on one machine, or a machine back at the address of one Ray still
    lists after it was lost). Names never change while the object lives: a renamed host would
    look like one that left. Subclass it and filter find_available_hosts_and_slots() to
    choose the hosts yourself (ElasticRayExecutor(..., override_discovery=False) with
    `settings.discovery` = the object)."""

    def __init__(self, use_gpu=False, cpus_per_slot=1, gpus_per_slot=1):
        if cpus_per_slot <= 0 or (use_gpu and gpus_per_slot <= 0):
            raise ValueError(f"RayHostDiscovery: cpus_per_slot and gpus_per_slot must be > 0, "
                             f"got {cpus_per_slot!r} and {gpus_per_slot!r}")
        self.use_gpu = use_gpu
        self.cpus_per_slot = cpus_per_slot
        self.gpus_per_slot = gpus_per_slot
        self._node_of = {}  # host name -> Ray node id, from the first sighting on

    def find_available_hosts_and_slots(self):
        """{host name: slots} of Ray's alive nodes, in Ray's node order."""
        out = {}
        for node in ray.nodes():
            if not node.get("Alive"):
                continue
            res = node.get("Resources", {})
            slots = int(res.get("CPU", 0) // self.cpus_per_slot)
            if self.use_gpu:
                slots = min(slots, int(res.get("GPU", 0) // self.gpus_per_slot))
            if slots > 0:
                name = self._host_name(node["NodeID"], node["NodeManagerAddress"])
                self._node_of[name] = node["NodeID"]
                out[name] = slots
        return out

    def node_id_of(self, host):
        """The Ray node id of a host this object named, else None."""
        return self._node_of.get(host)

    def _host_name(self, node_id, ip):
        for name, known in self._node_of.items():
            if known == node_id:
                return name
        return ip if ip not in self._node_of else f"{ip}~{node_id[:12]}"


def _end_of(ref):
    """(rc, result, error) of a worker's finished call: rc 0 with its result, 1 when the
    function raised, -9 when the actor died (killed, or its node was lost)."""
    try:
        return 0, ray.get(ref), None
    except ray.exceptions.RayActorError as e:
        return -9, None, e
    except Exception as e:  # the function raised: a RayTaskError wrapping it
        return 1, None, e


class ElasticRayExecutor:
    """An elastic job on the Ray cluster: between `min_workers` and `max_workers` (default: as
    many as the cluster has slots) actors, each reserving `cpus_per_worker` CPUs and, with
    `use_gpu`, `gpus_per_worker` GPUs (default 1). A worker that dies shrinks the job (its
    node is blacklisted, for `cooldown_range` = (lo, hi) seconds or, with None, for good);
    nodes that join grow it. `reset_limit` bounds the membership changes.

    `override_discovery` is Horovod's flag for using Ray's nodes as the host list
    (RayHostDiscovery). With False, `settings.discovery` chooses the hosts: any object with
    find_available_hosts_and_slots() -> {host: slots}. A worker goes to its host's Ray node
    when the discovery named it (a RayHostDiscovery does), else to a node holding the Ray
    resource `node:<host>` (Ray gives every node `node:<its address>`; other names are
    custom resources the nodes were started with).

    The names of Horovod's older ElasticRayExecutor are taken too (its examples under
    examples/ray use them): `cpus_per_slot` and `gpus_per_slot` for `cpus_per_worker` and
    `gpus_per_worker`, and `env_vars` for variables added to every worker's environment (as
    `start(extra_env_vars)`)."""

    #: How often the driver lists Ray's nodes (seconds).
    discovery_interval_s = 1.0
    #: How often the driver looks at the workers and the store (seconds).
    poll_s = 0.05
    #: How long shutdown() lets the workers end horovod_cpp before they are killed.
    close_timeout_s = 10.0

    @staticmethod
    def create_settings(min_np=1, max_np=None, reset_limit=None, elastic_timeout=600,
                        timeout_s=30, ssh_identity_file=None, nics=None,
                        placement_group_timeout_s=100, ssh_str=None, **_ignored):
        """The settings an ElasticRayExecutor takes (Horovod's signature)."""
        return ElasticSettings(timeout_s=timeout_s,
                               placement_group_timeout_s=placement_group_timeout_s,
                               nics=nics, ssh_identity_file=ssh_identity_file, ssh_str=ssh_str,
                               min_np=min_np, max_np=max_np, reset_limit=reset_limit,
                               elastic_timeout_s=elastic_timeout)

    def __init__(self, settings, min_workers=None, max_workers=None, cpus_per_worker=None,
                 use_gpu=False, gpus_per_worker=None, override_discovery=True,
                 reset_limit=None, cooldown_range=None, cpus_per_slot=None,
                 gpus_per_slot=None, env_vars=None):
        cpus_per_worker = older_name("ElasticRayExecutor", "cpus_per_worker", cpus_per_worker,
                                     "cpus_per_slot", cpus_per_slot, 1)
        gpus_per_worker = older_name("ElasticRayExecutor", "gpus_per_worker", gpus_per_worker,
                                     "gpus_per_slot", gpus_per_slot, None)
        if gpus_per_worker is not None and not use_gpu:
            raise ValueError("ElasticRayExecutor: gpus_per_worker is set but use_gpu is False")
        self._settings = settings if settings is not None else ElasticSettings()
        s = self._settings
        min_workers = min_workers if min_workers is not None else getattr(s, "min_np", 1)
        max_workers = max_workers if max_workers is not None else getattr(s, "max_np", None)
        reset_limit = reset_limit if reset_limit is not None else getattr(s, "reset_limit", None)
        if not isinstance(min_workers, int) or min_workers < 1:
            raise ValueError(f"ElasticRayExecutor: min_workers must be a positive int, got "
                             f"{min_workers!r}")
        if max_workers is not None and (not isinstance(max_workers, int)
                                        or max_workers < min_workers):
            raise ValueError(f"ElasticRayExecutor: max_workers must be an int >= min_workers "
                             f"({min_workers}), got {max_workers!r}")
        if cpus_per_worker <= 0:
            raise ValueError(f"ElasticRayExecutor: cpus_per_worker must be > 0, got "
                             f"{cpus_per_worker!r}")
        self._cpus = cpus_per_worker
        self._gpus = (gpus_per_worker or 1) if use_gpu else 0
        if override_discovery:
            self._discovery = RayHostDiscovery(use_gpu, cpus_per_worker, self._gpus or 1)
        else:
            self._discovery = getattr(s, "discovery", None)
            if not callable(getattr(self._discovery, "find_available_hosts_and_slots", None)):
                raise ValueError("ElasticRayExecutor: override_discovery=False needs "
                                 "settings.discovery, an object with "
                                 "find_available_hosts_and_slots() (e.g. a RayHostDiscovery "
                                 f"subclass); got {self._discovery!r}")
        op_timeout = elastic_driver.DEFAULT_OP_TIMEOUT_S
        self._rs = er.Settings(np=None, min_np=min_workers, max_np=max_workers,
                               reset_limit=reset_limit,
                               cooldown=tuple(cooldown_range) if cooldown_range else None,
                               elastic_timeout=getattr(s, "elastic_timeout_s", 600),
                               ready_timeout=op_timeout + 10.0,
                               start_timeout=getattr(s, "timeout_s", None))
        self._store = None
        self._secret = None
        self._env_vars = dict(env_vars or {})
        self._extra_env = {}
        self._actors = {}  # wid -> actor handle, while it should run
        self._done = {}  # done ref -> wid
        self._relay = None  # the running job's ray_logger.LogRelay, with callbacks
        self.rounds = None

    # ---- life cycle ---------------------------------------------------------------------
    def start(self, extra_env_vars=None):
        """Serves the rendezvous store; the workers start in run(). The store listens on the
        driver node's address as Ray reports it (placement.elastic_store_address), so that
        workers on nodes that join later, from any machine of the cluster, reach it (it still
        answers only requests carrying the job's secret); the workers' Gloo devices listen on
        the address by which they reach it. `extra_env_vars` are added to every worker's
        environment."""
        if self._store is not None:
            raise RuntimeError("ElasticRayExecutor.start(): already started")
        self._extra_env = dict(self._env_vars, **(extra_env_vars or {}))
        # The workers' op timeout (how soon survivors notice a loss) sets the ready timeout,
        # as under hvdrun.
        env = dict(os.environ, **self._extra_env)
        op_timeout = elastic_driver._seconds(env, "HOROVOD_CPP_GLOO_OP_TIMEOUT_SECONDS",
                                             elastic_driver.DEFAULT_OP_TIMEOUT_S)
        self._rs = self._rs._replace(ready_timeout=elastic_driver._seconds(
            env, "HOROVOD_CPP_ELASTIC_READY_SECONDS", op_timeout + 10.0))
        addr = placement.elastic_store_address(ray.util.get_node_ip_address())
        self._secret = gloo_launch.new_secret()
        self._store = StoreServer(self._secret, host=addr).start()

    def shutdown(self):
        """Ends the workers still running and stops the store. Idempotent."""
        self._stop_actors()
        if self._store is not None:
            self._store.stop()
            self._store = None

    def _stop_actors(self):
        """Lets each actor end horovod_cpp (its shared memory is unlinked), then kills it."""
        actors, self._actors = list(self._actors.values()), {}
        self._done = {}
        if actors:
            ray.wait([a.close.remote() for a in actors], num_returns=len(actors),
                     timeout=self.close_timeout_s)
            for a in actors:
                ray.kill(a, no_restart=True)

    # ---- discovery ----------------------------------------------------------------------
    def _discover(self):
        """[(host, slots)] from the discovery, hosts without a slot left out."""
        hosts = self._discovery.find_available_hosts_and_slots()
        return [(str(h), int(n)) for h, n in hosts.items() if int(n) > 0]

    def _placement(self, host):
        """Where a worker of `host` runs: its node when the discovery knows the node, else a
        node holding the resource node:<host>."""
        node_of = getattr(self._discovery, "node_id_of", None)
        node = node_of(host) if node_of is not None else None
        if node is not None:
            return {"scheduling_strategy": NodeAffinitySchedulingStrategy(node, soft=False)}
        return {"resources": {f"node:{host}": 0.001}}

    # ---- the job ------------------------------------------------------------------------
    def run(self, worker_fn, callbacks=None, on_membership=None):
        """Runs worker_fn() in every worker of every generation (it calls hvd.init() and its
        training, wrapped in horovod_cpp's elastic run loop); returns the results of the last
        generation's workers in rank order. Raises RuntimeError with the driver's reason when
        the job fails (too few workers for elastic_timeout, the reset limit, a worker's
        error).

        `callbacks` (Horovod's): callables each called here with every dict the workers send
        with ray_logger.log() (the current rank 0's, or every rank's with chief_only=False),
        in order, as they arrive, from every generation; all are delivered before run()
        returns (ray_logger.LogRelay). `on_membership`: callables called here as
        cb(generation, worker_ids) each time a generation is formed."""
        if self._store is None:
            raise RuntimeError("ElasticRayExecutor.run(): call start() first")
        if self.rounds is not None and self._actors:
            raise RuntimeError("ElasticRayExecutor.run(): a job is already running")
        callbacks = ray_logger.check_callbacks("ElasticRayExecutor.run", callbacks)
        on_membership = ray_logger.check_callbacks("ElasticRayExecutor.run(on_membership)",
                                                   on_membership)
        self.rounds = er.Rounds(self._rs, random.SystemRandom())
        self._fn = worker_fn
        results, errors = {}, []
        finish = None
        generation = -1
        next_discovery = 0.0
        last_hosts = None
        self._relay = ray_logger.LogRelay(callbacks) if callbacks else None
        try:
            while finish is None:
                now = time.monotonic()
                cmds = []
                if now >= next_discovery:
                    next_discovery = now + self.discovery_interval_s
                    hosts = self._discover()
                    if hosts != last_hosts:
                        last_hosts = hosts
                        cmds += self.rounds.discovered(hosts, now)
                if self._done:
                    ready, _ = ray.wait(list(self._done), num_returns=len(self._done),
                                        timeout=0)
                    for ref in ready:
                        wid = self._done.pop(ref)
                        self._actors.pop(wid, None)
                        rc, result, error = _end_of(ref)
                        if rc == 0:
                            results[wid] = result
                        elif error is not None:
                            errors.append((wid, error))
                        cmds += self.rounds.exited(wid, rc, now)
                for wid, key in self.rounds.ready_keys():
                    if self._store.check(key):
                        cmds += self.rounds.ready(wid, now)
                cmds += self.rounds.tick(now)
                finish = self._carry_out(cmds, now)
                if self.rounds.generation != generation:
                    generation = self.rounds.generation
                    for cb in on_membership:
                        cb(generation, list(self.rounds.members))
                if finish is None:
                    time.sleep(self.poll_s)
        finally:
            self._stop_actors()
            if self._relay is not None:  # after the workers: what they logged is queued
                self._relay.close()
                self._relay = None
        if finish.rc != 0:
            raise RuntimeError(_failure_message(finish.message, errors))
        return [results[w] for w in self.rounds.members if w in results]

    def _carry_out(self, cmds, now):
        """Does what the rounds decided; returns the Finish command if one came."""
        queue = list(cmds)
        finish = None
        while queue:
            cmd = queue.pop(0)
            if isinstance(cmd, er.SetKey):
                self._store.set(cmd.key, cmd.value)
            elif isinstance(cmd, er.Start):
                self._start_worker(cmd)
            elif isinstance(cmd, er.Terminate):
                actor = self._actors.pop(cmd.wid, None)
                if actor is not None:
                    ray.kill(actor, no_restart=True)
            elif isinstance(cmd, er.Finish):
                finish = finish or cmd
            elif isinstance(cmd, er.Note):
                print(f"ElasticRayExecutor: {cmd.message}", file=sys.stderr, flush=True)
        return finish

    def _start_worker(self, cmd):
        """A new actor on the node of `cmd.host`, given the contract's variables, then the
        user's function; its done ref reports its end."""
        settings = dict(self._extra_env)
        settings.update(self._settings.env())
        # A lost peer must reach the program (HorovodInternalError), never end the process.
        settings.setdefault("HOROVOD_CPP_ABORT_GRACE_SECONDS", "0")
        env = elastic_driver.worker_env(cmd.wid, cmd.host, self._store.address[0],
                                        self._store.port, self._secret, settings, self._rs)
        env.update(elastic_driver.start_env(self.rounds.place_of(cmd.wid)))
        actor = ray.remote(Worker).options(
            num_cpus=self._cpus, num_gpus=self._gpus, max_restarts=0,
            **self._placement(cmd.host)).remote()
        actor.set_env.remote(env)  # actor tasks run in order: before the function
        self._actors[cmd.wid] = actor
        log_queue = self._relay.queue if self._relay is not None else None
        self._done[actor.call.remote(self._fn, [], {}, log_queue)] = cmd.wid

    @property
    def store_address(self):
        """(host, port) of the rendezvous store between start() and shutdown(), else None."""
        return self._store.address if self._store is not None else None

    @property
    def workers(self):
        """{worker id: actor handle} of the workers running now."""
        return dict(self._actors)


def _failure_message(reason, errors):
    lines = [f"ElasticRayExecutor: the elastic job failed: {reason}"]
    for wid, error in errors[:3]:
        cause = getattr(error, "cause", None) or error
        text = str(cause).strip().splitlines()
        lines.append(f"worker {wid}: {type(cause).__name__}: {text[0] if text else ''}")
    return "\n".join(lines)
