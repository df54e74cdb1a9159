"""The benchmark workloads through horovod_cpp.tensorflow (the TensorFlow ops), eagerly and
inside tf.function, beside hvd_bench.py's torch path.

    mpirun -np 2 .venv-tf/bin/python examples/benchmark/hvd_bench_tf.py [--json F]

Workloads (as hvd_bench.py, docs/benchmarks.md):
  a  the 161 ResNet-50 gradient tensors (resnet50_shapes.txt) as tf.Variables, averaged once per
     step: eagerly with one allreduce per tensor (each eager op waits for its result), eagerly
     with one grouped_allreduce, and in a tf.function with one allreduce per tensor (the
     executor runs them concurrently);
  c  one tensor of 4 B averaged (per-op overhead), eagerly and in a tf.function;
  d  1000 tensors of 256 floats per step: eagerly grouped, and in a tf.function.
Every step is timed on every rank after a barrier; the slowest rank's time is the step's; the
median over --steps steps after warm-up is reported. Every result is checked (the inputs are the
rank's number, so the average is known) and the run fails on a wrong value.
"""

import argparse
import json
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import horovod_cpp.tensorflow as hvd  # noqa: E402


def load_shapes(path):
    shapes = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#"):
                shapes.append(tuple(int(x) for x in line.split()))
    return shapes


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workloads", default="a,c,d")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--shapes", default=os.path.join(here, "resnet50_shapes.txt"))
    p.add_argument("--json", help="also write the figures here (rank 0)")
    args = p.parse_args()

    hvd.init()
    n, me = hvd.size(), hvd.rank()
    expected = (n - 1) / 2.0
    results, wrong = [], [0]

    def check(tensors):
        for t in tensors:
            wrong[0] += int(np.sum(np.abs(np.asarray(t) - expected) > 1e-4))

    def timed(step):
        times = []
        for i in range(args.warmup + args.steps):
            hvd.barrier()
            t0 = time.perf_counter()
            out = step()
            dt = time.perf_counter() - t0
            slowest = hvd.allreduce(tf.constant([dt], tf.float64), op=hvd.Max,
                                    name="hvd_bench_tf.time")
            if i >= args.warmup:
                times.append(float(slowest[0]))
        check(out)
        return statistics.median(times)

    def report(name, seconds, nbytes):
        busbw = nbytes / seconds * 2 * (n - 1) / n / 1e9 if seconds > 0 else 0.0
        results.append({"workload": name, "median_s": seconds, "bytes": nbytes,
                        "busbw_GBps": busbw})
        if me == 0:
            print(f"{name:<44} {seconds * 1e3:12.4f} ms {busbw:10.3f} GB/s busbw", flush=True)

    if me == 0:
        print(f"# horovod_cpp.tensorflow | {n} ranks | TensorFlow {tf.__version__} | median of "
              f"the slowest rank per step over {args.steps} steps")
    if "a" in args.workloads:
        grads = [tf.Variable(tf.zeros(s)) for s in load_shapes(args.shapes)]
        nbytes = sum(int(np.prod(g.shape)) * 4 for g in grads)
        for g in grads:
            g.assign(tf.fill(g.shape, float(me)))

        def a_eager():
            return [hvd.allreduce(g, name=f"resnet50.{i}")
                    for i, g in reversed(list(enumerate(grads)))]

        def a_grouped():
            return hvd.grouped_allreduce([g.read_value() for g in grads])

        @tf.function
        def a_function():
            return [hvd.allreduce(g.read_value()) for g in reversed(grads)]

        report("a: ResNet-50 set, eager per tensor", timed(a_eager), nbytes)
        report("a: ResNet-50 set, eager grouped", timed(a_grouped), nbytes)
        report("a: ResNet-50 set, tf.function", timed(a_function), nbytes)
    if "c" in args.workloads:
        t = tf.fill([1], float(me))

        @tf.function
        def c_function(x):
            return hvd.allreduce(x)

        report("c: single tensor 4 B, eager", timed(lambda: [hvd.allreduce(t)]), 4)
        report("c: single tensor 4 B, tf.function", timed(lambda: [c_function(t)]), 4)
    if "d" in args.workloads:
        tiny = [tf.fill([256], float(me)) for _ in range(1000)]

        @tf.function
        def d_function(xs):
            return [hvd.allreduce(x) for x in xs]

        report("d: 1000 x 256 floats, eager grouped", timed(lambda: hvd.grouped_allreduce(tiny)),
               1000 * 256 * 4)
        report("d: 1000 x 256 floats, tf.function", timed(lambda: d_function(tiny)),
               1000 * 256 * 4)

    total_wrong = int(hvd.allreduce(tf.constant([float(wrong[0])], tf.float64), op=hvd.Sum,
                                    name="hvd_bench_tf.wrong")[0])
    if me == 0:
        print(f"# wrong elements in our results: {total_wrong}")
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"module": "horovod_cpp.tensorflow", "ranks": n, "results": results,
                           "wrong": total_wrong}, f, indent=1)
    hvd.shutdown()
    sys.exit(1 if total_wrong else 0)


if __name__ == "__main__":
    main()
