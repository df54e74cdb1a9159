"""A RayExecutor job on a Ray cluster of two nodes on this machine (ray.cluster_utils: two
raylets, one address), run as its own driver process by test_ray_multinode.py (the other tests'
driver holds a one-node cluster). Prints one JSON line: the executor's places and each
worker's view of its place; exits non-zero if a collective's result is wrong."""

import json
import os
import sys

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import ray  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_ray_executor as jobs  # noqa: E402



def main():
    cluster = Cluster(initialize_head=True,
                      head_node_args={"num_cpus": 2, "include_dashboard": False})
    cluster.add_node(num_cpus=2)
    ray.init(address=cluster.address)
    cluster.wait_for_nodes()
    ray.cloudpickle.register_pickle_by_value(jobs)
    try:
        places, store, results = jobs.run_two_by_two()
    finally:
        ray.shutdown()
        cluster.shutdown()
    print(json.dumps({"places": [list(p) for p in places],
                      "seen": [list(p) for p, _ in results],
                      "store": store}))


if __name__ == "__main__":
    main()
