"""`horovod_cpp.run(func, ...)`: Horovod's `horovod.run`. Launches a job, as hvdrun does, that
calls `func(*args, **kwargs)` on every rank, and returns the values in rank order.

The function travels to the workers, and their values back, through a rendezvous store served
by this process for the job's length (rendezvous.py: every request carries a fresh secret).
The workers are `python -m horovod_cpp.runner.run_task ADDR PORT`, started by hvdrun's own
launch (mpirun, or Gloo with `use_gloo=True`), so hosts, ssh, network interfaces and elastic
settings mean what they mean to hvdrun (docs/running.md, "From Python: run()").

Pickling: with cloudpickle installed (as Horovod requires) anything cloudpickle takes travels,
lambdas and functions of `__main__` included; without it, `pickle`, so the function must be
importable by the workers under its module's name.
"""

import contextlib
import os
import pickle
import sys
import warnings

from . import checks, gloo_launch, hosts as hostlib, rendezvous

#: The store's secret reaches the workers in this variable (hvdrun forwards HOROVOD_*); the
#: worker removes it from its environment before it calls the function.
ENV_SECRET = "HOROVOD_CPP_RUN_SECRET"
#: How long a worker waits for the function (the store is filled before the launch).
FETCH_TIMEOUT_MS = 60_000
PAYLOAD_KEY = "run/func"


def result_key(rank):
    """Where the worker of `rank` leaves its record."""
    return f"run/result/{rank}"


def dumps(obj):
    """cloudpickle when it is installed (it takes lambdas, closures, `__main__`), else pickle."""
    try:
        import cloudpickle
    except ImportError:
        return pickle.dumps(obj)
    return cloudpickle.dumps(obj)


def _cloudpickle_missing():
    try:
        import cloudpickle  # noqa: F401
    except ImportError:
        return True
    return False


def _payload(func, args, kwargs):
    if _cloudpickle_missing() and getattr(func, "__module__", None) == "__main__":
        raise ValueError(
            f"horovod_cpp.run: {getattr(func, '__qualname__', func)!r} is defined in __main__, "
            "which the workers cannot import; install cloudpickle (as Horovod requires), or "
            "define the function in a module the workers can import")
    try:
        data = dumps((func, tuple(args), dict(kwargs)))
    except Exception as e:  # pickle raises PicklingError, AttributeError or TypeError
        raise ValueError(f"horovod_cpp.run: cannot pickle the function and its arguments: {e}"
                         + (" (install cloudpickle for lambdas and closures)"
                            if _cloudpickle_missing() else "")) from e
    if len(data) > rendezvous.MAX_VALUE:
        raise ValueError(f"horovod_cpp.run: the pickled function and arguments take "
                         f"{len(data)} bytes, more than the {rendezvous.MAX_VALUE} a store value "
                         "holds; pass large data through files instead")
    return data


def _argv(num_proc, hosts, hostfile, options):
    """hvdrun's command line for these settings (before the command)."""
    argv = ["-np", str(num_proc)] if num_proc else []
    if hosts:
        argv += ["-H", hosts]
    if hostfile:
        argv += ["-hostfile", hostfile]
    flags = {"start_timeout": "--start-timeout", "ssh_port": "-p",
             "ssh_identity_file": "-i", "output_filename": "--output-filename",
             "mpi_args": "--mpi-args", "network_interface": "--network-interface",
             "min_num_proc": "--min-np", "max_num_proc": "--max-np", "slots": "--slots",
             "reset_limit": "--reset-limit", "rsh_agent": "--rsh-agent"}
    for name, flag in flags.items():
        if options.get(name) is not None:
            argv += [flag, str(options[name])]
    if options.get("cooldown_range") is not None:
        low, high = options["cooldown_range"]
        argv += ["--blacklist-cooldown-range", str(low), str(high)]
    if options.get("verbose"):
        argv.append("--verbose")
    if options.get("use_gloo"):
        argv.append("--gloo")
    elif options.get("use_mpi"):
        argv.append("--mpi")
    return argv


def _store_address(num_proc, hosts, hostfile, network_interface):
    """The address the store listens on: 127.0.0.1 for a job on this host, else the address
    by which the hosts reach this one (the choice hvdrun --gloo makes for its store)."""
    if hosts:
        listed = hostlib.parse_hosts(hosts)
    elif hostfile:
        listed = hostlib.parse_hostfile(hostfile)
    else:
        listed = [("localhost", num_proc or 1)]
    return gloo_launch.store_host(listed, network_interface, checks.is_local)


@contextlib.contextmanager
def _environment(name, value):
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


def _collect(store, num_proc, elastic):
    """{rank: record} of the ranks that left one; the job's size from rank 0's record when the
    size could change (elastic), else num_proc."""
    records = {}

    def take(rank):
        if store.check(result_key(rank)):
            records[rank] = pickle.loads(store.get(result_key(rank), 0))
        return records.get(rank)

    first = take(0)
    size = first["size"] if (elastic and first is not None) else num_proc
    for rank in range(1, size):
        take(rank)
    return size, records


