"""`hvdrun --gloo`: the workers' places, environments and commands, without mpirun.

These functions are pure (no process is started here) so they are unit-tested with real
values; supervise.py runs what they build. The variables follow the Gloo contract
(docs/running.md, "Gloo").
"""

import fcntl
import ipaddress
import os
import re
import secrets
import shlex
import socket
import struct
from collections import namedtuple

from . import launch

#: One worker's place in the job (Horovod's meaning of each field).
Place = namedtuple("Place", "rank size local_rank local_size cross_rank cross_size host")


def place_workers(hosts, np_):
    """Places `np_` workers on `hosts` ([(host, slots)]) slot by slot, in host order, as
    horovodrun and `mpirun --map-by slot` do; with more workers than slots (--oversubscribe)
    further rounds go over the hosts again, one slot each.

    Cross rank and size follow Horovod: the workers with one local rank form a cross group,
    ranked in host order (a host with fewer workers is absent from the higher groups).
    """
    counts = [0] * len(hosts)
    left = np_
    for i, (_, slots) in enumerate(hosts):
        counts[i] = min(slots, left)
        left -= counts[i]
    while left > 0:
        for i in range(len(hosts)):
            if left == 0:
                break
            counts[i] += 1
            left -= 1
    places = []
    rank = 0
    for i, (host, _) in enumerate(hosts):
        for local in range(counts[i]):
            cross_rank = sum(1 for c in counts[:i] if c > local)
            cross_size = sum(1 for c in counts if c > local)
            places.append(Place(rank, np_, local, counts[i], cross_rank, cross_size, host))
            rank += 1
    return places


def worker_id(place):
    """The worker's stable name, `host:local_rank` (the contract's HOROVOD_CPP_WORKER_ID)."""
    return f"{place.host}:{place.local_rank}"


def assignment(place, generation=0):
    """The value of the store key `assign/<worker_id>/<n>` for this place."""
    return (f"{place.rank},{place.size},{place.local_rank},{place.local_size},"
            f"{place.cross_rank},{place.cross_size},{generation}")


def fixed_assignments(places):
    """The store's resolver for a fixed job (hvdrun --gloo): `assign/<id>/<n>` is the worker's
    own place at generation n, for every n, so that shutdown() + init() works in every worker
    as often as the program does it (all workers re-initialize together, as under MPI)."""
    by_id = {worker_id(p): p for p in places}

    def resolve(key):
        head, _, n = key.rpartition("/")
        prefix, _, wid = head.partition("/")
        if prefix != "assign" or wid not in by_id or not n.isdigit() or len(n) > 9:
            return None
        return assignment(by_id[wid], int(n))

    return resolve


def new_secret():
    """The job's secret: 64 hex characters (256 random bits)."""
    return secrets.token_hex(32)


def job_settings(args):
    """Variables every worker of the job gets from hvdrun's flags (tuning and Gloo ones)."""
    out = dict(launch.settings_from_args(args))
    out["HOROVOD_GLOO"] = "1"
    out["HOROVOD_CONTROLLER"] = "gloo"
    if args.gloo_timeout_seconds is not None:
        out["HOROVOD_GLOO_TIMEOUT_SECONDS"] = f"{args.gloo_timeout_seconds:g}"
    if args.nics and not _is_subnet(args.nics):
        out["HOROVOD_GLOO_IFACE"] = args.nics.split(",")[0]
    return out


def place_env(place):
    """HOROVOD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE, _CROSS_RANK, _CROSS_SIZE of `place`."""
    return {"HOROVOD_RANK": str(place.rank), "HOROVOD_SIZE": str(place.size),
            "HOROVOD_LOCAL_RANK": str(place.local_rank),
            "HOROVOD_LOCAL_SIZE": str(place.local_size),
            "HOROVOD_CROSS_RANK": str(place.cross_rank),
            "HOROVOD_CROSS_SIZE": str(place.cross_size)}


def worker_env(place, store_addr, store_port, secret, settings):
    """The contract's variables for one worker, on top of the job's settings."""
    env = dict(settings)
    env.update({
        "HOROVOD_GLOO_RENDEZVOUS_ADDR": store_addr,
        "HOROVOD_GLOO_RENDEZVOUS_PORT": str(store_port),
        "HOROVOD_CPP_RENDEZVOUS_SECRET": secret,
        "HOROVOD_HOSTNAME": place.host,
        "HOROVOD_CPP_WORKER_ID": worker_id(place),
    })
    env.update(place_env(place))
    return env


