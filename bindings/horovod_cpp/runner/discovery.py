"""Where an elastic job's hosts come from: a fixed list (-H and the like) or Horovod's
--host-discovery-script, run again every second in a thread of its own so that a slow script
never holds up the driver.

The script prints one host per line, `host:slots` or `host` (then --slots slots); blank lines
and `#` comments are skipped. A script that fails, times out or prints a bad line leaves the
last good list in place; the error is kept for the driver's messages.
"""

import subprocess
import threading

from . import hosts as hostlib

#: Seconds between two runs of the discovery script (Horovod's rate).
INTERVAL_S = 1.0
#: A script that runs longer than this counts as failed.
SCRIPT_TIMEOUT_S = 10.0


def parse_discovery(text, default_slots):
    """[(host, slots)] from the script's output, in its order. HostError on a bad line."""
    out = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, slots = line.rpartition(":")
        if not sep:
            name, slots = line, str(default_slots)
        where = f"discovery output line {lineno}"
        hostlib.check_host_name(name, where)
        try:
            n = int(slots)
        except ValueError:
            raise hostlib.HostError(f"{where}: slots of host {name!r} must be an integer, "
                                    f"got {slots!r}") from None
        if n < 1:
            raise hostlib.HostError(f"{where}: host {name!r} has {n} slots; it needs at least 1")
        if any(h == name for h, _ in out):
            raise hostlib.HostError(f"{where}: host {name!r} is listed twice")
        out.append((name, n))
    return out


def run_script(path, default_slots, timeout_s=SCRIPT_TIMEOUT_S):
    """Runs the discovery script once: ([(host, slots)], None) or (None, error text)."""
    try:
        p = subprocess.run([path], capture_output=True, text=True, timeout=timeout_s,
                           stdin=subprocess.DEVNULL, check=False)
    except subprocess.TimeoutExpired:
        return None, f"--host-discovery-script {path} ran longer than {timeout_s:g} s"
    except OSError as e:
        return None, f"--host-discovery-script {path}: cannot run it: {e.strerror}"
    if p.returncode != 0:
        tail = p.stderr.strip().splitlines()[-1:] or [""]
        return None, (f"--host-discovery-script {path} exited with status {p.returncode}"
                      + (f": {tail[0]}" if tail[0] else ""))
    try:
        return parse_discovery(p.stdout, default_slots), None
    except hostlib.HostError as e:
        return None, f"--host-discovery-script {path}: {e}"


class FixedHosts:
    """A host list that never changes (-H, --hostfile, Slurm)."""

    def __init__(self, hosts):
        self._hosts = list(hosts)

    def start(self):
        return self

    def stop(self):
        pass

    def latest(self):
        """(hosts, error): the same list every time."""
        return list(self._hosts), None


class ScriptDiscovery:
    """Runs the script every `interval_s` in a daemon thread; latest() is the last good list
    (None before the first success) and the last error (None after a success)."""

    def __init__(self, path, default_slots, interval_s=INTERVAL_S, log=None):
        self._path = path
        self._slots = default_slots
        self._interval = interval_s
        self._log = log or (lambda msg: None)
        self._lock = threading.Lock()
        self._hosts = None
        self._error = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="hvdrun-discovery", daemon=True)

    def start(self):
        self._poll()  # the first list before the driver places generation 0
        self._thread.start()
        return self

    def stop(self):
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=SCRIPT_TIMEOUT_S + 1)

    def latest(self):
        with self._lock:
            return (None if self._hosts is None else list(self._hosts)), self._error

    def _poll(self):
        hosts, error = run_script(self._path, self._slots)
        with self._lock:
            if error and error != self._error:
                self._log(f"hvdrun: host discovery failed: {error} (keeping the last list)")
            self._error = error
            if hosts is not None:
                self._hosts = hosts

    def _loop(self):
        while not self._stop.wait(self._interval):
            self._poll()
