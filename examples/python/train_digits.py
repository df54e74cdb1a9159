"""Data-parallel training of a small MLP on the 8x8 digits data set with horovod_cpp.torch.

    mpirun -np 2 python examples/python/train_digits.py [--epochs 20]

The script is written for horovod.torch: only the import differs. Each rank trains on its
own shard of the training set; DistributedOptimizer averages the gradients, so every rank
ends with the same weights. Rank 0 reports the test accuracy.

Semi-synchronous modes (docs/training.md): --staleness S applies the averaged gradients of S
steps earlier; --local-sgd K averages the weights every K steps (after --local-sgd-warmup N
synchronous steps). flush() at the end of each epoch makes the weights identical again.
--straggle slows the last rank down (30% of its steps sleep 0-20 ms); steps/s is reported.

On GPUs (--cuda), as Horovod's recipe has it: each process pins the GPU of its local rank
(torch.cuda.set_device), the model and data live there, and the gradients are averaged by
NCCL. --adasum uses Horovod's Adasum optimizer instead of averaging: each rank's local update
is combined with Adasum (DistributedOptimizer(op=hvd.Adasum)), at the single-worker learning
rate (no scaling by the number of ranks; docs/training.md, "Adasum").
--ddp wraps the model in hvd.DistributedDataParallel (torch's DDP interface) and steps torch's
own SGD, as a program written for DDP does. --torch-ddp uses torch's own
torch.nn.parallel.DistributedDataParallel instead, on torch.distributed's "horovod_cpp" backend
(hvd.init_process_group()).
--checkpoint PATH: rank 0 alone saves the model and optimizer state after every epoch.
The run exits non-zero unless the test accuracy reaches --min-accuracy and the weights are
identical on every rank.
"""

import argparse
import gzip
import os
import random
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import horovod_cpp.torch as hvd  # was: import horovod.torch as hvd

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_DATA = os.path.join(HERE, "..", "data", "digits.csv.gz")


