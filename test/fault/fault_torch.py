"""Fault injection through horovod_cpp.torch (the drop-in for horovod.torch).

    mpirun -np N python fault_torch.py MODE

The victim is the last rank; see hvd_fault.cc for the modes (kill, raise, exit, stall, local).
A surviving rank that is not ended by the fault exits with status 2."""
import os
import signal
import sys
import time

import torch

import horovod_cpp.torch as hvd

mode = sys.argv[1]
hvd.init()
rank, size = hvd.rank(), hvd.size()
victim = size - 1


def checked_sum(name, n):
    x = torch.arange(n, dtype=torch.float32) % 7 + rank
    got = hvd.allreduce(x, op=hvd.Sum, name=name)
    want = (torch.arange(n, dtype=torch.float32) % 7) * size + size * (size - 1) / 2
    assert torch.equal(got, want), f"rank {rank}: wrong sum for {name}"


for step in range(3):
    checked_sum(f"warmup.{step}", 1000)

if mode == "local":
    # The victim's tensor fails a check only it makes (average of a bool tensor).
    if rank == victim:
        print(f"rank {rank}: injecting fault at {time.time():.3f}", flush=True)
    t = torch.ones(8, dtype=torch.bool) if rank == victim else torch.ones(8)
    try:
        hvd.allreduce(t, name="local.bad")
        print(f"rank {rank}: 'local.bad' succeeded", file=sys.stderr)
        sys.exit(2)
    except hvd.HorovodInternalError as e:  # every horovod_cpp error derives from it
        message = str(e)
    except Exception as e:  # noqa: BLE001 - report the wrong type below
        message = f"{type(e).__name__}: {e}"
    print(f"rank {rank}: error: {message}", flush=True)
    want = "bool" if rank == victim else f"rank {victim}: "
    if want not in message or "local.bad" not in message:
        print(f"rank {rank}: the error does not name rank {victim} and the reason", file=sys.stderr)
        sys.exit(2)
    checked_sum("local.after", 100)
    print(f"rank {rank}: local mode: error on every rank, next collective works", flush=True)
    sys.exit(0)

if rank == victim:
    time.sleep(0.3)
    # The bound is measured from here (run_faults.sh): startup time is not the library's.
    print(f"rank {rank}: injecting fault at {time.time():.3f}", flush=True)
    if mode == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if mode == "raise":
        raise RuntimeError(f"rank {rank} failed")
    if mode == "exit":
        os._exit(0)
    if mode == "stall":
        while True:
            time.sleep(1)
checked_sum("never", 1 << 16)
print(f"rank {rank}: 'never' completed", file=sys.stderr)
sys.exit(2)
