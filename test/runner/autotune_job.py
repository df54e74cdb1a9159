"""A training-like loop for the autotune test: every step allreduces a set of gradients (the
sizes of a small network) and checks every element, while the autotuner changes the fusion
threshold and cycle time under it. Rank 0 prints "AUTOTUNE_JOB OK <steps>" when all ranks'
results were right at every step.
"""

import sys

import numpy as np

import horovod_cpp as hvd

SIZES = [64, 3 * 3 * 64 * 64, 256, 128 * 128, 1, 4096, 1000 * 64, 333, 2 ** 17, 7]


def main():
    steps = int(sys.argv[1])
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    bad = 0
    for step in range(steps):
        grads = [np.full(s, r + 1 + step % 5, dtype=np.float32) for s in SIZES]
        handles = [hvd.allreduce_async(g, name=f"grad.{k}", op=hvd.Sum)
                   for k, g in enumerate(grads)]
        want = sum(q + 1 + step % 5 for q in range(n))
        for h in handles:
            out = hvd.synchronize(h)
            bad += int(np.count_nonzero(out != want))
    total_bad = int(hvd.allreduce(np.array([bad], dtype=np.int64), op=hvd.Sum, name="bad")[0])
    if r == 0:
        print(f"AUTOTUNE_JOB {'OK' if total_bad == 0 else 'WRONG'} {steps} steps, "
              f"{total_bad} wrong elements", flush=True)
    hvd.shutdown()
    sys.exit(0 if total_bad == 0 else 1)


if __name__ == "__main__":
    main()
