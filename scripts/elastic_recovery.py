"""Time to recover and time to grow of an elastic job (issue 37, for docs/benchmarks.md),
median of several runs each, default timeouts:
- recover: from a SIGKILL of one worker to the survivors' next completed step, np 4 -> 3 on
  two hosts of two slots;
- grow: from the discovery script listing a new host to the first step with its worker
  (np 2 on one host, then a second host: np 3).
The hosts are "hosts" of this machine by default (distinct HOROVOD_HOSTNAMEs started through an
rsh agent that runs them here), or real ones (--agent, --nics, --hosts: the network-namespace
hosts of test/multihost/run_multihost.sh --elastic-timings). Each run's logs are also
checked as the tests do.

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


def _until_size(job, size, since):
    """Seconds from `since` to the first step committed at `size`."""
    while not any(r[4] == size for r in job.records("COMMIT")):
        if time.monotonic() - since > 120:
            raise AssertionError(f"no step at size {size} within 120 s")
        time.sleep(0.01)
    return time.monotonic() - since


def one_run(folder, a, grow):
    """One job: the seconds measured, after the job's logs are checked."""
    h1, h2 = a.hosts.split(",")
    kw = dict(agent=a.agent, nics=a.nics) if a.agent else {}
    work = ["--steps", str(a.steps), "--step-sleep", "0.05"]
    if grow:
        job = Job(folder, [f"{h1}:2"], flags(2, max_np=3), work, **kw)
    else:
        job = Job(folder, [f"{h1}:2", f"{h2}:2"], flags(4, min_np=3), work, **kw)
    try:
        job.wait_step(10)
        if grow:
            t0 = time.monotonic()
            job.set_hosts([f"{h1}:2", f"{h2}:1"])
        else:
            pid = job.pid(f"{h2}:1")
            t0 = time.monotonic()
            os.kill(pid, signal.SIGKILL)
        took = _until_size(job, 3, t0)
    finally:
        out = job.finish()
    if job.proc.returncode != 0:
        raise AssertionError(f"the job failed:\n{out[-3000:]}")
    sizes = job.check(a.steps)
    assert sizes[0] == (2 if grow else 4) and sizes[-1] == 3, sizes
    return took


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--agent", help="rsh agent reaching the hosts (default: this machine)")
    p.add_argument("--nics", default="lo", help="hvdrun's --network-interface with --agent")
    p.add_argument("--hosts", default="hA,hB", help="the two host names")
    a = p.parse_args()
    for grow, what in ((False, "time to recover (SIGKILL -> survivors' next step, np 4 -> 3)"),
                       (True, "time to grow (host listed -> its worker's first step, np 2 -> 3)")):
        times = []
        for i in range(a.runs):
            with tempfile.TemporaryDirectory(prefix="hvd-elastic-") as d:
                times.append(one_run(pathlib.Path(d), a, grow))
            print(f"run {i + 1}: {times[-1]:.2f} s", flush=True)
        print(f"ELASTIC {what}, hosts {a.hosts}, {a.runs} runs: median "
              f"{statistics.median(times):.2f} s, min {min(times):.2f}, max {max(times):.2f}",
              flush=True)


if __name__ == "__main__":
    main()
