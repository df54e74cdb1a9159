"""The process side of an elastic job (`hvdrun --min-np/--max-np/--host-discovery-script`):
serves the store, polls discovery, starts and stops workers, reads their ready keys, and
carries out what the membership logic (elastic_rounds.Rounds) decides.

Workers start as under `hvdrun --gloo` (supervise.start: their own session, output copied
line by line; remote ones through ssh or the rsh agent), with the elastic contract's
environment: no place variables, HOROVOD_CPP_WORKER_ID=<host>:<slot>[.<k>], HOROVOD_ELASTIC=1.
Output is tagged with the worker id, `[1,<host>:<slot>]<stdout>:`, since ranks change at every
reset. Every wait is bounded; the job's exit status is 0 when the last generation's workers
all exit 0, else the failure's status (1 for an end decided here), with the reason on stderr.
"""

import os
import random
import signal
import sys
import time

from . import (discovery, elastic_rounds as er, gloo_launch, rendezvous, supervise)

#: Variables of a place. An elastic worker takes its place from the store at every init; these
#: variables, as Horovod's driver sets them, only say where it was started (start_env).
PLACE_VARS = ("HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE",
              "HOROVOD_CROSS_RANK", "HOROVOD_CROSS_SIZE")
#: How often the driver looks at its workers, the store and discovery.
POLL_S = 0.05
#: After the job's end is decided, how long workers told `end,<reason>` get to exit.
END_GRACE_S = 10.0
#: The op timeout's default (HOROVOD_CPP_GLOO_OP_TIMEOUT_SECONDS), for the ready timeout.
DEFAULT_OP_TIMEOUT_S = 5.0


def _seconds(env, name, default):
    try:
        return float(env.get(name, default))
    except ValueError:
        return float(default)


def rounds_settings(args, env):
    """elastic_rounds.Settings from hvdrun's flags and environment."""
    op_timeout = _seconds(env, "HOROVOD_CPP_GLOO_OP_TIMEOUT_SECONDS", DEFAULT_OP_TIMEOUT_S)
    ready = _seconds(env, "HOROVOD_CPP_ELASTIC_READY_SECONDS", op_timeout + 10.0)
    return er.Settings(np=args.np, min_np=args.min_np or args.np or 1, max_np=args.max_np,
                       reset_limit=args.reset_limit,
                       cooldown=tuple(args.cooldown) if args.cooldown else None,
                       elastic_timeout=args.elastic_timeout, ready_timeout=ready,
                       start_timeout=getattr(args, "start_timeout", None))


def worker_env(wid, host, store_addr, store_port, secret, settings, rounds_s):
    """The contract's variables of one elastic worker, on top of the job's settings. Its
    init() waits for an assignment longer than the driver can take to decide one (a ready
    timeout, a peer's start timeout and the min-np wait), so the driver, not a worker
    timeout, ends the job."""
    wait = (rounds_s.elastic_timeout + rounds_s.ready_timeout + (rounds_s.start_timeout or 0)
            + 60)
    env = dict(settings)
    env.update({
        "HOROVOD_GLOO_RENDEZVOUS_ADDR": store_addr,
        "HOROVOD_GLOO_RENDEZVOUS_PORT": str(store_port),
        "HOROVOD_CPP_RENDEZVOUS_SECRET": secret,
        "HOROVOD_HOSTNAME": host,
        "HOROVOD_CPP_WORKER_ID": wid,
        "HOROVOD_ELASTIC": "1",
        "HOROVOD_ELASTIC_TIMEOUT": f"{wait:g}",
    })
    return env


def start_env(place):
    """The place variables of a worker started into `place` (its generation's rank, size, ...),
    as Horovod gives them to every worker it starts: programs read them (e.g. HOROVOD_RANK to
    pick a rank's data directory). They never change in a running process; the library's
    rank() and size() follow the membership."""
    return gloo_launch.place_env(place)


