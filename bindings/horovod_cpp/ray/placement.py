"""Where a RayExecutor's workers go and what each one is told (pure: no Ray import here).

Ray decides the node of every actor; these functions turn the nodes the actors landed on into
the places of the Gloo contract (rank, local and cross ranks, host name), choose the store's
address, and the CUDA devices each worker sees. They are unit-tested without a cluster.
"""

from collections import namedtuple

from ..runner import gloo_launch

#: What an actor reports about where it runs: Ray's node id, that node's IP address and the
#: GPU ids Ray gave the actor (strings, as ray.get_gpu_ids() gives them; empty without GPUs).
ActorInfo = namedtuple("ActorInfo", "node_id ip gpu_ids")


def bundles(num_workers, num_hosts, num_workers_per_host, cpus_per_worker, gpus_per_worker):
    """The placement group for a job: (bundles, strategy, bundle index of worker i).

    With `num_workers`, one bundle per worker, packed onto as few nodes as possible (PACK):
    the workers share hosts and so shared memory. With `num_hosts`, one bundle per host holding
    `num_workers_per_host` workers, each bundle on a different node (STRICT_SPREAD): the job
    has exactly that shape or does not start.
    """
    def bundle(workers):
        b = {"CPU": float(cpus_per_worker * workers)}
        if gpus_per_worker:
            b["GPU"] = float(gpus_per_worker * workers)
        return b

    if num_hosts is None:
        return [bundle(1)] * num_workers, "PACK", list(range(num_workers))
    n = num_hosts * num_workers_per_host
    return ([bundle(num_workers_per_host)] * num_hosts, "STRICT_SPREAD",
            [i // num_workers_per_host for i in range(n)])


def host_names(infos):
    """A host name per actor: the node's IP, or `ip~<node id prefix>` where several Ray nodes
    share one IP (several raylets on one machine), so that every Ray node is its own host."""
    nodes_of_ip = {}
    for info in infos:
        nodes_of_ip.setdefault(info.ip, set()).add(info.node_id)
    return [info.ip if len(nodes_of_ip[info.ip]) == 1 else f"{info.ip}~{info.node_id[:12]}"
            for info in infos]


def places(infos):
    """The places of the actors described by `infos` (in actor order): a list of
    gloo_launch.Place, one per actor, in the actors' order.

    Hosts are ordered by their first actor, and each host's actors take its local ranks in
    actor order; ranks then follow gloo_launch.place_workers (host by host, as horovodrun),
    so local and cross ranks mean what they mean under `hvdrun --gloo`.
    """
    names = host_names(infos)
    order = []
    members = {}
    for i, name in enumerate(names):
        if name not in members:
            order.append(name)
            members[name] = []
        members[name].append(i)
    hosts = [(name, len(members[name])) for name in order]
    placed = gloo_launch.place_workers(hosts, len(infos))
    out = [None] * len(infos)
    for p in placed:
        out[members[p.host][p.local_rank]] = p
    return out


def store_address(driver_ip, infos):
    """The address the driver's store listens on: loopback when every worker runs on the
    driver's node (nothing else needs to reach it), else the driver's node address."""
    if all(info.ip == driver_ip for info in infos):
        return "127.0.0.1"
    return driver_ip


def elastic_store_address(driver_ip):
    """The address an elastic job's store listens on: the driver node's address as Ray
    reports it, which Ray's own services on this node already listen on and every node of the
    cluster reaches, including nodes that join later from other machines (the nodes present
    at start() say nothing about those). Loopback only where Ray's node address is itself a
    loopback one: such a cluster cannot have nodes on other machines."""
    if driver_ip.startswith("127.") or driver_ip in ("::1", "localhost"):
        return "127.0.0.1"
    return driver_ip


def cuda_visible_devices(infos, job_places):
    """CUDA_VISIBLE_DEVICES for each actor, or None for actors without GPUs.

    As under Horovod, every worker of a host sees all the GPUs given to that host's workers,
    so that the usual `torch.cuda.set_device(hvd.local_rank())` works. They are listed in
    local-rank order: with one GPU per worker, device `local_rank` is the worker's own GPU.
    """
    by_host = {}
    for info, place in sorted(zip(infos, job_places), key=lambda ip: ip[1].rank):
        ids = by_host.setdefault(place.host, [])
        ids.extend(str(g) for g in info.gpu_ids if str(g) not in ids)
    return [",".join(by_host[place.host]) if info.gpu_ids else None
            for info, place in zip(infos, job_places)]
