"""Runs the workers of an `hvdrun --gloo` job and decides its exit status.

Each worker is a child process in a session of its own (so that it and whatever it starts can
be signalled together): the program itself for a worker on this host, ssh (or the rsh agent)
for a remote one. Their output is copied line by line, tagged `[1,<rank>]<stdout>:` as
mpirun's --tag-output tags it (and, with --prefix-output-with-timestamp, preceded by the time
as mpirun's --timestamp-output writes it: `Sun Nov 29 04:02:16 2026[1,0]<stdout>:`). The
first worker to fail ends the job: the others get SIGTERM, then SIGKILL after a grace period,
and hvdrun exits with the failed worker's status. Ctrl-C and SIGTERM to hvdrun end every
worker the same way.
"""

import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from collections import namedtuple

#: What to start for one worker: its place (gloo_launch.Place), argv, full environment, and
#: whether it is remote (an ssh channel whose closing stops the worker).
Spec = namedtuple("Spec", "place argv env remote")

#: Seconds between SIGTERM and SIGKILL when the job is ended.
GRACE_S = 5.0
_POLL_S = 0.05


class _Worker:
    def __init__(self, spec, proc):
        self.spec = spec
        self.proc = proc
        self.pumps = []


def _status(rc):
    """A shell's view of a child's status: 128 + N for death by signal N."""
    return 128 - rc if rc < 0 else rc


def _how(rc):
    if rc < 0:
        try:
            name = signal.Signals(-rc).name
        except ValueError:
            name = f"signal {-rc}"
        return f"was killed by {name}"
    return f"exited with status {rc}"


class _Output:
    """Copies the workers' lines to hvdrun's stdout/stderr (tagged or not) or to files."""

    def __init__(self, tag, folder, timestamp=False):
        self._tag = tag
        self._folder = folder
        self._timestamp = timestamp
        self._lock = threading.Lock()

    def _stamp(self, name, tagged):
        """The time prefix of a line, as mpirun --timestamp-output writes it (C's ctime(), then
        `<stream>:` when no rank tag follows: untagged output and the files of
        --output-filename); empty without --prefix-output-with-timestamp."""
        if not self._timestamp:
            return b""
        return (time.ctime() + ("" if tagged else f"<{name}>:")).encode()

    def pump(self, rank, name, stream):
        target = getattr(sys, name).buffer
        sink = None
        if self._folder:
            d = os.path.join(self._folder, "1", f"rank.{rank}")
            os.makedirs(d, exist_ok=True)
            sink = open(os.path.join(d, name), "wb")  # pylint: disable=consider-using-with
        prefix = f"[1,{rank}]<{name}>:".encode() if self._tag else b""
        try:
            for line in iter(stream.readline, b""):
                if not line.endswith(b"\n"):
                    line += b"\n"
                if sink:
                    sink.write(self._stamp(name, False) + line)
                    sink.flush()
                    continue
                with self._lock:
                    target.write(self._stamp(name, self._tag) + prefix + line)
                    target.flush()
        except (OSError, ValueError):
            pass  # our stdout closed, or the job is being torn down
        finally:
            stream.close()
            if sink:
                sink.close()


def _signal_group(worker, signum):
    try:
        os.killpg(worker.proc.pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def _parent_death_signal():
    """A preexec_fn that has the child get SIGTERM if hvdrun dies (even by SIGKILL), so no
    worker outlives its launcher (Linux: PR_SET_PDEATHSIG); None where it is not available."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None

    def set_it():
        prctl(1, signal.SIGTERM, 0, 0, 0)  # 1 = PR_SET_PDEATHSIG

    return set_it


def start(specs, tag_output=True, output_folder=None, timestamp=False):
    """Starts every worker; returns them. A worker that cannot be started at all (no such
    program) raises OSError after the ones already started are killed. `timestamp`: each line
    begins with the time it was copied (--prefix-output-with-timestamp)."""
    out = _Output(tag_output, output_folder, timestamp)
    workers = []
    preexec = _parent_death_signal()
    try:
        for spec in specs:
            proc = subprocess.Popen(
                spec.argv, env=spec.env, start_new_session=True, preexec_fn=preexec,
                stdin=subprocess.PIPE if spec.remote else subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            w = _Worker(spec, proc)
            for name, stream in (("stdout", proc.stdout), ("stderr", proc.stderr)):
                t = threading.Thread(target=out.pump, args=(spec.place.rank, name, stream),
                                     daemon=True)
                t.start()
                w.pumps.append(t)
            workers.append(w)
    except OSError:
        stop(workers, signal.SIGKILL, 0)
        raise
    return workers


def stop(workers, signum=signal.SIGTERM, grace_s=GRACE_S):
    """Sends `signum` to every running worker's group (and closes remote ones' channels),
    waits up to `grace_s`, then SIGKILLs what is left and reaps everything."""
    for w in workers:
        if w.proc.poll() is None:
            _signal_group(w, signum)
        if w.spec.remote and w.proc.stdin:
            try:
                w.proc.stdin.close()
            except OSError:
                pass
    deadline = time.monotonic() + grace_s
    while any(w.proc.poll() is None for w in workers) and time.monotonic() < deadline:
        time.sleep(_POLL_S)
    for w in workers:
        if w.proc.poll() is None:
            _signal_group(w, signal.SIGKILL)
    for w in workers:
        w.proc.wait()
        # Whatever the worker's group left holding its pipes died with SIGKILL above; a
        # process that left the group could keep them open, so the wait is bounded.
        for t in w.pumps:
            t.join(timeout=2.0)


def run(specs, tag_output=True, output_folder=None, log=None, grace_s=GRACE_S,
        timestamp=False):
    """Starts the workers and waits for the job; returns hvdrun's exit status.

    All workers exiting 0 is 0. The first non-zero exit ends the job (the rest are stopped)
    and is returned; SIGINT/SIGTERM to hvdrun (from the moment the first worker starts) stop
    the workers with the same signal and return 128 + its number. OSError: a worker could not
    be started (those already started are killed).
    """
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    received = []

    def on_signal(signum, _frame):
        received.append(signum)

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        workers = start(specs, tag_output, output_folder, timestamp)
        failed = None
        while not received:
            running = 0
            for w in workers:
                rc = w.proc.poll()
                if rc is None:
                    running += 1
                elif rc != 0 and failed is None:
                    failed = (w, rc)
            if failed or running == 0:
                break
            time.sleep(_POLL_S)
        if received:
            signum = received[0]
            log(f"hvdrun: got {signal.Signals(signum).name}; stopping "
                f"{sum(w.proc.poll() is None for w in workers)} workers")
            stop(workers, signum, grace_s)
            return 128 + signum
        if failed:
            w, rc = failed
            others = [x for x in workers if x.proc.poll() is None]
            hint = " (255 from ssh: could the host be reached?)" if w.spec.remote and rc == 255 \
                else ""
            log(f"hvdrun: rank {w.spec.place.rank} on host {w.spec.place.host} {_how(rc)}"
                f"{hint}; stopping the other {len(others)} running workers")
            stop(workers, signal.SIGTERM, grace_s)
            return _status(rc)
        stop(workers, signal.SIGTERM, 0)  # reaps and drains output; everything has exited
        return 0
    finally:
        for s, h in old.items():
            signal.signal(s, h)
