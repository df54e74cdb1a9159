"""A horovod_cpp worker for the Gloo fault tests (test_gloo_fault.py): it loops on allreduces
until a peer is lost, then re-initializes from the store's next assignment.

Every allreduce checks every element (the sum of the ranks' own seeded values, computed here).
Lines it prints, each flushed, for the harness to follow:
    LOOPING rank=R size=N            after the first correct allreduce
    INTERNAL_ERROR rank=R            when a collective fails with HorovodInternalError
    REINIT OK rank=R size=N          after shutdown(), init() and a correct allreduce
    WRONG ...                        a wrong element (exit 1)
With --no-reinit it exits 0 after the first correct rounds until killed (the fixed-mode test).
"""

import argparse
import sys
import time

import numpy as np

import horovod_cpp as hvd

ELEMENTS = 1 << 20  # 4 MiB of float32: each allreduce is long enough to be caught mid-way


def checked_allreduce(step):
    r, n = hvd.rank(), hvd.size()
    x = np.arange(ELEMENTS, dtype=np.float32) % 97 + r + step % 5
    got = hvd.allreduce(x, op=hvd.Sum, name=f"loop.{step % 4}")
    want = (np.arange(ELEMENTS, dtype=np.float32) % 97 + step % 5) * n + n * (n - 1) / 2
    bad = np.flatnonzero(got != want)
    if bad.size:
        i = bad[0]
        print(f"WRONG rank={r} step={step}: element {i} is {got[i]}, expected {want[i]} "
              f"({bad.size} wrong)", flush=True)
        sys.exit(1)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--no-reinit", action="store_true")
    p.add_argument("--max-seconds", type=float, default=120.0)
    a = p.parse_args()
    hvd.init()
    rank = hvd.rank()
    deadline = time.monotonic() + a.max_seconds
    step = 0
    try:
        while time.monotonic() < deadline:
            checked_allreduce(step)
            if step == 0:
                print(f"LOOPING rank={hvd.rank()} size={hvd.size()}", flush=True)
            step += 1
    except hvd.HorovodInternalError as e:
        print(f"INTERNAL_ERROR rank={rank}: {str(e)[:300]}", flush=True)
        if a.no_reinit:
            sys.exit(2)
        hvd.shutdown()
        hvd.init()  # the next assignment, from the store (HOROVOD_CPP_WORKER_ID)
        for s in range(3):
            checked_allreduce(s)
        print(f"REINIT OK rank={hvd.rank()} size={hvd.size()}", flush=True)
        hvd.shutdown()
        return
    print(f"NO_FAULT rank={rank} after {step} steps", flush=True)
    sys.exit(3)


if __name__ == "__main__":
    main()
