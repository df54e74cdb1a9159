"""Time to recover of an elastic job (issue 37, for docs/benchmarks.md): from a SIGKILL of one
worker to the survivors' next completed step, np 4 -> 3 on two "hosts" of this machine
(hA:2, hB:2: distinct HOROVOD_HOSTNAMEs started through an rsh agent that runs them here),
median of several runs, default timeouts. Each run's logs are also checked as the tests do.

    python scripts/elastic_recovery.py [--runs 5] [--steps 200]

Needs horovod_cpp built with Gloo and the elastic primitives, and pytest (the job harness is
test/runner/test_elastic_jobs.py's).
"""

import argparse
import os
import pathlib
import signal
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "test", "runner"))
from test_elastic_jobs import Job, flags  # noqa: E402


def one_run(folder, steps):
    """Seconds from the kill to the first step committed at size 3."""
    job = Job(folder, ["hA:2", "hB:2"], flags(4, min_np=3), ["--steps", str(steps),
                                                             "--step-sleep", "0.05"])
    try:
        job.wait_step(10)
        pid = job.pid("hB:1")
        t_kill = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        while True:
            at3 = [r for r in job.records("COMMIT") if r[4] == 3]
            if at3:
                break
            if time.monotonic() - t_kill > 120:
                raise AssertionError("no step at size 3 within 120 s")
            time.sleep(0.01)
        took = time.monotonic() - t_kill
    finally:
        out = job.finish()
    if job.proc.returncode != 0:
        raise AssertionError(f"the job failed:\n{out[-3000:]}")
    sizes = job.check(steps)
    assert sizes[0] == 4 and sizes[-1] == 3, sizes
    return took


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--steps", type=int, default=200)
    a = p.parse_args()
    times = []
    for i in range(a.runs):
        with tempfile.TemporaryDirectory(prefix="hvd-elastic-") as d:
            times.append(one_run(pathlib.Path(d), a.steps))
        print(f"run {i + 1}: {times[-1]:.2f} s", flush=True)
    print(f"time to recover (SIGKILL -> next step at np 3, np 4 -> 3, {a.runs} runs): "
          f"median {statistics.median(times):.2f} s, min {min(times):.2f}, "
          f"max {max(times):.2f}")


if __name__ == "__main__":
    main()
