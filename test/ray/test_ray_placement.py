"""horovod_cpp.ray.placement (no cluster needed): places from the actors' nodes, host names,
the store's address, the GPUs each worker sees, the placement group's shape; and the
executor's argument checks; the elastic executor's slots from Ray's node list."""

import pytest

from conftest import skip_without_ray

ray = skip_without_ray()
from horovod_cpp.ray import (ElasticRayExecutor, RayExecutor, RayHostDiscovery,  # noqa: E402
                             placement)
from horovod_cpp.runner import gloo_launch  # noqa: E402

A = placement.ActorInfo


def test_places_group_actors_by_node_in_first_seen_order():
    # Ray put the actors on nodes b, a, b, a, b (actor order).
    infos = [A("nb", "10.0.0.2", []), A("na", "10.0.0.1", []), A("nb", "10.0.0.2", []),
             A("na", "10.0.0.1", []), A("nb", "10.0.0.2", [])]
    got = placement.places(infos)
    # Host 10.0.0.2 comes first (actor 0 is there): ranks 0..2 on it, in actor order.
    want = gloo_launch.place_workers([("10.0.0.2", 3), ("10.0.0.1", 2)], 5)
    assert got == [want[0], want[3], want[1], want[4], want[2]]
    assert [(p.rank, p.local_rank, p.local_size, p.cross_rank, p.cross_size) for p in got] == [
        (0, 0, 3, 0, 2), (3, 0, 2, 1, 2), (1, 1, 3, 0, 2), (4, 1, 2, 1, 2), (2, 2, 3, 0, 1)]


def test_nodes_sharing_an_ip_are_separate_hosts():
    infos = [A("aaaaaaaaaaaaXX", "10.0.0.1", []), A("bbbbbbbbbbbbYY", "10.0.0.1", []),
             A("cccc", "10.0.0.3", [])]
    assert placement.host_names(infos) == ["10.0.0.1~aaaaaaaaaaaa", "10.0.0.1~bbbbbbbbbbbb",
                                           "10.0.0.3"]
    places = placement.places(infos)
    assert [(p.local_size, p.cross_size) for p in places] == [(1, 3)] * 3
    # The worker ids are valid store keys (printable ASCII, no spaces).
    for p in places:
        wid = gloo_launch.worker_id(p)
        assert all(0x21 <= ord(c) <= 0x7e for c in wid), wid


def test_store_listens_on_loopback_only_for_a_one_node_job():
    one = [A("n", "10.0.0.1", [])] * 2
    two = one + [A("m", "10.0.0.2", [])]
    assert placement.store_address("10.0.0.1", one) == "127.0.0.1"
    assert placement.store_address("10.0.0.1", two) == "10.0.0.1"
    # A driver outside the workers' node (a laptop attached to a cluster) is reached by IP.
    assert placement.store_address("10.0.0.9", one) == "10.0.0.9"


def test_elastic_store_listens_where_later_nodes_reach_it():
    # Nodes may join from other machines: the driver node's address unless Ray's is loopback.
    assert placement.elastic_store_address("10.0.0.1") == "10.0.0.1"
    assert placement.elastic_store_address("127.0.0.1") == "127.0.0.1"
    assert placement.elastic_store_address("127.0.1.1") == "127.0.0.1"


def test_each_worker_sees_its_hosts_gpus_in_local_rank_order():
    infos = [A("na", "10.0.0.1", ["3"]), A("nb", "10.0.0.2", ["0"]),
             A("na", "10.0.0.1", ["1"]), A("nb", "10.0.0.2", ["2"])]
    places = placement.places(infos)
    devices = placement.cuda_visible_devices(infos, places)
    assert devices == ["3,1", "0,2", "3,1", "0,2"]
    # Device local_rank of the list is the worker's own GPU.
    for info, place, dev in zip(infos, places, devices):
        assert dev.split(",")[place.local_rank] == info.gpu_ids[0]
    assert placement.cuda_visible_devices([A("n", "x", [])], places[:1]) == [None]


def test_placement_group_shapes():
    assert placement.bundles(3, None, 1, 2, 0) == ([{"CPU": 2.0}] * 3, "PACK", [0, 1, 2])
    assert placement.bundles(None, 2, 3, 1, 1) == (
        [{"CPU": 3.0, "GPU": 3.0}] * 2, "STRICT_SPREAD", [0, 0, 0, 1, 1, 1])