class Driver:
    """One elastic job. `hosts_source`: discovery.FixedHosts or ScriptDiscovery (started);
    `is_local(host)`: whether a host is this machine; `log(msg)`: stderr by default."""

    def __init__(self, args, hosts_source, store_addr, is_local, environ=None, log=None,
                 rng=None):
        self.args = args
        self.environ = dict(os.environ if environ is None else environ)
        self.source = hosts_source
        self.store_addr = store_addr
        self.is_local = is_local
        self.log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
        self.rs = rounds_settings(args, self.environ)
        self.rounds = er.Rounds(self.rs, rng or random.SystemRandom())
        self.secret = gloo_launch.new_secret()
        self.settings = gloo_launch.job_settings(args)
        # A lost peer must reach the program (HorovodInternalError), never end the process.
        if "HOROVOD_CPP_ABORT_GRACE_SECONDS" not in self.environ:
            self.settings["HOROVOD_CPP_ABORT_GRACE_SECONDS"] = "0"
        self.procs = {}  # wid -> supervise._Worker, until reaped
        self.kill_at = {}  # wid -> when a terminated worker gets SIGKILL
        self.store = None
        self._last_hosts = None
        self._finish = None

    # ---- commands from the rounds ----------------------------------------------------------
    def _spec(self, cmd):
        env = worker_env(cmd.wid, cmd.host, self.store_addr, self.store.port, self.secret,
                         self.settings, self.rs)
        env.update(start_env(self.rounds.place_of(cmd.wid)))
        place = gloo_launch.Place(cmd.wid, None, cmd.slot, None, None, None, cmd.host)
        if self.is_local(cmd.host):
            full = {k: v for k, v in self.environ.items() if k not in PLACE_VARS}
            full.update(env)
            return supervise.Spec(place, list(self.args.command), full, False)
        remote = {k: v for k, v in gloo_launch.remote_env(self.settings, self.environ).items()
                  if k not in PLACE_VARS}
        remote.update(env)
        argv = gloo_launch.remote_command(self.args, cmd.host, remote, self.args.command,
                                          gloo_launch.current_dir())
        return supervise.Spec(place, argv, dict(self.environ), True)

    def _run(self, cmds, now):
        """Carries out commands; a start that fails is that worker's exit with 127."""
        queue = list(cmds)
        while queue:
            cmd = queue.pop(0)
            if isinstance(cmd, er.SetKey):
                self.store.set(cmd.key, cmd.value)
            elif isinstance(cmd, er.Start):
                if self.args.verbose:
                    self.log(f"hvdrun: starting worker {cmd.wid} (generation "
                             f"{self.rounds.generation}, {self.rounds.place_of(cmd.wid)})")
                try:
                    self.procs[cmd.wid] = supervise.start(
                        [self._spec(cmd)], self.args.tag_output, self.args.output_filename,
                        self.args.prefix_output_with_timestamp)[0]
                except OSError as e:
                    self.log(f"hvdrun: cannot start worker {cmd.wid}: {e.strerror}")
                    queue += self.rounds.exited(cmd.wid, 127, now)
            elif isinstance(cmd, er.Terminate):
                self._terminate(cmd.wid, now)
            elif isinstance(cmd, er.Finish):
                self._finish = cmd
            elif isinstance(cmd, er.Note):
                self.log(f"hvdrun: {cmd.message}")

    def _reaped(self, wid):
        """Forgets an exited worker once its last output lines are copied."""
        w = self.procs.pop(wid)
        self.kill_at.pop(wid, None)
        for t in w.pumps:
            t.join(timeout=2.0)

    def _terminate(self, wid, now):
        w = self.procs.get(wid)
        if w is None or w.proc.poll() is not None:
            return
        if not self._finish:
            self.log(f"hvdrun: stopping worker {wid} (its host left the list, or it did not "
                     "come to the round in time)")
        supervise._signal_group(w, signal.SIGTERM)
        if w.spec.remote and w.proc.stdin:
            try:
                w.proc.stdin.close()
            except OSError:
                pass
        self.kill_at[wid] = now + supervise.GRACE_S

    # ---- the loop --------------------------------------------------------------------------
    def _step(self, now):
        hosts, _ = self.source.latest()
        if hosts is not None and hosts != self._last_hosts:
            if self.args.verbose:
                self.log(f"hvdrun: discovered hosts {hosts}")
            self._last_hosts = hosts
            self._run(self.rounds.discovered(hosts, now), now)
        for wid, w in list(self.procs.items()):
            rc = w.proc.poll()
            if rc is not None:
                self._reaped(wid)
                if rc != 0 and not self._finish:
                    self.log(f"hvdrun: worker {wid} {supervise._how(rc)}")
                self._run(self.rounds.exited(wid, rc, now), now)
        for wid, key in self.rounds.ready_keys():
            if self.store.check(key):
                self._run(self.rounds.ready(wid, now), now)
        self._run(self.rounds.tick(now), now)
        for wid, t in list(self.kill_at.items()):
            if now >= t and wid in self.procs:
                supervise._signal_group(self.procs[wid], signal.SIGKILL)

    def run(self):
        """Runs the job to its end; returns hvdrun's exit status."""
        self.store = rendezvous.StoreServer(self.secret, host=self.store_addr).start()
        received = []
        old = {s: signal.signal(s, lambda signum, _f: received.append(signum))
               for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            if self.args.verbose:
                self.log(f"hvdrun: elastic job, rendezvous store on "
                         f"{self.store_addr}:{self.store.port}, {self.rs}")
            generation = -1
            while self._finish is None and not received:
                self._step(time.monotonic())
                if self.rounds.generation != generation:
                    generation = self.rounds.generation
                    self.log(f"hvdrun: generation {generation}: {len(self.rounds.members)} "
                             f"workers ({', '.join(self.rounds.members)})")
                if self._finish is None:
                    time.sleep(POLL_S)
            if received:
                signum = received[0]
                self.log(f"hvdrun: got {signal.Signals(signum).name}; stopping "
                         f"{len(self.procs)} workers")
                supervise.stop(list(self.procs.values()), signum, supervise.GRACE_S)
                return 128 + signum
            return self._end()
        finally:
            for s, h in old.items():
                signal.signal(s, h)
            self.store.stop()

    def _end(self):
        """The job's end is decided: workers told to end get END_GRACE_S to exit (they print
        why), then whatever is left is stopped."""
        deadline = time.monotonic() + END_GRACE_S
        while self.procs and time.monotonic() < deadline:
            for wid, w in list(self.procs.items()):
                if w.proc.poll() is not None:
                    self._reaped(wid)
            time.sleep(POLL_S)
        supervise.stop(list(self.procs.values()), signal.SIGTERM, supervise.GRACE_S)
        rc, message = self._finish
        if rc != 0:
            hosts, error = self.source.latest()
            extra = f" (host discovery: {error})" if error else ""
            self.log(f"hvdrun: elastic job failed: {message}{extra}")
        return rc


def run(args, hosts, is_local, log=None):
    """Runs an elastic job on fixed `hosts` ([(host, slots)]) or, when
    args.host_discovery_script is set, on what the script lists; returns the exit status.

    The store listens where gloo_launch.store_host says for the first host list (with a
    discovery script that may later list other hosts, give --network-interface)."""
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    if args.host_discovery_script:
        source = discovery.ScriptDiscovery(args.host_discovery_script, args.slots, log=log)
    else:
        source = discovery.FixedHosts(hosts)
    source.start()
    try:
        try:
            store_addr = gloo_launch.store_host(source.latest()[0] or [], args.nics, is_local)
        except (ValueError, OSError) as e:
            log(f"hvdrun: cannot choose the rendezvous address: {e}")
            return 2
        try:
            driver = Driver(args, source, store_addr, is_local, log=log)
            return driver.run()
        except OSError as e:
            log(f"hvdrun: cannot serve the rendezvous on {store_addr}: {e}")
            return 2
    finally:
        source.stop()
