"""`horovod_cpp.run` across two hosts (run_multihost.sh makes them): the function travels to
4 workers on h1:2,h2:2 and their values come back through the store on the bridge address.
Prints RUN_FUNC OK when every rank's place and value are right; exits non-zero otherwise.

    run_func_hosts.py AGENT NICS mpi|gloo
"""

import os
import sys

RUNNER_TESTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "runner")
sys.path.insert(0, RUNNER_TESTS)
os.environ["PYTHONPATH"] = RUNNER_TESTS + (os.pathsep + os.environ["PYTHONPATH"]
                                           if os.environ.get("PYTHONPATH") else "")

import numpy as np  # noqa: E402

import horovod_cpp  # noqa: E402
import run_func_jobs as jobs  # noqa: E402


def main(agent, nics, mode):
    gloo = mode == "gloo"
    results = horovod_cpp.run(
        jobs.placement_job, args=(300,), num_proc=4, hosts="h1:2,h2:2", network_interface=nics,
        start_timeout=60, use_gloo=gloo, use_mpi=not gloo, rsh_agent=agent,
        mpi_args=None if gloo else "--mca btl self,vader,tcp")
    want = sum(jobs.seeded(r, 300) for r in range(4))
    ok = len(results) == 4
    for rank, (r, size, local_rank, cross_rank, host, total) in enumerate(results):
        placed = (r, size, local_rank, cross_rank, host) == (rank, 4, rank % 2, rank // 2,
                                                            "h1" if rank < 2 else "h2")
        print(f"rank {rank}: {(r, size, local_rank, cross_rank, host)} "
              f"{'placed right' if placed else 'MISPLACED'}")
        ok = ok and placed and np.array_equal(total, want)
    print("RUN_FUNC OK" if ok else "RUN_FUNC WRONG")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
