"""Jobs started by torchrun, or by any launcher of torch's ``env://`` contract.

``torchrun --nproc_per_node=N train.py`` (and Kubeflow's PyTorchJob, or a script that sets
``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT`` itself) starts the processes of a
job without ``mpirun`` or ``hvdrun``. ``init()`` then runs the job on the Gloo controller:

1. It reaches the job's torch store, as ``init_process_group("env://")`` would: torchrun's
   agent store where the agent says so (``TORCHELASTIC_USE_AGENT_STORE``), otherwise one that
   rank 0 serves at ``MASTER_ADDR:MASTER_PORT`` and shares with a later
   ``init_process_group``; the default process group's store if one is already up.
2. Rank 0 starts a horovod_cpp rendezvous store (``runner.rendezvous.StoreServer``) on a free
   port, with a fresh secret, and publishes ``port secret`` under a key of this attempt
   (``TORCHELASTIC_RESTART_COUNT``) in the torch store; every other rank reads it, and reads
   again while the value names no live store (one left by an earlier round of members).
3. It writes the Gloo controller's variables (docs/running.md, "Gloo") into ``os.environ``,
   where the library reads them: the rank and size from torch's, the local and cross ranks
   from ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``GROUP_RANK`` and ``GROUP_WORLD_SIZE`` (torchrun's
   node is the job's host), or, without them, from the host names of the ranks.

The store lives as long as rank 0's process. A later ``init()`` in the same process finds the
variables set and reuses them. Nothing here runs under ``mpirun``, ``hvdrun`` or ``srun`` (their
own variables come first), nor where ``HOROVOD_CPP_TORCHRUN=0``.
"""

import os
import secrets
import socket
import time
from datetime import timedelta

#: Variables of the launchers that start a job their own way: any of them set, no adoption.
_OTHER_LAUNCHERS = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMI_RANK", "PMIX_RANK",
                    "MV2_COMM_WORLD_SIZE", "HOROVOD_RANK", "HOROVOD_GLOO_RENDEZVOUS_ADDR",
                    "HOROVOD_CPP_WORKER_ID")
#: torch's env:// contract: all four set, a job of that launcher.
_TORCH_VARS = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
#: How long a rank waits for rank 0's store address unless HOROVOD_GLOO_TIMEOUT_SECONDS says.
_DEFAULT_WAIT_S = 300.0

#: Rank 0's store, and the torch store it was published in (rank 0 may serve that one too,
#: and must go on serving it until every rank has read the address), kept for the life of the
#: process.
_server = None
_torch_store_kept = None
#: The store torch.distributed hands to the horovod_cpp backend while it creates the default
#: group (torch/process_group.py): that group's rendezvous, used in place of a second one.
given_store = None


def wanted(environ):
    """Whether this process was started by torchrun (or another env:// launcher) and should
    run its job on the Gloo controller from those variables."""
    if environ.get("HOROVOD_CPP_TORCHRUN", "1").strip().lower() in ("0", "false", "no", "off"):
        return False
    if any(environ.get(v) for v in _OTHER_LAUNCHERS):
        return False
    return all(environ.get(v) for v in _TORCH_VARS)


def _int(environ, name, low=0, high=1 << 24):
    text = environ.get(name, "")
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or not low <= value <= high:
        raise ValueError(f"horovod_cpp under torchrun: {name}='{text}' is not an integer from "
                         f"{low} to {high}")
    return value


def _wait_seconds(environ):
    """How long a rank waits for rank 0's store address: HOROVOD_GLOO_TIMEOUT_SECONDS, else
    _DEFAULT_WAIT_S."""
    text = environ.get("HOROVOD_GLOO_TIMEOUT_SECONDS", "")
    if not text:
        return _DEFAULT_WAIT_S
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0.0:
        raise ValueError(f"horovod_cpp under torchrun: HOROVOD_GLOO_TIMEOUT_SECONDS='{text}' is "
                         "not a number of seconds above 0")
    return value


def _place(environ):
    """The Gloo controller's place variables from torch's; also checks them."""
    size = _int(environ, "WORLD_SIZE", 1)
    rank = _int(environ, "RANK", 0, size - 1)
    out = {"HOROVOD_RANK": str(rank), "HOROVOD_SIZE": str(size)}
    host = socket.gethostname()
    names = ("LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE")
    if all(environ.get(n) for n in names):
        local_size = _int(environ, "LOCAL_WORLD_SIZE", 1)
        local_rank = _int(environ, "LOCAL_RANK", 0, local_size - 1)
        nodes = _int(environ, "GROUP_WORLD_SIZE", 1)
        node = _int(environ, "GROUP_RANK", 0, nodes - 1)
        if nodes * local_size == size:
            out.update({"HOROVOD_LOCAL_RANK": str(local_rank),
                        "HOROVOD_LOCAL_SIZE": str(local_size),
                        "HOROVOD_CROSS_RANK": str(node), "HOROVOD_CROSS_SIZE": str(nodes)})
            # torchrun's node is the job's host, also where two agents share a machine: the
            # library groups ranks by this name, which must agree with the local sizes.
            out["HOROVOD_HOSTNAME"] = f"{host}/node{node}" if nodes > 1 else host
            return out
    # No (consistent) node layout: adopt() groups the ranks by host name.
    out["HOROVOD_HOSTNAME"] = host
    return out


