"""hvdrun's command line: Horovod's horovodrun flags, as far as they apply to horovod_cpp."""

import argparse
import sys

from .arg_types import (LOG_LEVELS, STEPS_PER_SAMPLE_MAX, WARMUP_SAMPLES_MAX, int_up_to,
                        non_negative_float, non_negative_int, positive_int)


def make_parser():
    p = argparse.ArgumentParser(
        prog="hvdrun",
        description="Launch a horovod_cpp job (any command: Python or C++) with Open MPI's "
                    "mpirun. Example: hvdrun -np 4 -H a:2,b:2 python train.py",
        epilog="Hosts come from -H, else --hostfile, else the Slurm allocation "
               "(SLURM_JOB_NODELIST, SLURM_TASKS_PER_NODE), else Open MPI's default hostfile "
               "(OMPI_MCA_orte_default_hostfile, as the Kubernetes MPI Operator sets), else "
               "localhost with -np slots. See docs/running.md.")
    p.add_argument("-v", "--version", action="store_true",
                   help="print horovod_cpp's version and exit")
    p.add_argument("-np", "--num-proc", dest="np", type=positive_int,
                   help="number of processes (default: every slot of the hosts)")
    p.add_argument("--config-file", dest="config_file", metavar="FILE",
                   help="Horovod's YAML config file (params, autotune, timeline, stall_check, "
                        "library_options, logging, controller); flags given on the command line "
                        "win over it. Keys that have no effect here are named in a warning; keys "
                        "Horovod does not know are refused (docs/running.md, Config file)")
    p.add_argument("--disable-cache", dest="disable_cache", action="store_true",
                   help="accepted for horovodrun's sake; no effect: hvdrun keeps no cache of its "
                        "pre-launch checks, it runs them every time (see --skip-checks)")
    hosts = p.add_argument_group("hosts")
    hosts.add_argument("-H", "--hosts", dest="hosts",
                       help="host:slots,... e.g. a:4,b:4 (a host alone has one slot)")
    hosts.add_argument("-hostfile", "--hostfile", dest="hostfile",
                       help="file with one 'host slots=N' per line")
    hosts.add_argument("-p", "--ssh-port", dest="ssh_port", type=int,
                       help="ssh port of the remote hosts")
    hosts.add_argument("-i", "--ssh-identity-file", dest="ssh_identity_file",
                       help="ssh private key for the remote hosts")
    hosts.add_argument("--rsh-agent", dest="rsh_agent",
                       help="program used instead of ssh to start commands on other hosts "
                            "(called as ssh is: AGENT [-p PORT] [-i KEY] HOST COMMAND)")
    hosts.add_argument("--network-interface", dest="nics",
                       help="interfaces or subnets (comma separated, e.g. eth0 or "
                            "10.0.0.0/24) used between hosts (Open MPI's TCP traffic; under "
                            "--gloo the store's address and HOROVOD_GLOO_IFACE)")
    hosts.add_argument("--start-timeout", dest="start_timeout", type=non_negative_float,
                       default=30.0,
                       help="seconds allowed for each host's pre-launch check (default 30)")
    hosts.add_argument("--skip-checks", dest="skip_checks", action="store_true",
                       help="do not check reachability and library versions before launching")
    hosts.add_argument("--oversubscribe", action="store_true",
                       help="allow more processes than slots")

    ctl = p.add_argument_group("controller (docs/running.md, Gloo)")
    mode = ctl.add_mutually_exclusive_group()
    mode.add_argument("--gloo", dest="gloo", action="store_true", default=None,
                      help="run with the Gloo controller: hvdrun starts the workers itself "
                           "(ssh for other hosts) and serves their rendezvous; no mpirun "
                           "(also selected by HOROVOD_GLOO=1 in hvdrun's environment)")
    mode.add_argument("--mpi", dest="gloo", action="store_false",
                      help="run with mpirun (the default), also when HOROVOD_GLOO=1 is set")
    ctl.add_argument("--gloo-timeout-seconds", dest="gloo_timeout_seconds",
                     type=non_negative_float,
                     help="HOROVOD_GLOO_TIMEOUT_SECONDS: how long the workers' rendezvous "
                          "may take (default 30)")

    el = p.add_argument_group("elastic (docs/running.md, Elastic jobs; implies --gloo)")
    el.add_argument("--min-np", dest="min_np", type=positive_int,
                    help="fewest workers the job goes on with (default: -np, else 1); with "
                         "fewer it waits up to --elastic-timeout for hosts")
    el.add_argument("--max-np", dest="max_np", type=positive_int,
                    help="most workers the job grows to (default: no bound)")
    el.add_argument("--host-discovery-script", dest="host_discovery_script",
                    help="executable printing the current hosts, one 'host:slots' or 'host' "
                         "per line; run every second")
    el.add_argument("--slots", "--slots-per-host", dest="slots", type=positive_int, default=1,
                    help="slots of a host the discovery script lists without any (default 1)")
    el.add_argument("--reset-limit", dest="reset_limit", type=int,
                    help="most membership changes (resets) the job may go through")
    el.add_argument("--blacklist-cooldown-range", dest="cooldown", type=non_negative_float,
                    nargs=2, metavar=("MIN", "MAX"),
                    help="a host whose worker failed comes back after MIN..MAX seconds, "
                         "doubling at each repeat (default: never)")
    el.add_argument("--elastic-timeout", dest="elastic_timeout", type=non_negative_float,
                    default=600.0,
                    help="seconds to wait for --min-np workers before ending (default 600)")

    tune = p.add_argument_group("tuning (each sets the HOROVOD_* variable of the same meaning)")
    tune.add_argument("--fusion-threshold-mb", dest="fusion_threshold_mb",
                      type=non_negative_float, help="HOROVOD_FUSION_THRESHOLD, in MiB")
    tune.add_argument("--cycle-time-ms", dest="cycle_time_ms", type=non_negative_float,
                      help="HOROVOD_CYCLE_TIME, in milliseconds")
    tune.add_argument("--cache-capacity", dest="cache_capacity", type=int,
                      help="HOROVOD_CACHE_CAPACITY (0 disables the response cache)")
    tune.add_argument("--hierarchical-allreduce", dest="hierarchical_allreduce",
                      action="store_true", help="HOROVOD_HIERARCHICAL_ALLREDUCE=1 (GPU tensors)")
    tune.add_argument("--autotune", action="store_true",
                      help="HOROVOD_AUTOTUNE=1: search fusion threshold and cycle time online")
    tune.add_argument("--autotune-log-file", dest="autotune_log_file",
                      help="HOROVOD_AUTOTUNE_LOG: CSV of every autotune trial")
    tune.add_argument("--autotune-warmup-samples", dest="autotune_warmup_samples", metavar="N",
                      type=int_up_to(WARMUP_SAMPLES_MAX),
                      help="HOROVOD_AUTOTUNE_WARMUP_SAMPLES: samples discarded after each change "
                           "(default 1; used with --autotune)")
    tune.add_argument("--autotune-steps-per-sample", dest="autotune_steps_per_sample", metavar="N",
                      type=int_up_to(STEPS_PER_SAMPLE_MAX),
                      help="HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE: coordination cycles that moved "
                           "allreduce data per sample (default 10; used with --autotune)")

    stall = p.add_argument_group("stall check (rank 0 names tensors some ranks have not "
                                 "submitted)")
    stall.add_argument("--no-stall-check", dest="no_stall_check", action="store_true",
                       help="HOROVOD_STALL_CHECK_DISABLE=1: no stall warnings")
    stall.add_argument("--stall-check-warning-time-seconds",
                       dest="stall_check_warning_time_seconds", metavar="S",
                       type=non_negative_float,
                       help="HOROVOD_STALL_CHECK_TIME_SECONDS: seconds stalled before the warning "
                            "(default 60)")
    stall.add_argument("--stall-check-shutdown-time-seconds",
                       dest="stall_check_shutdown_time_seconds", metavar="S",
                       type=non_negative_float,
                       help="HOROVOD_STALL_SHUTDOWN_TIME_SECONDS: seconds stalled before the job "
                            "shuts down (default 0: never)")

    obs = p.add_argument_group("logging and output")
    obs.add_argument("--verbose", action="store_true",
                     help="print the checks and the exact mpirun command")
    obs.add_argument("--log-level", dest="log_level",
                     choices=list(LOG_LEVELS) + [x.lower() for x in LOG_LEVELS],
                     help="HOROVOD_LOG_LEVEL")
    obs.add_argument("--timeline-filename", dest="timeline_filename",
                     help="HOROVOD_TIMELINE: rank 0 writes a Chrome-trace timeline there")
    obs.add_argument("--timeline-mark-cycles", dest="timeline_mark_cycles", action="store_true",
                     help="HOROVOD_TIMELINE_MARK_CYCLES=1: a marker per coordination cycle on the "
                          "timeline (used with --timeline-filename)")
    obs.add_argument("--no-tag-output", dest="tag_output", action="store_false",
                     help="do not prefix each output line with [job,rank]<stream>")
    obs.add_argument("--output-filename", dest="output_filename",
                     help="directory for each rank's stdout/stderr (mpirun --output-filename)")
    obs.add_argument("-prefix-timestamp", "--prefix-output-with-timestamp",
                     dest="prefix_output_with_timestamp", action="store_true",
                     help="begin each output line with the time it was printed (mpirun "
                          "--timestamp-output; under --gloo hvdrun adds the same prefix)")

    other = p.add_argument_group("other")
    other.add_argument("-cb", "--check-build", dest="check_build", action="store_true",
                       help="print what this build supports and exit")
    other.add_argument("--mpi-args", dest="mpi_args", default="",
                       help="extra arguments for mpirun, in one quoted string")
    other.add_argument("--binding-args", dest="binding_args", metavar="ARGS",
                       help="mpirun's process placement and binding arguments, in one quoted "
                            "string, instead of the default '--bind-to none --map-by slot' "
                            "(e.g. --binding-args=\"--bind-to core --map-by socket\"); mpirun "
                            "only")
    other.add_argument("--tcp", dest="tcp", action="store_true",
                       help="only TCP between processes: NCCL_IB_DISABLE=1 for the workers and, "
                            "under mpirun, --mca pml ob1 --mca btl self,vader,tcp (Gloo already "
                            "uses TCP only)")
    other.add_argument("--dry-run", dest="dry_run", action="store_true",
                       help="print the mpirun command and exit without running it")
    p.add_argument("command", nargs=argparse.REMAINDER,
                   help="the program and its arguments")
    return p


