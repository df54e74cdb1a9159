"""ElasticRayExecutor's cooldown and reset limit on the shared local Ray cluster (one node):
a host blacklisted with a cooldown range comes back when the cooldown ends and the job grows
again; with a reset limit, that growth is refused: run() raises the reason, in bounded
time. The jobs are test_ray_elastic.elastic_job, checked with its check_job."""

import threading
import time

import pytest

from conftest import skip_without_ray

ray = skip_without_ray()
from horovod_cpp.ray import ElasticRayExecutor  # noqa: E402
from test_ray_elastic import MARK_STEP, STEPS, check_job, run_and_kill, settings  # noqa: E402

#: The cooldown range of the cooldown test (seconds): short, so that the job sees it end.
COOLDOWN = (1.0, 2.0)
#: The step the cooldown test's workers hold at (after the shrink) until the cooldown ended.
HOLD_STEP = 20


def run_with_cooldown(marker, **executor_kwargs):
    """An elastic_job of up to 3 workers whose node is blacklisted for COOLDOWN when the test
    kills an actor at MARK_STEP; the survivors hold after committing HOLD_STEP until the
    cooldown has ended. Returns run_and_kill's (out, generations, victim)."""
    ex = ElasticRayExecutor(settings(elastic_timeout=60), min_workers=2, max_workers=3,
                            cooldown_range=COOLDOWN, **executor_kwargs)

    def release_after_cooldown(g, ws):
        # The shrunk generation formed: the node's cooldown ends within COOLDOWN[1] s of the
        # kill; then (and one discovery later) the held workers may commit on.
        if len(ws) == 2:
            def go():
                time.sleep(COOLDOWN[1] + 2 * ex.discovery_interval_s)
                with open(marker + ".go", "w"):
                    pass
            threading.Thread(target=go, daemon=True).start()

    ex.start()
    try:
        return run_and_kill(ex, marker, release_after_cooldown, hold_step=HOLD_STEP)
    finally:
        ex.shutdown()


def test_blacklisted_node_comes_back_after_its_cooldown(ray_cluster, tmp_path):
    out, generations, victim = run_with_cooldown(str(tmp_path / "kill_me"))
    assert "error" not in out, out.get("error")
    # 3 workers, 2 after the kill, 3 again once the node's cooldown ended (a new worker).
    assert [len(ws) for _, ws in generations] == [3, 2, 3], generations
    results = out["results"]
    assert len(results) == 3 and victim not in [r[0] for r in results]
    sizes = check_job(results, STEPS)
    assert sizes[:MARK_STEP] == [3] * MARK_STEP and sizes[-1] == 3 and 2 in sizes, sizes
    shrunk = [i for i, n in enumerate(sizes) if n == 2]
    assert shrunk == list(range(shrunk[0], shrunk[-1] + 1)), sizes  # one stretch at size 2


def test_reset_limit_reached_fails_with_the_reason(ray_cluster, tmp_path):
    # One reset allowed (generation 0 is not one): the kill is answered by it (3 -> 2
    # workers); growing back after the cooldown would be a second.
    t0 = time.monotonic()
    out, generations, _ = run_with_cooldown(str(tmp_path / "kill_me"), reset_limit=1)
    assert "results" not in out, out
    with pytest.raises(RuntimeError, match=r"the reset limit \(1\) is reached: generation 2 "
                                           r"would be reset 2"):
        raise out["error"]
    assert [len(ws) for _, ws in generations] == [3, 2], generations
    assert time.monotonic() - t0 < 120
