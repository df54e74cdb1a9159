"""The Python twin of hvd_bench: workloads a, c and d through a horovod.torch-style module.

    mpirun -np 2 python examples/benchmark/hvd_bench.py [--module horovod_cpp.torch] [--json F]

Runs the same training-like workloads as the C++ tool (docs/benchmarks.md), through the
Python binding, so horovod_cpp.torch can be compared with horovod.torch on one script
(--module horovod.torch where Horovod is installed):
  a  the 161 ResNet-50 gradient tensors (resnet50_shapes.txt), averaged once per step with
     one allreduce_async_ per tensor submitted in reverse order, then all synchronized;
  c  one tensor of 4 B, 4 KiB, 256 KiB, 4 MiB, 64 MiB averaged;
  d  1000 tensors of 256 floats per step, all submitted, then all synchronized.
Timing (--rule):
  reference  (the default) the rule of shared/bench/bench_torch.py, which produced the
             reference Horovod figures: warm-up steps, one barrier, then the steps back to
             back, each timed on every rank; after the loop the per-rank times are allgathered
             and the slowest rank's time is each step's.
  barrier    the older rule: a library barrier before every step, then an allreduce (Max) of
             the step's time; after a barrier both ranks' threads start cold and out of phase,
             which adds about 10 us to a small collective.
The median over --steps steps is reported. Each rank checks every result (inputs are the
rank's number, so the average is known) and the run fails on a wrong value. Under the
barrier rule each step refills its inputs; under the reference rule (whose script never
refills) they are filled once before the warm-up: averaging an average leaves it unchanged, so
the check after the last step still tells a wrong reduction (a sum, a skipped step, ...).
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


def timed_steps_barrier(hvd, step, steps, warmup):
    """--rule barrier: median over steps of the slowest rank's time per step, in seconds; a
    library barrier before every step, the slowest rank found by an allreduce per step."""
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


def timed_steps_reference(hvd, step, steps, warmup):
    """--rule reference (bench_torch.py's): warm-up, one barrier, the steps back to back timed
    on every rank, then the per-rank times allgathered; median over steps of the slowest
    rank's time, in seconds."""
    for _ in range(warmup):
        step()
    hvd.barrier()
    local = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        local.append(time.perf_counter() - t0)
    every = hvd.allgather(torch.tensor(local, dtype=torch.float64).view(1, -1),
                          name=f"hvd_bench.py.times.{steps}")  # [ranks, steps]
    return statistics.median(every.max(dim=0).values.tolist())


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--module", default="horovod_cpp.torch", help="horovod.torch-style module")
    p.add_argument("--workloads", default="a,c,d")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--c-sizes", default="4,4096,262144,4194304,67108864",
                   help="bytes of workload c's tensors, comma-separated")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--shapes", default=os.path.join(here, "resnet50_shapes.txt"))
    p.add_argument("--rule", choices=("reference", "barrier"), default="reference",
                   help="timing rule (see above); reference: bench_torch.py's")
    p.add_argument("--json", help="also write the figures here (rank 0)")
    args = p.parse_args()
    reference = args.rule == "reference"
    timed_steps = timed_steps_reference if reference else timed_steps_barrier

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
              f" rank per step over {args.steps} steps | rule {args.rule}")
    workloads = args.workloads.split(",")
    if "a" in workloads:
        grads = [torch.full(s, float(me)) for s in load_shapes(args.shapes)]

        def step_a():
            if not reference:
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
        for nbytes in (int(x) for x in args.c_sizes.split(",")):
            t = torch.full((nbytes // 4,), float(me))

            def step_c():
                if not reference:
                    t.fill_(float(me))
                hvd.allreduce_(t, name=f"single.{nbytes}")

            steps = args.steps if nbytes < (4 << 20) else max(5, args.steps // 2)
            report(f"c: single tensor {nbytes} B", timed_steps(hvd, step_c, steps, args.warmup),
                   nbytes)
            check([t])
    if "d" in workloads:
        tiny = [torch.full((256,), float(me)) for _ in range(1000)]

        def step_d():
            if not reference:
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
                json.dump({"module": args.module, "ranks": n, "rule": args.rule,
                           "results": results, "wrong": total_wrong}, f, indent=1)
    hvd.shutdown()
    sys.exit(1 if total_wrong else 0)


if __name__ == "__main__":
    main()
