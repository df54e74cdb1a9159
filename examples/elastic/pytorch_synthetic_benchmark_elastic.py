"""Elastic synthetic benchmark: DistributedOptimizer steps on random data, inside
horovod_cpp.torch.elastic.run, so the job goes on when workers leave or join.

    hvdrun -np 4 --min-np 2 --max-np 4 --host-discovery-script ./discover.sh \
        python examples/elastic/pytorch_synthetic_benchmark_elastic.py

Written for horovod.torch's elastic API (the same program runs under horovodrun with
`import horovod.torch as hvd`): the model, the optimizer and the benchmark's progress
(iteration, batch) form a TorchState committed every --batches-per-commit batches; after a
failure the survivors restore the last commit and go on at the new size, and the learning rate
follows the number of workers through a reset callback. Reports img/s per iteration on rank 0
and the mean with a 95% interval at the end. Also runs without a driver (mpirun / hvdrun
without elastic flags): the membership then never changes.
"""

import argparse
import time

import numpy as np
import torch
import torch.nn as nn

import horovod_cpp.torch as hvd  # was: import horovod.torch as hvd


def build_model(name):
    if name == "mlp":
        return nn.Sequential(nn.Linear(1024, 2048), nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(),
                             nn.Linear(2048, 1000)), (1024,)
    return nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(64 * 8 * 8, 1000)), (3, 32, 32)


def main():
    p = argparse.ArgumentParser(description="elastic synthetic benchmark (PyTorch)")
    p.add_argument("--model", choices=["mlp", "cnn"], default="mlp")
    p.add_argument("--batch-size", type=int, default=32, help="per worker")
    p.add_argument("--lr", type=float, default=0.01, help="per worker; scaled by the size")
    p.add_argument("--num-warmup-batches", type=int, default=3)
    p.add_argument("--num-batches-per-iter", type=int, default=10)
    p.add_argument("--num-iters", type=int, default=10)
    p.add_argument("--batches-per-commit", type=int, default=5)
    p.add_argument("--fp16-allreduce", action="store_true")
    args = p.parse_args()

    hvd.init()
    torch.manual_seed(0)
    model, in_shape = build_model(args.model)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size())
    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                         compression=compression)
    data = torch.randn(args.batch_size, *in_shape)
    target = torch.randint(0, 1000, (args.batch_size,))

    def train_batch(state):
        optimizer.zero_grad()
        nn.functional.cross_entropy(state.model(data), target).backward()
        optimizer.step()
        state.batch += 1
        if state.batch % args.batches_per_commit == 0:
            state.commit()

    def log(text):
        if hvd.rank() == 0:
            print(text, flush=True)

    state = hvd.elastic.TorchState(model, optimizer, iteration=0, batch=0, img_secs=[])

    def on_state_reset():
        # The learning rate follows the number of workers.
        for group in optimizer.param_groups:
            group["lr"] = args.lr * hvd.size()
        log(f"reset: now {hvd.size()} workers, at iteration {state.iteration}")

    state.register_reset_callbacks([on_state_reset])

    @hvd.elastic.run
    def run_benchmark(state):
        log(f"model {args.model}, batch size {args.batch_size} per worker, "
            f"{hvd.size()} workers")
        for _ in range(args.num_warmup_batches):
            train_batch(state)
        while state.iteration < args.num_iters:
            t0 = time.perf_counter()
            for _ in range(args.num_batches_per_iter):
                train_batch(state)
            img_sec = args.batch_size * args.num_batches_per_iter / (time.perf_counter() - t0)
            log(f"iter #{state.iteration}: {img_sec:.1f} img/s per worker "
                f"({hvd.size()} workers)")
            state.img_secs.append(img_sec * hvd.size())
            state.iteration += 1
            state.commit()

    run_benchmark(state)
    total = np.array(state.img_secs)
    log(f"total img/s: {total.mean():.1f} +-{1.96 * total.std():.1f} over "
        f"{len(total)} iterations")


if __name__ == "__main__":
    main()
