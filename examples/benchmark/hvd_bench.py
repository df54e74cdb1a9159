"""The Python twin of hvd_bench: workloads a, c and d through a horovod.torch-style module.

    mpirun -np 2 python examples/benchmark/hvd_bench.py [--module horovod_cpp.torch] [--json F]

Runs the same training-like workloads as the C++ tool (docs/benchmarks.md), through the
Python binding, so horovod_cpp.torch can be compared with horovod.torch on one script
(--module horovod.torch where Horovod is installed):
  a  the 161 ResNet-50 gradient tensors (resnet50_shapes.txt), averaged once per step with
     one allreduce_async_ per tensor submitted in reverse order, then all synchronized;
  c  one tensor of 4 B, 4 KiB, 256 KiB, 4 MiB, 64 MiB averaged;
  d  1000 tensors of 256 floats per step, all submitted, then all synchronized.
Every step is timed on every rank after a barrier; the slowest rank's time is the step's;
the median over --steps steps after warm-up is reported. Each rank checks every result
(inputs are the rank's number, so the average is known) and the run fails on a wrong value.
"""

import argparse
import importlib
import json
import os
import statistics
import sys
import time

import torch


def load_shapes(path):
    shapes = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#"):
                shapes.append(tuple(int(x) for x in line.split()))
    return shapes


def timed_steps(hvd, step, steps, warmup):
    """Median over steps of the slowest rank's time per step, in seconds."""
    times = []
    for i in range(warmup + steps):
        hvd.barrier()
        t0 = time.perf_counter()
        step()
        dt = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
        slowest = hvd.allreduce(dt, op=hvd.Max, name="hvd_bench.py.time")
        if i >= warmup:
            times.append(float(slowest[0]))
    return statistics.median(times)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--module", default="horovod_cpp.torch", help="horovod.torch-style module")
    p.add_argument("--workloads", default="a,c,d")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--shapes", default=os.path.join(here, "resnet50_shapes.txt"))
    p.add_argument("--json", help="also write the figures here (rank 0)")
    args = p.parse_args()

    hvd = importlib.import_module(args.module)
    hvd.init()
    torch.set_num_threads(1)
    n, me = hvd.size(), hvd.rank()
    expected = (n - 1) / 2.0  # the average of the ranks' numbers
    results, wrong = [], 0

    def check(tensors):
        nonlocal wrong
        for t in tensors:
            wrong += int((t - expected).abs().gt(1e-4).sum())

    def report(name, seconds, nbytes):
        busbw = nbytes / seconds * 2 * (n - 1) / n / 1e9 if seconds > 0 else 0.0
        results.append({"workload": name, "median_s": seconds, "bytes": nbytes, "busbw_GBps": busbw})
        if me == 0:
            print(f"{name:<34} {seconds * 1e3:12.4f} ms {busbw:10.3f} GB/s busbw", flush=True)

    if me == 0:
        print(f"# {args.module} | {n} ranks | torch {torch.__version__} | median of the slowest"
              f" rank per step over {args.steps} steps")
    workloads = args.workloads.split(",")
    if "a" in workloads:
        grads = [torch.empty(s) for s in load_shapes(args.shapes)]

        def step_a():
            for g in grads:
                g.fill_(float(me))
            handles = [hvd.allreduce_async_(g, name=f"resnet50.{i}")
                       for i, g in reversed(list(enumerate(grads)))]
            for h in handles:
                hvd.synchronize(h)

        report("a: ResNet-50 set (161 tensors)", timed_steps(hvd, step_a, args.steps, args.warmup),
               sum(g.numel() * 4 for g in grads))
        check(grads)
    if "c" in workloads:
        for nbytes in (4, 4096, 256 * 1024, 4 << 20, 64 << 20):
            t = torch.empty(nbytes // 4)

            def step_c():
                t.fill_(float(me))
                hvd.allreduce_(t, name=f"single.{nbytes}")

            steps = args.steps if nbytes < (4 << 20) else max(5, args.steps // 2)
            report(f"c: single tensor {nbytes} B", timed_steps(hvd, step_c, steps, args.warmup),
                   nbytes)
            check([t])
    if "d" in workloads:
        tiny = [torch.empty(256) for _ in range(1000)]

        def step_d():
            for x in tiny:
                x.fill_(float(me))
            handles = [hvd.allreduce_async_(x, name=f"tiny.{i}") for i, x in enumerate(tiny)]
            for h in handles:
                hvd.synchronize(h)

        report("d: 1000 x 256 floats", timed_steps(hvd, step_d, args.steps, args.warmup),
               1000 * 256 * 4)
        check(tiny)

    total_wrong = int(hvd.allreduce(torch.tensor([wrong], dtype=torch.float64), op=hvd.Sum,
                                    name="hvd_bench.py.wrong")[0])
    if me == 0:
        print(f"# wrong elements in our results: {total_wrong}")
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"module": args.module, "ranks": n, "results": results,
                           "wrong": total_wrong}, f, indent=1)
    hvd.shutdown()
    sys.exit(1 if total_wrong else 0)


if __name__ == "__main__":
    main()