def _exchange_hosts(store, key, rank, size, host):
    """Every rank's host name, through the torch store."""
    store.set(f"{key}/host/{rank}", host)
    return [store.get(f"{key}/host/{r}").decode() for r in range(size)]


def _torch_store(environ, wait):
    """The job's torch store: the one being set up for the horovod_cpp backend, else the
    default group's, else the one an earlier init() reached, else the one env:// names."""
    if given_store is not None:
        return given_store
    try:
        import torch.distributed as dist
    except ImportError as e:
        raise RuntimeError(
            "horovod_cpp under torchrun (RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT are set) "
            "reaches the job's store through torch.distributed, which does not import here: "
            "install torch, launch with hvdrun or mpirun, or set HOROVOD_CPP_TORCHRUN=0") from e
    if dist.is_available() and dist.is_initialized():
        get = getattr(dist.distributed_c10d, "_get_default_store", None)
        if get is not None:
            return get()
    if _torch_store_kept is not None:  # an earlier init() of this process reached it
        return _torch_store_kept
    store, _, _ = next(dist.rendezvous("env://", timeout=wait))
    return store


def answers(addr, port, secret):
    """Whether a horovod_cpp store serves at addr:port and takes this secret."""
    from .runner.store_client import Client
    try:
        client = Client(addr, port, secret, timeout_s=5.0)
    except OSError:
        return False
    try:
        return client.check("horovod_cpp/torchrun/alive") in ("OK", "NOT_FOUND")
    except OSError:  # ConnectionError too: the store closes the connection of a wrong secret
        return False
    finally:
        client.close()


def read_address(store, key, addr, wait_s, rank, where, check=answers):
    """(port, secret) of rank 0's store, read from `key` in the torch store. A value that an
    earlier round of the job left there (torchrun keeps its store across a change of members,
    and the key's attempt number need not change) names a store that is gone or has another
    secret: it is read again until rank 0 of this round has replaced it, for up to wait_s."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            value = store.get(key).decode()
        except Exception as e:  # torch raises RuntimeError (or its own subclasses) on timeout
            raise RuntimeError(
                f"horovod_cpp under torchrun: rank {rank} did not get rank 0's rendezvous store "
                f"('{key}' in the torch store at {where}, waiting up to {wait_s:g} s): "
                f"{e}") from e
        port_text, _, secret = value.partition(" ")
        port = int(port_text)
        if check(addr, port, secret):
            return port, secret
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"horovod_cpp under torchrun: rank {rank} found no rendezvous store at "
                f"{addr}:{port} ('{key}' in the torch store at {where}) for {wait_s:g} s: "
                "rank 0 of this round did not publish its own")
        time.sleep(0.1)


def adopt(environ=None):
    """Sets the Gloo controller's variables for a torchrun job (see the module's text);
    returns whether it did. Collective: every rank of the job calls it in init()."""
    global _server, _torch_store_kept
    environ = os.environ if environ is None else environ
    if not wanted(environ):
        return False
    from . import _C
    if not _C.gloo_built():
        raise RuntimeError("horovod_cpp under torchrun runs the job on the Gloo controller, and "
                           "this build has none (hvdrun --check-build); launch with mpirun")
    place = _place(environ)
    rank = int(place["HOROVOD_RANK"])
    wait_s = _wait_seconds(environ)
    store = _torch_store(environ, timedelta(seconds=wait_s))
    _torch_store_kept = store
    key = (f"horovod_cpp/rendezvous/{environ['MASTER_PORT']}/attempt_"
           f"{environ.get('TORCHELASTIC_RESTART_COUNT', '0')}")
    if rank == 0:
        from .runner.rendezvous import StoreServer
        secret = environ.get("HOROVOD_CPP_RENDEZVOUS_SECRET") or secrets.token_hex(16)
        server = StoreServer(secret, host="0.0.0.0").start()
        _server = server
        store.set(key, f"{server.port} {secret}")
        port = server.port
    else:
        port, secret = read_address(store, key, environ["MASTER_ADDR"], wait_s, rank,
                                    f"{environ['MASTER_ADDR']}:{environ['MASTER_PORT']}")
    if "HOROVOD_LOCAL_RANK" not in place:
        size = int(place["HOROVOD_SIZE"])
        # Under this round's store port: no host name of an earlier round is read.
        hosts = _exchange_hosts(store, f"{key}/{port}", rank, size, place["HOROVOD_HOSTNAME"])
        # Numbered as hvdrun's elastic rounds number a membership from its hosts.
        from .runner.elastic_rounds import places_for
        p = places_for([(r, h) for r, h in enumerate(hosts)])[rank]
        place.update({"HOROVOD_LOCAL_RANK": str(p.local_rank),
                      "HOROVOD_LOCAL_SIZE": str(p.local_size),
                      "HOROVOD_CROSS_RANK": str(p.cross_rank),
                      "HOROVOD_CROSS_SIZE": str(p.cross_size)})
    environ.update(place)
    environ.update({
        "HOROVOD_GLOO": "1",
        "HOROVOD_CONTROLLER": "gloo",
        "HOROVOD_GLOO_RENDEZVOUS_ADDR": environ["MASTER_ADDR"],
        "HOROVOD_GLOO_RENDEZVOUS_PORT": str(port),
        "HOROVOD_CPP_RENDEZVOUS_SECRET": secret,
    })
    return True
