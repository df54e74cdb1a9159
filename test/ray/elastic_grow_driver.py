"""An ElasticRayExecutor job on a Ray cluster of its own (ray.cluster_utils, on this machine),
run as a separate driver process by test_ray_elastic.py (the other tests' driver holds the
one-node cluster): 2 workers on a 2-CPU head node; once the last rank commits
test_ray_elastic.MARK_STEP, a second 2-CPU node joins (the workers wait for it there), and
the job must grow to 4 workers at a commit. Prints one JSON line: the results and the generations."""

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


def main():
    cluster = Cluster(initialize_head=True,
                      head_node_args={"num_cpus": 2, "include_dashboard": False})
    ray.init(address=cluster.address)
    ray.cloudpickle.register_pickle_by_value(jobs)
    marker = os.path.join(tempfile.mkdtemp(prefix="hvd_ray_grow_"), "grow_now")
    ex = ElasticRayExecutor(jobs.settings(elastic_timeout=60), min_workers=2, max_workers=4)
    out, generations = {}, []

    def driver():
        try:
            out["results"] = ex.run(
                lambda: jobs.elastic_job(marker, jobs.MARK_STEP, jobs.GROW_STEPS,
                                         jobs.GROW_SLEEP_S, hold=True),
                callbacks=[lambda g, ws: generations.append((g, ws))])
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
        cluster.add_node(num_cpus=2)
        cluster.wait_for_nodes()
        with open(marker + ".go", "w"):  # the workers, held after that commit, train on
            pass
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
    main()
