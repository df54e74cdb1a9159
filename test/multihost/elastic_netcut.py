"""The elastic job on two network-namespace hosts with one host's network cut (issue 37), run
by run_multihost.sh --elastic (which makes the hosts): `hvdrun -np 4 --min-np 2` on h1:2,h2:2
listed by a discovery script; at step 10 the bridge side of h2's link goes down. h1's workers
get HorovodInternalError at the op timeout and come to the next round; h2's cannot reach the
store, so the driver drops them after the ready timeout and blacklists h2; the job finishes
at np 2 with every committed step checked (test_elastic_jobs.Job.check). Prints the time from
the cut to the survivors' next step.

    python elastic_netcut.py AGENT SUBNET CUT_COMMAND...
"""

import pathlib
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "runner"))
from test_elastic_jobs import Job, flags  # noqa: E402


def main():
    agent, subnet, cut = sys.argv[1], sys.argv[2], sys.argv[3:]
    steps = 200
    with tempfile.TemporaryDirectory(prefix="hvd-elastic-netcut-") as d:
        job = Job(pathlib.Path(d), ["h1:2", "h2:2"], flags(4, min_np=2),
                  ["--steps", str(steps), "--step-sleep", "0.05"], agent=agent, nics=subnet)
        try:
            job.wait_step(10)
            t_cut = time.monotonic()
            subprocess.run(cut, check=True)
            while not any(r[4] == 2 for r in job.records("COMMIT")):
                if time.monotonic() - t_cut > 120:
                    raise AssertionError("no step at size 2 within 120 s of the cut")
                time.sleep(0.02)
            took = time.monotonic() - t_cut
        finally:
            out = job.finish()
        if job.proc.returncode != 0:
            print(out[-5000:])
            raise AssertionError(f"hvdrun exited {job.proc.returncode}")
        sizes = job.check(steps)
        assert sizes[0] == 4 and sizes[-1] == 2, sizes
        assert all(not f.startswith("h2") for f, *_ in job.records("FINAL"))
    print(f"ELASTIC NETCUT OK: np 4 -> 2, next step {took:.1f} s after h2's network was cut")


if __name__ == "__main__":
    main()
