"""Where the main thread's time goes in horovod_cpp.torch's per-call path (issue 15, 2b).

    mpirun -np 2 python examples/benchmark/py_call_profile.py [--loops 15]

Workload d (1000 tensors of 256 floats, one allreduce_async_ each, then one synchronize each)
and a 4 B allreduce_, split into parts and timed with time.thread_time (main-thread CPU, which
waiting for a core does not inflate) beside wall time; the background thread's CPU is the
process CPU (time.process_time) less the main thread's. Each part is also run bare (the
native calls alone, the torch attribute reads alone, the loop alone) so the Python layer's
share can be told from the core's. Rank 0 prints medians over --loops loops (min beside).
Results are checked: every reduced tensor must hold the average of the ranks' numbers.
"""

import argparse
import statistics
import time

import torch

import horovod_cpp.torch as hvd
from horovod_cpp import _C


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--loops", type=int, default=15)
    p.add_argument("--calls", type=int, default=200, help="4 B calls per loop")
    args = p.parse_args()
    hvd.init()
    torch.set_num_threads(1)
    me, n = hvd.rank(), hvd.size()
    expected = (n - 1) / 2.0
    tt, wall, proc = time.thread_time_ns, time.perf_counter_ns, time.process_time_ns
    gset = hvd.global_process_set
    if hasattr(_C, "torch_allreduce_async_fast"):  # builds before round eighteen
        old = _C.torch_allreduce_async_fast

        def fast(x, name):
            return old(x, None, name, None, 1.0, 1.0, gset)
    else:
        native = _C.allreduce_async

        def fast(x, name):
            return native(x, None, name, None, 1.0, 1.0, gset, None, True)
    tiny = [torch.full((256,), float(me)) for _ in range(1000)]
    names = [f"tiny.{i}" for i in range(1000)]
    got = {}

    def rec(key, value):
        got.setdefault(key, []).append(value)

    def attrs():
        for x in tiny:
            x.is_cpu, x.is_sparse, x.is_contiguous(), x.dtype, x.data_ptr(), x.shape

    for _ in range(args.loops):
        hvd.barrier()
        p0, c0, w0 = proc(), tt(), wall()
        hs = [hvd.allreduce_async_(x, name=f"tiny.{i}") for i, x in enumerate(tiny)]
        c1, w1 = tt(), wall()
        for h in hs:
            hvd.synchronize(h)
        p2, c2, w2 = proc(), tt(), wall()
        rec("d: allreduce_async_, main CPU per tensor (us)", (c1 - c0) / 1e6)
        rec("d: synchronize, main CPU per tensor (us)", (c2 - c1) / 1e6)
        rec("d: step, main CPU (ms)", (c2 - c0) / 1e6)
        rec("d: step, background CPU (ms)", ((p2 - p0) - (c2 - c0)) / 1e6)
        rec("d: step, wall (ms)", (w2 - w0) / 1e6)
        hvd.barrier()
        c0 = tt()
        hs = [fast(x, names[i]) for i, x in enumerate(tiny)]
        c1 = tt()
        _C.torch_handle_synchronize_all(hs)
        rec("d: bare native submit, CPU per tensor (us)", (c1 - c0) / 1e6)
        c0 = tt()
        attrs()
        rec("d: the 6 torch attribute reads from Python (us)", (tt() - c0) / 1e6)
        c0 = tt()
        for i, x in enumerate(tiny):
            f"tiny.{i}"
        rec("d: the loop and name formatting (us)", (tt() - c0) / 1e6)
    wrong = sum(int((x - expected).abs().gt(1e-4).sum()) for x in tiny)

    t = torch.full((1,), float(me))
    for _ in range(args.calls):
        hvd.allreduce_(t, name="single.4")
    for _ in range(args.loops):
        hvd.barrier()
        c0, w0 = tt(), wall()
        for _ in range(args.calls):
            hvd.allreduce_(t, name="single.4")
        c1, w1 = tt(), wall()
        for _ in range(args.calls):
            _C.torch_handle_synchronize(fast(t, "single.4"))
        c2, w2 = tt(), wall()
        rec("4 B: allreduce_, main CPU per call (us)", (c1 - c0) / args.calls / 1e3)
        rec("4 B: allreduce_, wall per call (us)", (w1 - w0) / args.calls / 1e3)
        rec("4 B: bare native pair, main CPU per call (us)", (c2 - c1) / args.calls / 1e3)
        rec("4 B: bare native pair, wall per call (us)", (w2 - w1) / args.calls / 1e3)
    wrong += int((t - expected).abs().gt(1e-4).sum())
    wrong = int(hvd.allreduce(torch.tensor([wrong], dtype=torch.float64), op=hvd.Sum)[0])
    if me == 0:
        print(f"# {n} ranks, {args.loops} loops, medians (min)")
        for key, values in got.items():
            print(f"{key:<50} {statistics.median(values):9.3f}  ({min(values):.3f})")
        print(f"# wrong elements: {wrong}")
    hvd.shutdown()
    raise SystemExit(1 if wrong else 0)


if __name__ == "__main__":
    main()
