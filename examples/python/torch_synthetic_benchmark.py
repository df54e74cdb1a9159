"""Synthetic-gradient benchmark: time DistributedOptimizer steps on random data.

    mpirun -np 2 python examples/python/torch_synthetic_benchmark.py [--model mlp]

Like Horovod's pytorch_synthetic_benchmark.py (written here from scratch): random inputs,
a fixed model, warm-up steps, then timed iterations of --steps-per-iter steps; reports
samples/s per rank and in total, with the mean and a 95% interval over iterations.
"""

import argparse
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import horovod_cpp.torch as hvd


def build_model(name, width):
    if name == "mlp":
        return nn.Sequential(nn.Linear(1024, width), nn.ReLU(), nn.Linear(width, width),
                             nn.ReLU(), nn.Linear(width, 1000)), (1024,)
    if name == "cnn":
        return nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Flatten(), nn.Linear(64 * 8 * 8, 1000)), (3, 32, 32)
    raise ValueError(name)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", choices=["mlp", "cnn"], default="mlp")
    p.add_argument("--width", type=int, default=2048)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--warmup-steps", type=int, default=3)
    p.add_argument("--steps-per-iter", type=int, default=5)
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--fp16-allreduce", action="store_true")
    p.add_argument("--groups", type=int, default=0, help="grouped allreduce of N groups")
    args = p.parse_args()

    hvd.init()
    torch.manual_seed(0)
    model, in_shape = build_model(args.model, args.width)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    opt = hvd.DistributedOptimizer(
        opt, named_parameters=model.named_parameters(),
        compression=hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none,
        groups=args.groups or None)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)

    data = torch.randn(args.batch_size, *in_shape)
    target = torch.randint(0, 1000, (args.batch_size,))

    def step():
        opt.zero_grad()
        F.cross_entropy(model(data), target).backward()
        opt.step()

    nparams = sum(p.numel() for p in model.parameters())
    if hvd.rank() == 0:
        print(f"model {args.model}: {nparams / 1e6:.2f} M parameters, batch {args.batch_size} "
              f"per rank, {hvd.size()} ranks", flush=True)
    for _ in range(args.warmup_steps):
        step()
    rates = []
    for i in range(args.iters):
        t0 = time.perf_counter()
        for _ in range(args.steps_per_iter):
            step()
        rate = args.batch_size * args.steps_per_iter / (time.perf_counter() - t0)
        rates.append(rate)
        if hvd.rank() == 0:
            print(f"iter {i}: {rate:.1f} samples/s per rank", flush=True)
    mean, conf = np.mean(rates), 1.96 * np.std(rates)
    if hvd.rank() == 0:
        print(f"samples/s per rank: {mean:.1f} +- {conf:.1f}")
        print(f"total samples/s on {hvd.size()} ranks: {hvd.size() * mean:.1f} "
              f"+- {hvd.size() * conf:.1f}")
    hvd.shutdown()


if __name__ == "__main__":
    main()