def test_executor_arguments_are_checked():
    s = RayExecutor.create_settings(timeout_s=5)
    with pytest.raises(ValueError, match="not both"):
        RayExecutor(s, num_workers=2, num_hosts=1)
    with pytest.raises(ValueError, match="not both and not neither"):
        RayExecutor(s)
    with pytest.raises(ValueError, match="num_workers must be a positive int"):
        RayExecutor(s, num_workers=0)
    with pytest.raises(ValueError, match="use_gpu"):
        RayExecutor(s, num_workers=2, gpus_per_worker=1)
    assert RayExecutor(s, num_hosts=2, num_workers_per_host=3).num_workers == 6
    assert s.env() == {"HOROVOD_GLOO": "1", "HOROVOD_CONTROLLER": "gloo",
                       "HOROVOD_GLOO_TIMEOUT_SECONDS": "5"}
    assert RayExecutor.create_settings(nics="eth1").env()["HOROVOD_GLOO_IFACE"] == "eth1"


def test_elastic_slots_count_cpus_and_gpus_per_worker(monkeypatch):
    # Two raylets on one address and a node too small for a worker; a dead node is skipped.
    nodes = [{"NodeID": "a" * 20, "NodeManagerAddress": "10.0.0.1", "Alive": True,
              "Resources": {"CPU": 5.0, "GPU": 4.0}},
             {"NodeID": "b" * 20, "NodeManagerAddress": "10.0.0.1", "Alive": True,
              "Resources": {"CPU": 8.0, "GPU": 1.0}},
             {"NodeID": "c" * 20, "NodeManagerAddress": "10.0.0.2", "Alive": True,
              "Resources": {"CPU": 1.0, "GPU": 2.0}},
             {"NodeID": "d" * 20, "NodeManagerAddress": "10.0.0.3", "Alive": False,
              "Resources": {"CPU": 8.0, "GPU": 8.0}}]
    monkeypatch.setattr(ray, "nodes", lambda: nodes)
    ex = ElasticRayExecutor(None, cpus_per_worker=2, use_gpu=True)
    assert ex._discover() == [("10.0.0.1", 2), ("10.0.0.1~bbbbbbbbbbbb", 1)]
    cpu_only = ElasticRayExecutor(None, cpus_per_worker=2, max_workers=3)
    assert cpu_only._discover() == [("10.0.0.1", 2), ("10.0.0.1~bbbbbbbbbbbb", 4)]
    assert cpu_only._rs.max_np == 3  # the rounds never grow the job past it


def test_elastic_discovery_of_the_programs_choosing(monkeypatch):
    class Hosts:
        def find_available_hosts_and_slots(self):
            return {"h1": 2, "h2": 0}

    s = ElasticRayExecutor.create_settings()
    with pytest.raises(ValueError, match="override_discovery=False needs settings.discovery"):
        ElasticRayExecutor(s, override_discovery=False)
    s.discovery = object()
    with pytest.raises(ValueError, match="find_available_hosts_and_slots"):
        ElasticRayExecutor(s, override_discovery=False)
    s.discovery = Hosts()
    ex = ElasticRayExecutor(s, override_discovery=False)
    assert ex._discover() == [("h1", 2)]  # a host without a slot is left out
    # Names the discovery did not get from Ray go to nodes holding the resource node:<name>.
    assert ex._placement("h1") == {"resources": {"node:h1": 0.001}}


def test_ray_host_discovery_counts_slots_and_names_nodes(monkeypatch):
    a, b = "a1" * 28, "b2" * 28  # node ids: 28 bytes in hex, as Ray checks them
    nodes = [{"NodeID": a, "NodeManagerAddress": "10.0.0.1", "Alive": True,
              "Resources": {"CPU": 8.0, "GPU": 2.0}},
             {"NodeID": b, "NodeManagerAddress": "10.0.0.2", "Alive": True,
              "Resources": {"CPU": 8.0}}]
    monkeypatch.setattr(ray, "nodes", lambda: nodes)
    assert RayHostDiscovery(cpus_per_slot=3).find_available_hosts_and_slots() == {
        "10.0.0.1": 2, "10.0.0.2": 2}
    # With GPUs, a node without any has no slot; gpus_per_slot divides the GPUs.
    gpu = RayHostDiscovery(use_gpu=True, gpus_per_slot=2)
    assert gpu.find_available_hosts_and_slots() == {"10.0.0.1": 1}
    assert gpu.node_id_of("10.0.0.1") == a and gpu.node_id_of("10.0.0.2") is None
    with pytest.raises(ValueError, match="cpus_per_slot"):
        RayHostDiscovery(cpus_per_slot=0)
    # An executor on it (the default, override_discovery=True) pins workers to the node.
    ex = ElasticRayExecutor(None, use_gpu=True)
    ex._discover()
    strategy = ex._placement("10.0.0.1")["scheduling_strategy"]
    assert strategy.node_id == a and strategy.soft is False
