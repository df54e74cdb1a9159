"""hvdrun: launches horovod_cpp jobs with Open MPI, or with Gloo (--gloo: no mpirun, hvdrun
starts the workers and serves their rendezvous), taking Horovod's horovodrun flags.

    hvdrun -np 4 -H a:2,b:2 python train.py
    hvdrun --gloo -np 4 -H a:2,b:2 python train.py
    hvdrun -np 2 ./build/examples/train_digits      # any command, C++ programs too
    python -m horovod_cpp.runner --check-build

and `run(func, num_proc=N, ...)` (Horovod's horovod.run): the same launch from Python, calling
a function on every rank and returning its values (run_func.py).

See docs/running.md.
"""

import os
import shutil
import sys

from . import (checks, cli, elastic_driver, gloo_launch, hosts as hostlib, launch, rendezvous,
               supervise)
from .run_func import run  # Horovod's horovod.runner.run (also horovod_cpp.run)


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
    if cli.is_elastic(args):
        return _launch_elastic(args)
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


def use_gloo(args, env=None):
    """--gloo, else --mpi, else HOROVOD_GLOO=1 in hvdrun's environment selects Gloo."""
    env = os.environ if env is None else env
    if args.gloo is not None:
        return args.gloo
    return env.get("HOROVOD_GLOO", "").strip().lower() in ("1", "true", "yes", "on")


def _launch(args, hosts, np_, source):
    """Checks the hosts (unless --skip-checks) and runs the job, or prints it (--dry-run)."""
    if use_gloo(args):
        return _launch_gloo(args, hosts, np_, source)
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


def gloo_specs(args, places, store_addr, store_port, secret, environ, is_local):
    """The supervise.Spec of every worker: local ones get hvdrun's environment plus the
    contract's variables; remote ones the forwarded variables plus those, through ssh."""
    settings = gloo_launch.job_settings(args)
    cwd = gloo_launch.current_dir()
    remote_base = gloo_launch.remote_env(settings, environ)
    specs = []
    for place in places:
        env = gloo_launch.worker_env(place, store_addr, store_port, secret, settings)
        if is_local(place.host):
            full = dict(environ)
            full.update(env)
            specs.append(supervise.Spec(place, list(args.command), full, False))
        else:
            remote = dict(remote_base)
            remote.update(env)
            argv = gloo_launch.remote_command(args, place.host, remote, args.command, cwd)
            specs.append(supervise.Spec(place, argv, dict(environ), True))
    return specs


def _gloo_probe_command(args):
    """How the pre-launch check reaches a host under --gloo: the workers' own ssh path."""
    settings = gloo_launch.job_settings(args)
    env = gloo_launch.remote_env(settings, os.environ)
    cwd = gloo_launch.current_dir()
    return lambda host, argv: gloo_launch.remote_command(args, host, env, argv, cwd, watch=False)


def _launch_gloo(args, hosts, np_, source):
    """The job without mpirun: the store, the secret, the workers, their exit statuses."""
    places = gloo_launch.place_workers(hosts, np_)
    try:
        store_addr = gloo_launch.store_host(hosts, args.nics, checks.is_local)
    except (ValueError, OSError) as e:
        print(f"hvdrun: cannot choose the rendezvous address: {e}", file=sys.stderr)
        return 2
    secret = gloo_launch.new_secret()
    if args.dry_run:
        specs = gloo_specs(args, places, store_addr, 0, secret, os.environ, checks.is_local)
        print(f"hvdrun: Gloo job, rendezvous store on {store_addr}")
        for spec in specs:
            print(gloo_launch.describe(spec.place, spec.argv, secret))
        return 0
    if args.verbose:
        print(f"hvdrun: {np_} workers on {hostlib.format_hosts(hosts)} (hosts from {source}), "
              "Gloo controller", file=sys.stderr)
    if not args.skip_checks:
        try:
            checks.check_hosts(args, hosts, verbose=args.verbose,
                               remote_command=_gloo_probe_command(args))
        except checks.CheckError as e:
            print(str(e), file=sys.stderr)
            return 3
    try:
        store = rendezvous.StoreServer(secret, host=store_addr,
                                       resolve=gloo_launch.fixed_assignments(places)).start()
    except OSError as e:
        print(f"hvdrun: cannot serve the rendezvous on {store_addr}: {e}", file=sys.stderr)
        return 2
    try:
        for place in places:  # generation 0 written up front; later ones on demand (resolve)
            store.set(f"assign/{gloo_launch.worker_id(place)}/0", gloo_launch.assignment(place))
        specs = gloo_specs(args, places, store_addr, store.port, secret, os.environ,
                           checks.is_local)
        if args.verbose:
            print(f"hvdrun: rendezvous store on {store_addr}:{store.port}", file=sys.stderr)
            for spec in specs:
                print("hvdrun: " + gloo_launch.describe(spec.place, spec.argv, secret),
                      file=sys.stderr)
        try:
            return supervise.run(specs, args.tag_output, args.output_filename,
                                 timestamp=args.prefix_output_with_timestamp)
        except OSError as e:
            print(f"hvdrun: cannot start {args.command[0]!r}: {e.strerror}", file=sys.stderr)
            return 127
    finally:
        store.stop()


def _launch_elastic(args):
    """An elastic job (Gloo controller, hvdrun's driver): hosts from the discovery script,
    else as resolve_hosts gives them. No pre-launch check: hosts come and go."""
    hosts = None
    if not args.host_discovery_script:
        try:
            hosts, _ = resolve_hosts(args)
        except hostlib.HostError as e:
            print(f"hvdrun: {e}", file=sys.stderr)
            return 2
    if args.dry_run:
        where = hostlib.format_hosts(hosts) if hosts else args.host_discovery_script
        print(f"hvdrun: elastic job on {where}, settings "
              f"{elastic_driver.rounds_settings(args, os.environ)}")
        return 0
    return elastic_driver.run(args, hosts, checks.is_local)


def run_commandline():
    sys.exit(main())
