"""A horovod_cpp worker for the elastic library tests (test_elastic_core.py; issue 37): the
harness plays hvdrun's elastic driver.

    elastic_core_worker.py init      init() once: INIT_OK size=N generation=G, or
                                     INIT_ERROR <exception type>: <message> (exit 3)
    elastic_core_worker.py init_sum  the same, then 3 checked allreduces before INIT_OK
    elastic_core_worker.py loop      allreduce loop with hvd elastic_hosts_updated() each step,
                                     until a peer is lost; then shutdown(), init() and a few
                                     checked allreduces at the new membership

Lines of `loop`, each flushed:
    LOOPING rank=R size=N generation=G   after the first correct step
    UPDATED rank=R step=S                the first step whose hosts_updated() was True
    INTERNAL_ERROR rank=R                when a collective fails with HorovodInternalError
    REINIT OK rank=R size=N generation=G updated=U   after the re-init and correct allreduces
    WRONG ...                            a wrong element (exit 1)
"""

import sys
import time

import horovod_cpp as hvd
from horovod_cpp import _C
from gloo_fault_worker import checked_allreduce


def init_only(allreduces=0):
    try:
        hvd.init()
    except Exception as e:  # the test checks the type and the message
        print(f"INIT_ERROR {type(e).__name__}: {e}", flush=True)
        sys.exit(3)
    for s in range(allreduces):
        checked_allreduce(s)
    print(f"INIT_OK size={hvd.size()} generation={_C.elastic_generation()}", flush=True)
    hvd.shutdown()


def loop(max_seconds=120.0):
    hvd.init()
    rank = hvd.rank()
    deadline = time.monotonic() + max_seconds
    step, updated_at = 0, None
    try:
        while time.monotonic() < deadline:
            checked_allreduce(step)
            # Collective: every rank asks at the same step and must get the same answer.
            if _C.elastic_hosts_updated() and updated_at is None:
                updated_at = step
                print(f"UPDATED rank={rank} step={step}", flush=True)
            if step == 0:
                print(f"LOOPING rank={rank} size={hvd.size()} "
                      f"generation={_C.elastic_generation()}", flush=True)
            step += 1
    except hvd.HorovodInternalError as e:
        print(f"INTERNAL_ERROR rank={rank}: {str(e)[:300]}", flush=True)
        hvd.shutdown()
        hvd.init()  # announces ready/<id>/1, then waits for the driver's assign/<id>/1
        for s in range(3):
            checked_allreduce(s)
        print(f"REINIT OK rank={hvd.rank()} size={hvd.size()} "
              f"generation={_C.elastic_generation()} updated={_C.elastic_hosts_updated()}",
              flush=True)
        hvd.shutdown()
        return
    print(f"NO_FAULT rank={rank} after {step} steps", flush=True)
    sys.exit(3)


if __name__ == "__main__":
    if sys.argv[1] == "init":
        init_only()
    elif sys.argv[1] == "init_sum":
        init_only(allreduces=3)
    else:
        loop()
