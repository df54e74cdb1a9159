"""ElasticRayExecutor on hosts of the program's choosing (Horovod's override_discovery=False
with `settings.discovery`), on the shared local Ray cluster, whose node also holds the
resources node:hvd-host-a and node:hvd-host-b (conftest): two hosts by name on one machine,
as Horovod's own Ray tests make them. A job of 2 workers on hvd-host-a grows to 3 when the
discovery adds hvd-host-b; the new worker runs as a host of its own (local size 1, cross size
2), and the job's results pass test_ray_elastic's checks."""

import os
import threading
import time

from conftest import skip_without_ray

ray = skip_without_ray()
from horovod_cpp.ray import ElasticRayExecutor  # noqa: E402
from test_ray_elastic import MARK_STEP, STEPS, check_job, elastic_job, settings  # noqa: E402


class ScheduledDiscovery:
    """Hosts set by the test; the driver polls them (any object with this method will do)."""

    def __init__(self, hosts):
        self.hosts = dict(hosts)

    def find_available_hosts_and_slots(self):
        return dict(self.hosts)


def placed_job(marker):
    """elastic_job held after MARK_STEP until the test adds a host; returns its result and the
    worker's host as the library sees it."""
    import horovod_cpp as hvd

    wid, params, log = elastic_job(marker, hold_step=MARK_STEP)
    return wid, params, log, (os.environ["HOROVOD_HOSTNAME"], hvd.local_size(),
                              hvd.cross_size())


def test_the_programs_discovery_places_workers_and_grows_the_job(ray_cluster, tmp_path):
    marker = str(tmp_path / "grow")
    discovery = ScheduledDiscovery({"hvd-host-a": 2})
    s = settings(elastic_timeout=60)
    s.discovery = discovery
    ex = ElasticRayExecutor(s, min_workers=2, max_workers=3, override_discovery=False)
    out, generations = {}, []

    def driver():
        try:
            out["results"] = ex.run(lambda: placed_job(marker),
                                    on_membership=[lambda g, ws: generations.append(ws)])
        except BaseException as e:  # reported below
            out["error"] = e

    ex.start()
    thread = threading.Thread(target=driver, daemon=True)
    try:
        thread.start()
        deadline = time.monotonic() + 180
        while not os.path.exists(marker) and thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert os.path.exists(marker), f"no worker reached step {MARK_STEP}: {out}"
        discovery.hosts["hvd-host-b"] = 1
        time.sleep(2 * ex.discovery_interval_s)  # the driver has seen the new host
        with open(marker + ".go", "w"):  # the held workers train on
            pass
        thread.join(timeout=180)
        assert not thread.is_alive(), "run() did not return"
    finally:
        ex.shutdown()
    assert "error" not in out, out.get("error")
    assert [len(ws) for ws in generations] == [2, 3], generations
    results = out["results"]
    sizes = check_job([r[:3] for r in results], STEPS)
    assert sizes[:MARK_STEP] == [2] * MARK_STEP and sizes[-1] == 3, sizes
    # (host, local size, cross size): local rank 1 is on hvd-host-a only, so its cross size is 1.
    places = sorted(r[3] for r in results)
    assert places == [("hvd-host-a", 2, 1), ("hvd-host-a", 2, 2), ("hvd-host-b", 1, 2)], places
