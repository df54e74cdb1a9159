"""What this build supports (--check-build) and the checks made before a launch.

Before launching, every remote host is probed through mpirun itself, with the same launch
arguments the job will use (ssh port, rsh agent, interfaces, Slurm): a host that cannot start
a process, or that has another horovod_cpp version, stops the launch with a message naming it.
"""

import importlib.util
import os
import shlex
import socket
import subprocess
import sys
import time

from . import hosts as hostlib
from . import launch

PROBE_TAG = "HVDRUN_PROBE"


def build_info():
    """A dict describing this build: version, frameworks, data planes."""
    import horovod_cpp as hvd

    def importable(name):
        try:
            return importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            return False

    return {
        "version": hvd.__version__,
        "frameworks": {
            "numpy": True,
            "PyTorch": importable("torch") and importable("horovod_cpp.torch"),
            "TensorFlow": importable("tensorflow") and importable("horovod_cpp.tensorflow"),
        },
        "controllers": {"MPI": hvd.mpi_built(), "Gloo": hvd.gloo_built()},
        "operations": {
            "MPI": hvd.mpi_built(),
            "shared memory (CPU, ranks of one host)": True,
            "NCCL": hvd.nccl_built(),
            "CUDA": hvd.cuda_built(),
        },
    }


def format_build_info(info, mpi_version=""):
    def box(flag):
        return "[X]" if flag else "[ ]"

    lines = [f"horovod_cpp v{info['version']}:", "", "Available Frameworks:"]
    lines += [f"    {box(v)} {k}" for k, v in info["frameworks"].items()]
    lines += ["", "Available Controllers:"]
    lines += [f"    {box(v)} {k}" for k, v in info["controllers"].items()]
    lines += ["", "Available Tensor Operations:"]
    lines += [f"    {box(v)} {k}" for k, v in info["operations"].items()]
    if mpi_version:
        lines += ["", f"MPI launcher: {mpi_version}"]
    return "\n".join(lines)


def mpirun_version(mpirun="mpirun"):
    """First line of `mpirun --version`, or a note that mpirun is missing."""
    try:
        out = subprocess.run([mpirun, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"mpirun not usable ({e})"
    first = (out.stdout or out.stderr).strip().splitlines()
    return first[0] if first else "mpirun printed nothing"


def is_local(host):
    """True when `host` names this machine: its address can be bound here."""
    if host in ("localhost", socket.gethostname(), socket.getfqdn()):
        return True
    try:
        infos = socket.getaddrinfo(host, None)
    except socket.gaierror:
        return False
    for family, _, _, _, addr in infos:
        try:
            with socket.socket(family, socket.SOCK_DGRAM) as s:
                s.bind((addr[0], 0))
            return True
        except OSError:
            continue
    return False


def probe_main():
    """Run on each host by the pre-launch check: prints one tagged line."""
    import horovod_cpp as hvd
    print(f"{PROBE_TAG} {socket.gethostname()} {hvd.__version__} "
          f"{os.path.dirname(os.path.abspath(hvd.__file__))}", flush=True)


def parse_probe_line(line):
    """(host name, version, folder) from a probe_main line, or None when it is not one.

    The line comes from another machine: a short, garbled or hostile one is reported as such
    by the caller, never raised as a ValueError.
    """
    parts = line.split(" ", 3)
    if len(parts) != 4 or parts[0] != PROBE_TAG or not all(parts[1:]):
        return None
    return parts[1], parts[2], parts[3]


class CheckError(RuntimeError):
    """A host failed the pre-launch check; the message names it and says why."""


def check_hosts(args, hosts, mpirun="mpirun", python=None, verbose=False, remote_command=None):
    """Probes every remote host in parallel; raises CheckError naming each failing host.

    Unknown host names fail fast, before any process is started. The probe goes through
    mpirun with the job's launch arguments, or through `remote_command(host, argv)` (the argv
    that runs argv on host) when given (hvdrun --gloo: its own ssh path).
    """
    import horovod_cpp as hvd
    python = python or sys.executable
    problems = []
    remote = []
    for host, _ in hosts:
        try:
            socket.getaddrinfo(host, None)
        except socket.gaierror as e:
            problems.append(f"host {host!r}: its name does not resolve ({e.strerror})")
            continue
        if not is_local(host):
            remote.append(host)
    if problems:
        raise CheckError("hvdrun: cannot launch:\n  " + "\n  ".join(problems))
    procs = {}
    probe = [python, "-c", "from horovod_cpp.runner.checks import probe_main; probe_main()"]
    for host in remote:
        if remote_command is not None:
            cmd = remote_command(host, probe)
        else:
            cmd = [mpirun, "-np", "1"] + launch.launch_args(args, [(host, 1)])
            for name in launch.forwarded_names(os.environ, {}):  # as the job will see them
                cmd += ["-x", name]
            cmd += shlex.split(args.mpi_args or "") + probe
        if verbose:
            print("hvdrun: check " + " ".join(shlex.quote(c) for c in cmd), file=sys.stderr)
        procs[host] = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                       stdin=subprocess.DEVNULL, text=True)
    deadline = time.monotonic() + args.start_timeout
    versions = {}
    for host, proc in procs.items():
        try:
            out, err = proc.communicate(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            problems.append(f"host {host!r}: no answer within --start-timeout "
                            f"{args.start_timeout:g} s (is it up and reachable over ssh?)")
            continue
        line = next((ln for ln in out.splitlines() if ln.startswith(PROBE_TAG)), None)
        if proc.returncode != 0 or line is None:
            tail = " | ".join((err or out).strip().splitlines()[-3:]) or "no output"
            problems.append(f"host {host!r}: could not start {python} there "
                            f"(exit {proc.returncode}): {tail}")
            continue
        parsed = parse_probe_line(line)
        if parsed is None:
            problems.append(f"host {host!r}: the check's answer is malformed: {line[:200]!r} "
                            f"(expected '{PROBE_TAG} HOST VERSION FOLDER')")
            continue
        remote_name, version, where = parsed
        versions[host] = version
        if verbose:
            print(f"hvdrun: host {host} ({remote_name!r}) has horovod_cpp {version!r} at "
                  f"{where!r}", file=sys.stderr)
        if version != hvd.__version__:
            problems.append(f"host {host!r}: horovod_cpp {version!r} at {where!r}, but this host "
                            f"has {hvd.__version__}; install the same version everywhere")
    if problems:
        raise CheckError("hvdrun: pre-launch check failed (use --skip-checks to launch "
                         "anyway):\n  " + "\n  ".join(problems))
    return versions