def _raise_failures(size, records, rc):
    failed = sorted(r for r, rec in records.items() if not rec["ok"])
    if failed:
        rank = failed[0]
        rec = records[rank]
        others = f" (ranks {', '.join(map(str, failed))} raised)" if len(failed) > 1 else ""
        message = (f"horovod_cpp.run: rank {rank} raised {rec['type']}: {rec['message']}"
                   f"{others}\n{rec['traceback']}")
        cause = None
        if rec.get("exception") is not None:
            try:
                cause = pickle.loads(rec["exception"])
            except Exception:  # the exception's class may not be importable here
                cause = None
        raise RuntimeError(message) from cause
    missing = [r for r in range(size) if r not in records]
    if rc != 0 or missing:
        where = f"; ranks without a value: {', '.join(map(str, missing))}" if missing else ""
        raise RuntimeError(f"horovod_cpp.run: the job ended with exit status {rc}{where} "
                           "(see the workers' output above)")


def run(func, args=(), kwargs=None, num_proc=1, min_num_proc=None, max_num_proc=None,
        slots=None, reset_limit=None, cooldown_range=None, hosts=None, hostfile=None,
        start_timeout=None, ssh_port=None, ssh_identity_file=None, disable_cache=None,
        output_filename=None, verbose=None, use_gloo=None, use_mpi=None, mpi_args=None,
        network_interface=None, executable=None, np=None, min_np=None, max_np=None,
        rsh_agent=None):
    """Runs `func(*args, **kwargs)` on every rank of a new job and returns the list of their
    values, index = rank (Horovod's `horovod.run`).

    The job is hvdrun's: `num_proc` processes on `hosts` ("a:2,b:2") or `hostfile`, else on
    this host; `use_gloo=True` for the Gloo controller (no mpirun); `min_num_proc`,
    `max_num_proc`, `slots`, `reset_limit` and `cooldown_range` make it elastic, as the
    hvdrun flags do (the values then come from the ranks of the final membership).
    `executable` is the Python the workers run (default: this one). `disable_cache` is
    accepted and has no effect (hvdrun keeps no check cache). `np`, `min_np` and `max_np` are
    Horovod's deprecated names of the `*_num_proc` arguments. `rsh_agent` (not in Horovod) is
    hvdrun's --rsh-agent: the program used instead of ssh to reach the other hosts.

    Raises RuntimeError when a rank's call raised (the message names the rank and carries its
    traceback; the exception itself is the `__cause__` when it unpickles) or when the job ended
    without every value; ValueError for conflicting arguments or a function that cannot travel.
    """
    del disable_cache
    if np is not None:
        if num_proc == 1:
            num_proc = np
        warnings.warn("np is deprecated, use num_proc instead", DeprecationWarning, stacklevel=2)
    if min_np is not None:
        if min_num_proc is None:
            min_num_proc = min_np
        warnings.warn("min_np is deprecated, use min_num_proc instead", DeprecationWarning,
                      stacklevel=2)
    if max_np is not None:
        if max_num_proc is None:
            max_num_proc = max_np
        warnings.warn("max_np is deprecated, use max_num_proc instead", DeprecationWarning,
                      stacklevel=2)
    if hosts is not None and hostfile is not None:
        raise ValueError("horovod_cpp.run: give hosts or hostfile, not both")
    if use_gloo and use_mpi:
        raise ValueError("horovod_cpp.run: use_gloo and use_mpi cannot both be set")
    if not isinstance(num_proc, int) or num_proc < 1:
        raise ValueError(f"horovod_cpp.run: num_proc must be a positive integer, got {num_proc!r}")
    payload = _payload(func, args, kwargs or {})
    options = dict(start_timeout=start_timeout, ssh_port=ssh_port,
                   ssh_identity_file=ssh_identity_file, output_filename=output_filename,
                   mpi_args=mpi_args, network_interface=network_interface,
                   min_num_proc=min_num_proc, max_num_proc=max_num_proc, slots=slots,
                   reset_limit=reset_limit, cooldown_range=cooldown_range, verbose=verbose,
                   use_gloo=use_gloo, use_mpi=use_mpi, rsh_agent=rsh_agent)
    elastic = any(options[k] is not None for k in
                  ("min_num_proc", "max_num_proc", "slots", "reset_limit", "cooldown_range"))
    try:
        address = _store_address(num_proc, hosts, hostfile, network_interface)
    except (hostlib.HostError, ValueError, OSError) as e:
        raise ValueError(f"horovod_cpp.run: {e}") from e
    secret = gloo_launch.new_secret()
    from . import main  # here: this module is imported by the package's __init__
    store = rendezvous.StoreServer(secret, host=address).start()
    try:
        store.set(PAYLOAD_KEY, payload)
        command = [executable or sys.executable, "-m", "horovod_cpp.runner.run_task", address,
                   str(store.port)]
        with _environment(ENV_SECRET, secret):
            try:
                rc = main(_argv(num_proc, hosts, hostfile, options) + command)
            except SystemExit as e:  # argparse refused a setting (its message is printed)
                raise ValueError(f"horovod_cpp.run: hvdrun refused the settings (exit status "
                                 f"{e.code}; its message is above)") from None
        size, records = _collect(store, num_proc, elastic)
    finally:
        store.stop()
    _raise_failures(size, records, rc)
    return [records[r]["value"] for r in range(size)]