def rsh_prefix(args, host):
    """The argv that runs a command string on `host`: the rsh agent (default ssh) with
    hvdrun's -p/-i flags. BatchMode: a missing key fails at once instead of asking for a
    password nobody will type."""
    agent = shlex.split(args.rsh_agent) if args.rsh_agent else ["ssh", "-o", "BatchMode=yes"]
    if args.ssh_port:
        agent += ["-p", str(args.ssh_port)]
    if args.ssh_identity_file:
        agent += ["-i", args.ssh_identity_file]
    return agent + [host]


def remote_command(args, host, env, command, cwd, watch=True):
    """The argv of ssh (or the rsh agent) starting `command` on `host` with `env` (a dict)
    in `cwd`.

    With `watch` (workers; their stdin must then stay open) the remote shell runs the command
    in the background with stdin from /dev/null and watches the ssh channel: when it closes
    (hvdrun ended the job, or died) the command gets SIGTERM, since ssh without a terminal
    does not pass signals on. The exit status is the command's.
    """
    env_words = " ".join(shlex.quote(f"{k}={v}") for k, v in env.items())
    cmd_words = " ".join(shlex.quote(c) for c in command)
    if not watch:
        return rsh_prefix(args, host) + [f"cd {shlex.quote(cwd)} >/dev/null 2>&1; "
                                         f"exec env {env_words} {cmd_words}"]
    script = (f"cd {shlex.quote(cwd)} >/dev/null 2>&1; exec 3<&0; "
              f"env {env_words} {cmd_words} </dev/null & p=$!; "
              "{ cat <&3 >/dev/null 2>&1; kill -TERM $p 2>/dev/null; } >/dev/null 2>&1 & "
              "wait $p; exit $?")
    return rsh_prefix(args, host) + [script]


def remote_env(settings, environ):
    """What a remote worker gets besides the contract's variables: the forwarded variables
    (the same list mpirun's -x gets, launch.FORWARD_*) and the job's settings."""
    env = {name: environ[name] for name in launch.forwarded_names(environ, settings)}
    env.update(settings)
    return env


def store_host(hosts, nics, is_local):
    """The address the store listens on: 127.0.0.1 when every host is this one; else this
    host's address in --network-interface (an interface name or a subnet); else the address
    this host uses to reach the first remote host."""
    remote = [h for h, _ in hosts if not is_local(h)]
    if not remote:
        return "127.0.0.1"
    if nics:
        for item in nics.split(","):
            addr = _address_in(item.strip())
            if addr:
                return addr
        raise ValueError(f"--network-interface {nics!r}: no address of this host is in it")
    return _route_address(remote[0])


def _is_subnet(text):
    try:
        ipaddress.ip_network(text.split(",")[0], strict=False)
        return True
    except ValueError:
        return False


def _address_in(item):
    """This host's IPv4 address on interface `item`, or in subnet `item`; None if none."""
    if _is_subnet(item):
        net = ipaddress.ip_network(item, strict=False)
        for _, name in socket.if_nameindex():
            addr = _interface_address(name)
            if addr and ipaddress.ip_address(addr) in net:
                return addr
        return None
    return _interface_address(item)


def _interface_address(name):
    """IPv4 address of interface `name` (SIOCGIFADDR), or None."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            packed = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", name.encode()[:15]))
        except OSError:
            return None
    return socket.inet_ntoa(packed[20:24])


def _route_address(host):
    """The source address of the route to `host` (a UDP connect sends nothing)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((socket.gethostbyname(host), 9))
        return s.getsockname()[0]


_SECRET_VALUE = re.compile(r"(\w*_SECRET)=\S+")


def describe(place, cmd, secret):
    """One --verbose/--dry-run line: where a worker goes and how, the secret left out (and the
    value of any other *_SECRET variable it carries, e.g. horovod_cpp.run's)."""
    shown = [_SECRET_VALUE.sub(r"\1=<secret>", c.replace(secret, "<secret>")) for c in cmd]
    return (f"rank {place.rank} on {place.host} (local {place.local_rank}/{place.local_size}, "
            f"cross {place.cross_rank}/{place.cross_size}): "
            + " ".join(shlex.quote(c) for c in shown))


def current_dir():
    try:
        return os.getcwd()
    except OSError:
        return "/"
