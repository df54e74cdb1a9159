"""hvdrun: launches horovod_cpp jobs with Open MPI, taking Horovod's horovodrun flags.

    hvdrun -np 4 -H a:2,b:2 python train.py
    hvdrun -np 2 ./build/examples/train_digits      # any command, C++ programs too
    python -m horovod_cpp.runner --check-build

See docs/running.md.
"""

import os
import shutil
import sys

from . import checks, cli, hosts as hostlib, launch


def resolve_hosts(args, env=None):
    """The host list, from the first source that applies (see hvdrun --help)."""
    env = os.environ if env is None else env
    if args.hosts:
        return hostlib.parse_hosts(args.hosts), "-H"
    if args.hostfile:
        return hostlib.parse_hostfile(args.hostfile), "--hostfile"
    slurm = hostlib.slurm_hosts(env)
    if slurm:
        return slurm, "Slurm"
    default_hostfile = env.get("OMPI_MCA_orte_default_hostfile")
    if default_hostfile and os.path.exists(default_hostfile):
        return hostlib.parse_hostfile(default_hostfile), "OMPI_MCA_orte_default_hostfile"
    if not args.np:
        raise hostlib.HostError("give -np (or hosts with -H/--hostfile, or run inside Slurm)")
    return [("localhost", args.np)], "localhost"


def main(argv=None):
    """Entry point of the `hvdrun` console script; returns the job's exit status."""
    args = cli.parse_args(sys.argv[1:] if argv is None else argv)
    if args.version:
        import horovod_cpp
        print(horovod_cpp.__version__)
        return 0
    if args.check_build:
        print(checks.format_build_info(checks.build_info(), checks.mpirun_version()))
        return 0
    try:
        hosts, source = resolve_hosts(args)
    except hostlib.HostError as e:
        print(f"hvdrun: {e}", file=sys.stderr)
        return 2
    slots = hostlib.total_slots(hosts)
    np_ = args.np or slots
    if np_ > slots and not args.oversubscribe:
        print(f"hvdrun: -np {np_} is more than the {slots} slots of the hosts "
              f"({hostlib.format_hosts(hosts)}, from {source}); add hosts or slots, or pass "
              "--oversubscribe", file=sys.stderr)
        return 2
    key_folder = None
    if args.ssh_identity_file:
        args.ssh_identity_file, key_folder = launch.rsh_safe_identity(args.ssh_identity_file)
    try:
        return _launch(args, hosts, np_, source)
    finally:
        if key_folder:
            shutil.rmtree(key_folder, ignore_errors=True)


def _launch(args, hosts, np_, source):
    """Checks the hosts (unless --skip-checks) and runs the job, or prints it (--dry-run)."""
    cmd = launch.build_command(args, hosts, os.environ)
    if args.dry_run:
        print(" ".join(launch.shlex.quote(c) for c in cmd))
        return 0
    if args.verbose:
        print(f"hvdrun: {np_} processes on {hostlib.format_hosts(hosts)} (hosts from {source})",
              file=sys.stderr)
    if not args.skip_checks:
        try:
            checks.check_hosts(args, hosts, verbose=args.verbose)
        except checks.CheckError as e:
            print(str(e), file=sys.stderr)
            return 3
    return launch.run(cmd, verbose=args.verbose)


def run_commandline():
    sys.exit(main())
