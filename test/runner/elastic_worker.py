"""A worker of the elastic job tests (test_elastic_jobs.py), on the library's primitives only
(init/shutdown, allreduce, broadcast, allgather, HorovodInternalError and
`_C.elastic_hosts_updated()`), with the elastic loop written out: sync from rank 0, train,
commit, restore the last commit on HorovodInternalError, keep the state when hosts were
updated, then shutdown() + init() for the next membership.

The model is a float64 vector; step s subtracts LR * (sum of the ranks' gradients) / size,
each gradient small integers drawn from a generator seeded by (s, rank): the sum is exact, so
the test replays the log and must get the very same bits. It writes to <log-dir>/<worker id>:
    PID <pid>
    SYNC <step> <rank> <size> <params>       after every sync (all ranks checked equal)
    COMMIT <step> <rank> <size> <params>     after every committed step
    FINAL <step> <rank> <size> <params>      at the end
(params: float.hex values joined by ','). A wrong value prints WRONG and exits 1.
"""

import argparse
import os
import sys
import time

import numpy as np

import horovod_cpp as hvd
from horovod_cpp import _C

K = 16
LR = 0.125


def gradient(step, rank):
    return np.random.default_rng([step, rank]).integers(-8, 9, K).astype(np.float64)


def encode(params):
    return ",".join(float(v).hex() for v in params)


class Log:
    def __init__(self, folder, wid):
        self.f = open(os.path.join(folder, wid.replace(":", "_")), "a", buffering=1)

    def write(self, what, step, params):
        self.f.write(f"{what} {step} {hvd.rank()} {hvd.size()} {encode(params)}\n")
        os.fsync(self.f.fileno())


def sync(params, step):
    """Rank 0's state to every rank; every rank checks that all now hold the same bits."""
    params = hvd.broadcast(params, root_rank=0, name="sync.params")
    step = int(hvd.broadcast(np.array([step], dtype=np.int64), root_rank=0, name="sync.step")[0])
    mine = np.frombuffer(params.tobytes(), dtype=np.uint8).astype(np.int64)
    every = hvd.allgather(mine[None, :], name="sync.check")
    if not (every == mine[None, :]).all():
        print(f"WRONG rank={hvd.rank()}: parameters differ between ranks after the sync",
              flush=True)
        sys.exit(1)
    return params, step


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--log-dir", required=True)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--step-sleep", type=float, default=0.1)
    p.add_argument("--raise-at", type=int, default=-1, help="step at which --raise-worker raises")
    p.add_argument("--raise-worker", default="")
    a = p.parse_args()
    wid = os.environ["HOROVOD_CPP_WORKER_ID"]
    log = Log(a.log_dir, wid)
    log.f.write(f"PID {os.getpid()}\n")
    # Every worker starts from its own parameters: only the sync makes them agree.
    params = np.arange(K, dtype=np.float64) + sum(wid.encode())
    step = 0
    hvd.init()
    committed = (params.copy(), step)
    while True:
        try:
            params, step = sync(params, step)
            committed = (params.copy(), step)
            log.write("SYNC", step, params)
            updated = False
            while step < a.steps and not updated:
                if wid == a.raise_worker and step + 1 == a.raise_at:
                    raise RuntimeError(f"worker {wid} raises at step {step + 1} (test)")
                total = hvd.allreduce(gradient(step + 1, hvd.rank()), op=hvd.Sum,
                                      name="grad")
                params = params - LR * (total / hvd.size())
                step += 1
                committed = (params.copy(), step)
                log.write("COMMIT", step, params)
                updated = _C.elastic_hosts_updated()
                time.sleep(a.step_sleep)
            if not updated:
                break
        except hvd.HorovodInternalError as e:
            print(f"INTERNAL_ERROR {wid} at step {step}: {str(e)[:200]}", flush=True)
            params, step = committed[0].copy(), committed[1]
        hvd.shutdown()
        hvd.init()  # the next membership (raises if the driver ends the job)
    log.write("FINAL", step, params)
    hvd.shutdown()


if __name__ == "__main__":
    main()
