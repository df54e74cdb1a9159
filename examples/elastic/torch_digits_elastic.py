"""Elastic data-parallel training of the digits MLP with horovod_cpp.torch.elastic.

    hvdrun -np 3 --min-np 2 --max-np 3 --host-discovery-script ./discover.sh \
        python examples/elastic/torch_digits_elastic.py --epochs 30

Written for horovod.torch's elastic API (only the import differs): the model, the optimizer,
the ElasticSampler and the position (epoch, batch) form a TorchState, committed every
--commit-every batches and at the end of each epoch. When a worker dies the survivors restore
the last commit and go on at the new size; when discovery lists a host again the job grows at
the next commit. The learning rate follows the number of workers (a reset callback), and the
sampler gives each worker its share of the samples not yet trained on in this epoch.

At the end every worker prints `rank R/S: held-out accuracy A, parameters identical to rank
0's` (or `differ from`) and exits non-zero below --min-accuracy or when its parameters differ.
--step-sleep-ms slows every step (tests kill a worker mid-epoch). Also runs without a driver
(mpirun, hvdrun without elastic flags): the membership then never changes.
"""

import argparse
import gzip
import os
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
    p = argparse.ArgumentParser(description="elastic digits training (PyTorch)")
    p.add_argument("--data", default=DEFAULT_DATA)
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=32, help="per worker")
    p.add_argument("--lr", type=float, default=0.05, help="per worker; scaled by the size")
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--commit-every", type=int, default=5, help="batches between commits")
    p.add_argument("--step-sleep-ms", type=float, default=0.0)
    p.add_argument("--min-accuracy", type=float, default=0.0)
    args = p.parse_args()

    hvd.init()
    torch.set_num_threads(1)
    torch.manual_seed(1234 + hvd.rank())  # different on every worker: the first sync fixes it

    x, y = load_digits(args.data)
    perm = np.random.default_rng(0).permutation(len(y))  # the same split on every worker
    n_test = len(y) // 5
    test_idx, train_idx = perm[:n_test], perm[n_test:]
    train_set = torch.utils.data.TensorDataset(torch.from_numpy(x[train_idx]),
                                               torch.from_numpy(y[train_idx]))
    x_test, y_test = torch.from_numpy(x[test_idx]), torch.from_numpy(y[test_idx])

    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size(),
                                momentum=args.momentum)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    sampler = hvd.elastic.ElasticSampler(train_set, shuffle=True, seed=7)
    loader = torch.utils.data.DataLoader(train_set, batch_size=args.batch_size,
                                         sampler=sampler)
    state = hvd.elastic.TorchState(model, optimizer, sampler=sampler, epoch=0, batch=0)

    def on_reset():
        for group in optimizer.param_groups:
            group["lr"] = args.lr * hvd.size()

    state.register_reset_callbacks([on_reset])

    def accuracy():
        model.eval()
        with torch.no_grad():
            acc = (model(x_test).argmax(1) == y_test).float().mean().item()
        model.train()
        return acc

    @hvd.elastic.run
    def train(state):
        for state.epoch in range(state.epoch, args.epochs):
            # After a reset the sampler yields only this epoch's samples not yet committed.
            for i, (xb, yb) in enumerate(loader):
                optimizer.zero_grad()
                F.cross_entropy(model(xb), yb).backward()
                optimizer.step()
                if args.step_sleep_ms:
                    time.sleep(args.step_sleep_ms / 1000.0)
                sampler.record_batch(i, args.batch_size)
                state.batch += 1
                if state.batch % args.commit_every == 0:
                    state.commit()
            acc = accuracy()
            if hvd.rank() == 0:
                print(f"epoch {state.epoch + 1:2d}  size {hvd.size()}  held-out accuracy "
                      f"{acc:.4f}", flush=True)
            # The commit holds the next epoch's start: a restore never repeats this one.
            state.batch = 0
            sampler.set_epoch(state.epoch + 1)
            state.epoch += 1
            state.commit()

    train(state)
    acc = accuracy()
    flat = torch.cat([t.detach().flatten() for t in model.parameters()])
    same = bool(torch.equal(hvd.broadcast(flat, root_rank=0, name="final.params"), flat))
    print(f"rank {hvd.rank()}/{hvd.size()}: held-out accuracy {acc:.4f}, parameters "
          f"{'identical to' if same else 'differ from'} rank 0's", flush=True)
    hvd.shutdown()
    if acc < args.min_accuracy or not same:
        sys.exit(1)


if __name__ == "__main__":
    main()