def parse_args(argv):
    parser = make_parser()
    args = parser.parse_args(argv)
    if args.command and args.command[0] == "--":
        args.command = args.command[1:]
    if args.config_file:
        from . import config_file  # PyYAML is needed only here
        try:
            data = config_file.load(args.config_file)
            for warning in config_file.apply(args, data, args.config_file):
                print(f"hvdrun: warning: {warning}", file=sys.stderr)
        except config_file.ConfigError as e:
            parser.error(str(e))
    if not (args.version or args.check_build) and not args.command:
        parser.error("no command to run (e.g. hvdrun -np 2 python train.py)")
    problem = elastic_problem(args)
    if problem:
        parser.error(problem)
    return args


def is_elastic(args):
    """Elastic mode: any of --min-np, --max-np, --host-discovery-script."""
    return (args.min_np is not None or args.max_np is not None
            or args.host_discovery_script is not None)


def elastic_problem(args):
    """What is wrong with the elastic flags given together, or None."""
    elastic = is_elastic(args)
    if not elastic:
        for flag, value in (("--reset-limit", args.reset_limit),
                            ("--blacklist-cooldown-range", args.cooldown)):
            if value is not None:
                return (f"{flag} applies to elastic jobs only (give --min-np, --max-np or "
                        "--host-discovery-script)")
        return None
    if args.gloo is False:
        return "elastic jobs run on the Gloo controller: --mpi cannot be given with them"
    if args.host_discovery_script and (args.hosts or args.hostfile):
        return "give either --host-discovery-script or -H/--hostfile, not both"
    if args.min_np and args.max_np and args.min_np > args.max_np:
        return f"--min-np {args.min_np} is more than --max-np {args.max_np}"
    if args.np and args.min_np and args.np < args.min_np:
        return f"-np {args.np} is less than --min-np {args.min_np}"
    if args.np and args.max_np and args.np > args.max_np:
        return f"-np {args.np} is more than --max-np {args.max_np}"
    if args.reset_limit is not None and args.reset_limit < 0:
        return f"--reset-limit must be >= 0, got {args.reset_limit}"
    if args.cooldown and args.cooldown[0] > args.cooldown[1]:
        return (f"--blacklist-cooldown-range: MIN {args.cooldown[0]:g} is more than "
                f"MAX {args.cooldown[1]:g}")
    if not args.host_discovery_script and not args.hosts and not args.hostfile and not args.np:
        return "an elastic job needs hosts: --host-discovery-script, -H or -np (this host)"
    return None
