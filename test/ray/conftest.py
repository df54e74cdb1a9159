"""The Ray tests share one local Ray cluster (starting one takes seconds): 4 CPUs, 2 GPUs
in name only, two extra host names, no dashboard. Without Ray they are skipped, except in CI
(CI=true), where they must run."""

import faulthandler
import importlib
import os
import sys
import time

import pytest

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

if os.environ.get("CI") == "true":
    importlib.import_module("ray")  # CI installs Ray: there a missing one is an error

#: Each test module starts with `skip_without_ray()`: elsewhere no Ray skips them.
SKIP_REASON = "Ray is not installed (scripts/install_ray_env.sh makes .venv-ray)"


def skip_without_ray():
    return pytest.importorskip("ray", reason=SKIP_REASON)


#: CPUs of the test cluster: room for the 3-worker jobs plus a spare one.
NUM_CPUS = 4
#: GPUs Ray is told the cluster has (there are none: only what Ray hands out is tested).
NUM_GPUS = 2
#: Host names the one node also answers to (Ray resources node:<name>, as Horovod's Ray tests
#: make hosts on one machine): test_ray_discovery.py places workers on them.
NAMED_HOSTS = ("hvd-host-a", "hvd-host-b")


@pytest.fixture(autouse=True)
def per_test_timeout():
    """Every Ray test: one that hangs dumps the stacks and ends the run instead of blocking CI."""
    faulthandler.dump_traceback_later(float(os.environ.get("HVD_TEST_TIMEOUT_S", "300")),
                                      exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


@pytest.fixture(scope="session")
def ray_cluster():
    """A local Ray cluster for the whole session; the test modules' functions travel to the
    actors by value (the actors cannot import test modules)."""
    ray = skip_without_ray()
    here = os.path.dirname(os.path.abspath(__file__))
    for name, mod in list(sys.modules.items()):
        if name.startswith("test_ray") and getattr(mod, "__file__", "").startswith(here):
            ray.cloudpickle.register_pickle_by_value(mod)
    ray.init(num_cpus=NUM_CPUS, num_gpus=NUM_GPUS, include_dashboard=False,
             log_to_driver=True, resources={f"node:{h}": 100 for h in NAMED_HOSTS})
    yield ray
    ray.shutdown()


def live_actors(ray):
    """{actor id: class name} of the session cluster's actors not DEAD. Ray's state API
    (ray.util.state) needs the dashboard, which the test cluster does not run, so this reads
    the GCS's table the way `ray.util.state` did before it (ray._private.state.actors)."""
    from ray._private import state
    return {aid: a.get("ActorClassName", "?") for aid, a in state.actors().items()
            if a.get("State") != "DEAD"}


@pytest.fixture(autouse=True)
def no_actor_left(request):
    """After every test on the session cluster: each actor it started (workers, the log
    queue of ray_logger) has ended; Ray may take a moment to mark killed ones dead."""
    yield
    if "ray_cluster" not in request.fixturenames:
        return
    ray = request.getfixturevalue("ray_cluster")
    deadline = time.monotonic() + 30
    while live_actors(ray) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = live_actors(ray)
    assert not left, f"actors left alive after the test: {left}"
