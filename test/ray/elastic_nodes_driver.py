"""ElasticRayExecutor jobs on a Ray cluster of their own (ray.cluster_utils: each node a raylet
process of its own on this machine), run as a separate driver process by the tests (the other
tests' driver holds the one-node cluster). Prints one JSON line: the results and the
generations. The scenario is the first argument:

grow: 2 workers on a 2-CPU head node; once the last rank commits test_ray_elastic.MARK_STEP, a
    second 2-CPU node joins (the workers wait for it there), and the job must grow to 4
    workers at a commit.
lose: 4 workers on a 2-CPU head node and a 2-CPU second node; once the last rank commits
    MARK_STEP, the second node's raylet is killed (SIGKILL: its actors die with it, as when a
    machine is lost), and the job must go on with the head node's 2 workers.
"""

import json
import os
import sys
import tempfile
import threading
import time

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import ray  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_ray_elastic as jobs  # noqa: E402

from horovod_cpp.ray import ElasticRayExecutor  # noqa: E402


def main(scenario):
    if scenario not in ("grow", "lose"):
        raise SystemExit(f"usage: elastic_nodes_driver.py grow|lose (got {scenario!r})")
    cluster = Cluster(initialize_head=True,
                      head_node_args={"num_cpus": 2, "include_dashboard": False})
    second = cluster.add_node(num_cpus=2) if scenario == "lose" else None
    cluster.wait_for_nodes()
    ray.init(address=cluster.address)
    ray.cloudpickle.register_pickle_by_value(jobs)
    marker = os.path.join(tempfile.mkdtemp(prefix=f"hvd_ray_{scenario}_"), "mark")
    ex = ElasticRayExecutor(jobs.settings(elastic_timeout=60), min_workers=2, max_workers=4)
    hold_step = jobs.MARK_STEP if scenario == "grow" else None
    out, generations = {}, []

    def driver():
        try:
            out["results"] = ex.run(
                lambda: jobs.elastic_job(marker, jobs.MARK_STEP, jobs.GROW_STEPS,
                                         jobs.GROW_SLEEP_S, hold_step=hold_step),
                on_membership=[lambda g, ws: generations.append((g, ws))])
        except BaseException as e:  # reported below
            out["error"] = repr(e)

    try:
        ex.start()
        thread = threading.Thread(target=driver, daemon=True)
        thread.start()
        deadline = time.monotonic() + 150
        while not os.path.exists(marker) and thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        if not os.path.exists(marker):
            raise SystemExit(f"no worker reached step {jobs.MARK_STEP}: {out}")
        if scenario == "grow":
            cluster.add_node(num_cpus=2)
            cluster.wait_for_nodes()
            with open(marker + ".go", "w"):  # the workers, held after that commit, train on
                pass
        else:
            cluster.remove_node(second, allow_graceful=False)
        thread.join(timeout=150)
        if thread.is_alive():
            raise SystemExit("run() did not return")
        if "error" in out:
            raise SystemExit(out["error"])
    finally:
        ex.shutdown()
        ray.shutdown()
        cluster.shutdown()
    print(json.dumps({"results": out["results"], "generations": generations}))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "")