def load_digits(path):
    """1,797 rows of 64 pixel values (0..16) followed by the label."""
    with gzip.open(path, "rt") as f:
        rows = np.loadtxt(f, delimiter=",", dtype=np.float32)
    return rows[:, :64] / 16.0, rows[:, 64].astype(np.int64)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", default=DEFAULT_DATA)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--lr", type=float, default=0.05, help="scaled by the number of ranks")
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--fp16-allreduce", action="store_true")
    parser.add_argument("--adasum", action="store_true", help="op=hvd.Adasum, lr not scaled")
    parser.add_argument("--staleness", type=int, default=0)
    parser.add_argument("--local-sgd", type=int, default=0, help="averaging period k")
    parser.add_argument("--local-sgd-warmup", type=int, default=0)
    parser.add_argument("--straggle", action="store_true", help="slow down the last rank")
    parser.add_argument("--cuda", action="store_true", help="train on the GPU of the local rank")
    parser.add_argument("--ddp", action="store_true",
                        help="hvd.DistributedDataParallel(model) and torch's SGD, as a DDP "
                             "program has it, instead of hvd.DistributedOptimizer")
    parser.add_argument("--torch-ddp", action="store_true",
                        help="torch.nn.parallel.DistributedDataParallel on torch.distributed's "
                             "horovod_cpp backend, and torch's SGD")
    parser.add_argument("--checkpoint", default="", help="rank 0 saves here after every epoch")
    parser.add_argument("--min-accuracy", type=float, default=0.0,
                        help="exit non-zero below this test accuracy")
    args = parser.parse_args()
    if (args.ddp or args.torch_ddp) and (args.adasum or args.staleness or args.local_sgd):
        parser.error("--ddp and --torch-ddp average gradients as DDP does: no --adasum, "
                     "--staleness, --local-sgd")
    if args.ddp and args.torch_ddp:
        parser.error("--ddp or --torch-ddp, not both")

    hvd.init()
    torch.manual_seed(1234 + hvd.rank())  # different init per rank: broadcast fixes it
    torch.set_num_threads(1)
    device = torch.device("cpu")
    if args.cuda:
        if not torch.cuda.is_available():
            print("--cuda: torch sees no CUDA device", file=sys.stderr)
            sys.exit(77)
        # One GPU per process, chosen by local rank (modulo the device count: several ranks
        # share a GPU only under NCCL_MULTI_RANK_GPU_ENABLE=1, for testing).
        device = torch.device("cuda", hvd.local_rank() % torch.cuda.device_count())
        torch.cuda.set_device(device)

    x, y = load_digits(args.data)
    perm = np.random.default_rng(0).permutation(len(y))  # the same split on every rank
    n_test = len(y) // 5
    test_idx, train_idx = perm[:n_test], perm[n_test:]
    my_idx = train_idx[hvd.rank()::hvd.size()]  # this rank's shard
    x_train = torch.from_numpy(x[my_idx]).to(device)
    y_train = torch.from_numpy(y[my_idx]).to(device)
    x_test = torch.from_numpy(x[test_idx]).to(device)
    y_test = torch.from_numpy(y[test_idx]).to(device)

    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10)).to(device)
    lr_scale = 1 if args.adasum else hvd.size()
    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
    if args.ddp:
        # DDP's way: the module is wrapped (it takes rank 0's weights now and averages the
        # gradients during backward); the optimizer is torch's own.
        model = hvd.DistributedDataParallel(model, compression=compression)
        optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * lr_scale,
                                    momentum=args.momentum)
    elif args.torch_ddp:
        # torch's own DDP, its collectives run by horovod_cpp (the backend "horovod_cpp").
        hvd.init_process_group()  # under torchrun: dist.init_process_group("horovod_cpp")
        model = nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if args.cuda else None)
        optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * lr_scale,
                                    momentum=args.momentum)
    else:
        optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * lr_scale,
                                    momentum=args.momentum)
        optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                             compression=compression, staleness=args.staleness,
                                             op=hvd.Adasum if args.adasum else hvd.Average,
                                             local_sgd_period=args.local_sgd,
                                             local_sgd_warmup_steps=args.local_sgd_warmup)
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        hvd.broadcast_optimizer_state(optimizer, root_rank=0)

    # Every rank must run the same number of steps: use the smallest shard's count.
    steps = hvd.allreduce(torch.tensor(len(my_idx) // args.batch_size), op=hvd.Min).item()
    straggler = args.straggle and hvd.rank() == hvd.size() - 1
    delay_rng = random.Random(99)
    train_time = 0.0
    for epoch in range(args.epochs):
        t0 = time.perf_counter()
        model.train()
        order = torch.randperm(len(my_idx),
                               generator=torch.Generator().manual_seed(epoch)).to(device)
        total = torch.zeros(1, device=device)
        for step in range(steps):
            idx = order[step * args.batch_size:(step + 1) * args.batch_size]
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x_train[idx]), y_train[idx])
            loss.backward()
            if straggler and delay_rng.random() < 0.3:
                time.sleep(0.020 * delay_rng.random())
            optimizer.step()
            total += loss.detach()
        if args.staleness or args.local_sgd:
            optimizer.flush()  # every pending update applied: identical weights again
        mean_loss = hvd.allreduce(total / steps, name="epoch_loss").item()
        train_time += time.perf_counter() - t0
        model.eval()
        with torch.no_grad():
            acc = (model(x_test).argmax(1) == y_test).float().mean().item()
        if hvd.rank() == 0:
            print(f"epoch {epoch + 1:3d}  train loss {mean_loss:.4f}  test accuracy {acc:.4f}",
                  flush=True)
            if args.checkpoint:  # rank 0 only: every rank holds the same weights
                torch.save({"epoch": epoch + 1, "model": model.state_dict(),
                            "optimizer": optimizer.state_dict()}, args.checkpoint)

    # The weights are identical on every rank.
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    spread = (hvd.allreduce(flat, op=hvd.Max) - hvd.allreduce(flat, op=hvd.Min)).abs().max().item()
    if hvd.rank() == 0:
        print(f"final test accuracy {acc:.4f}; max weight difference across ranks {spread:.3g}; "
              f"{steps * args.epochs / train_time:.1f} steps/s on {device}")
    if args.torch_ddp:
        torch.distributed.destroy_process_group()  # it runs on horovod_cpp: before shutdown
    hvd.shutdown()
    if acc < args.min_accuracy or spread != 0:
        sys.exit(1)


if __name__ == "__main__":
    main()
