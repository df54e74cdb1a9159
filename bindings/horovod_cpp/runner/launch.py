"""Turns hvdrun's options into one Open MPI mpirun command (a pure function), and runs it."""

import os
import shlex
import signal
import subprocess
import sys
import tempfile

from . import hosts as hostlib

#: Variables forwarded to every rank when they are set (names, then prefixes).
FORWARD_NAMES = ("PATH", "PYTHONPATH", "LD_LIBRARY_PATH", "VIRTUAL_ENV", "OMP_NUM_THREADS")
FORWARD_PREFIXES = ("HOROVOD_", "CUDA_", "NCCL_", "NVIDIA_", "UCX_", "PYTORCH_", "TORCH_")


def settings_from_args(args):
    """The variables the tuning/stall/logging flags (and --tcp) set, in a stable order; every
    launch path (mpirun's -x, Gloo and elastic workers' environments) passes the same ones."""
    out = {}
    if args.fusion_threshold_mb is not None:
        out["HOROVOD_FUSION_THRESHOLD"] = str(int(args.fusion_threshold_mb * 1024 * 1024))
    if args.cycle_time_ms is not None:
        out["HOROVOD_CYCLE_TIME"] = f"{args.cycle_time_ms:g}"
    if args.cache_capacity is not None:
        out["HOROVOD_CACHE_CAPACITY"] = str(args.cache_capacity)
    if args.hierarchical_allreduce:
        out["HOROVOD_HIERARCHICAL_ALLREDUCE"] = "1"
    if args.autotune:
        out["HOROVOD_AUTOTUNE"] = "1"
    if args.autotune_log_file:
        out["HOROVOD_AUTOTUNE_LOG"] = os.path.abspath(args.autotune_log_file)
    if args.autotune_warmup_samples is not None:
        out["HOROVOD_AUTOTUNE_WARMUP_SAMPLES"] = str(args.autotune_warmup_samples)
    if args.autotune_steps_per_sample is not None:
        out["HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE"] = str(args.autotune_steps_per_sample)
    if args.no_stall_check:
        out["HOROVOD_STALL_CHECK_DISABLE"] = "1"
    if args.stall_check_warning_time_seconds is not None:
        out["HOROVOD_STALL_CHECK_TIME_SECONDS"] = f"{args.stall_check_warning_time_seconds:g}"
    if args.stall_check_shutdown_time_seconds is not None:
        out["HOROVOD_STALL_SHUTDOWN_TIME_SECONDS"] = f"{args.stall_check_shutdown_time_seconds:g}"
    if args.log_level:
        out["HOROVOD_LOG_LEVEL"] = args.log_level.lower()
    if args.timeline_filename:
        out["HOROVOD_TIMELINE"] = os.path.abspath(args.timeline_filename)
    if args.timeline_mark_cycles:
        out["HOROVOD_TIMELINE_MARK_CYCLES"] = "1"
    if args.tcp:  # as horovodrun --tcp: NCCL keeps off InfiniBand too
        out["NCCL_IB_DISABLE"] = "1"
    return out


def forwarded_names(env, settings):
    """Names of the variables passed to the ranks with -x (set by flags or inherited)."""
    names = []
    for name in sorted(env):
        if name in settings:
            continue
        if name in FORWARD_NAMES or name.startswith(FORWARD_PREFIXES):
            names.append(name)
    return names


def rsh_safe_identity(path):
    """A path to the ssh key `path` that reaches ssh as one argument, and a folder to remove.

    Open MPI splits plm_rsh_args at spaces, with no quoting, so a key path holding whitespace
    would reach ssh as several arguments (the key not found, the rest taken as the command).
    Such a path is replaced by a link to it, in a fresh folder only this user can enter
    (mkdtemp: 0700) whose path has no whitespace. Returns (path, None) when the path is fine
    as it is, else (link, folder): the caller removes the folder after the job.
    """
    if not any(c.isspace() for c in path):
        return path, None
    folder = tempfile.mkdtemp(prefix="hvdrun-key.")
    if any(c.isspace() for c in folder):  # TMPDIR itself has whitespace
        os.rmdir(folder)
        folder = tempfile.mkdtemp(prefix="hvdrun-key.", dir="/tmp")
    link = os.path.join(folder, "identity")
    os.symlink(os.path.abspath(path), link)
    return link, folder


def launch_args(args, hosts):
    """mpirun arguments that decide where and how processes start (used by the checks too)."""
    out = ["-H", hostlib.format_hosts(hosts)]
    rsh = []
    if args.ssh_port:
        rsh += ["-p", str(args.ssh_port)]
    if args.ssh_identity_file:
        rsh += ["-i", args.ssh_identity_file]
    if rsh:
        out += ["--mca", "plm_rsh_args", " ".join(rsh)]
    if args.rsh_agent:
        out += ["--mca", "plm_rsh_agent", args.rsh_agent]
    if args.nics:
        out += ["--mca", "btl_tcp_if_include", args.nics, "--mca", "oob_tcp_if_include",
                args.nics]
    if os.geteuid() == 0:
        out.append("--allow-run-as-root")
    return out


def build_command(args, hosts, env, mpirun="mpirun"):
    """The full mpirun command for the job.

    Defaults: ranks are placed slot by slot (--map-by slot) and not bound to cores
    (--bind-to none: each rank runs a background thread beside the training thread, as in
    Horovod), both replaced by --binding-args when given; every line is tagged with its rank;
    oversubscription only with --oversubscribe. --tcp restricts Open MPI to its TCP transport
    between processes (pml ob1; btl self, vader for the same host, tcp).
    """
    np_ = args.np if args.np else hostlib.total_slots(hosts)
    settings = settings_from_args(args)
    cmd = [mpirun, "-np", str(np_)] + launch_args(args, hosts)
    if args.binding_args:
        cmd += shlex.split(args.binding_args)
    else:
        cmd += ["--bind-to", "none", "--map-by", "slot"]
    if args.tcp:
        cmd += ["--mca", "pml", "ob1", "--mca", "btl", "self,vader,tcp"]
    if args.tag_output:
        cmd.append("--tag-output")
    if args.prefix_output_with_timestamp:
        cmd.append("--timestamp-output")
    if args.oversubscribe:
        cmd.append("--oversubscribe")
    if args.output_filename:
        cmd += ["--output-filename", args.output_filename]
    for name, value in settings.items():
        cmd += ["-x", f"{name}={value}"]
    for name in forwarded_names(env, settings):
        cmd += ["-x", name]
    cmd += shlex.split(args.mpi_args or "")
    cmd += list(args.command)
    return cmd


def run(cmd, verbose=False):
    """Runs mpirun in the foreground and returns the job's exit status.

    Ctrl-C and SIGTERM are passed on to mpirun (which stops every rank); an exception raised
    while waiting (a caller's time limit) ends the job before it propagates; a job killed by a
    signal returns 128 + the signal number, as shells do.
    """
    if verbose:
        print("hvdrun: " + " ".join(shlex.quote(c) for c in cmd), file=sys.stderr, flush=True)
    try:
        proc = subprocess.Popen(cmd)
    except FileNotFoundError:
        print(f"hvdrun: cannot run {cmd[0]!r}: not found. Install Open MPI (Debian: openmpi-bin) "
              "or put its mpirun on PATH.", file=sys.stderr)
        return 127

    def forward(signum, _frame):
        proc.send_signal(signum)

    old = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        rc = proc.wait()
    except BaseException:
        # The caller gave up inside the wait (horovod_cpp.run under a time limit, say): the job
        # must not outlive it. mpirun stops every rank on SIGTERM.
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        raise
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    return 128 - rc if rc < 0 else rc
