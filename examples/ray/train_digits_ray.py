"""Data-parallel training of the digits MLP on a Ray cluster with horovod_cpp.ray.

    python examples/ray/train_digits_ray.py --num-workers 2            # a local Ray instance
    python examples/ray/train_digits_ray.py --address auto --num-hosts 2 --workers-per-host 4

Written as for horovod.ray: only the imports differ. The training function is the one of
examples/python/train_digits.py (each worker trains on its shard, DistributedOptimizer
averages the gradients); the RayExecutor starts the workers as Ray actors and returns each
one's held-out accuracy and weights. Exits non-zero unless every worker reaches
--min-accuracy with weights identical to rank 0's.
"""

import argparse
import gzip
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_DATA = os.path.join(HERE, "..", "data", "digits.csv.gz")


def train(data_path, epochs, batch_size=32, lr=0.05):
    """Runs in every worker: returns (held-out accuracy, the flattened weights)."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    import horovod_cpp.torch as hvd  # was: import horovod.torch as hvd
    hvd.init()
    torch.manual_seed(1234 + hvd.rank())  # different on every rank: the broadcast fixes it
    torch.set_num_threads(1)
    with gzip.open(data_path, "rt") as f:
        rows = np.loadtxt(f, delimiter=",", dtype=np.float32)
    x, y = torch.from_numpy(rows[:, :64] / 16.0), torch.from_numpy(rows[:, 64].astype(np.int64))
    perm = np.random.default_rng(0).permutation(len(y))  # the same split on every worker
    test_idx, train_idx = perm[:len(y) // 5], perm[len(y) // 5:]
    mine = torch.from_numpy(train_idx[hvd.rank()::hvd.size()])
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
    opt = hvd.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=lr * hvd.size(), momentum=0.9),
        named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    # Every worker runs the same number of steps: the smallest shard's count.
    steps = int(hvd.allreduce(torch.tensor(len(mine) // batch_size), op=hvd.Min).item())
    for epoch in range(epochs):
        order = torch.randperm(len(mine), generator=torch.Generator().manual_seed(epoch))
        for step in range(steps):
            idx = mine[order[step * batch_size:(step + 1) * batch_size]]
            opt.zero_grad()
            F.cross_entropy(model(x[idx]), y[idx]).backward()
            opt.step()
    with torch.no_grad():
        acc = (model(x[test_idx]).argmax(1) == y[test_idx]).float().mean().item()
    return acc, torch.cat([p.detach().flatten() for p in model.parameters()]).numpy()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--address", default=None, help="a running cluster ('auto'); "
                        "default: start a local Ray instance")
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--num-hosts", type=int, default=None,
                        help="instead of --num-workers: this many nodes ...")
    parser.add_argument("--workers-per-host", type=int, default=1, help="... with this many each")
    parser.add_argument("--use-gpu", action="store_true")
    parser.add_argument("--data", default=DEFAULT_DATA)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--min-accuracy", type=float, default=0.95)
    args = parser.parse_args()

    import ray

    from horovod_cpp.ray import RayExecutor  # was: from horovod.ray import RayExecutor
    if args.address:
        ray.init(address=args.address)
    else:
        ray.init(num_cpus=args.num_workers, include_dashboard=False)
    settings = RayExecutor.create_settings(timeout_s=120)
    if args.num_hosts:
        executor = RayExecutor(settings, num_hosts=args.num_hosts,
                               num_workers_per_host=args.workers_per_host, use_gpu=args.use_gpu)
    else:
        executor = RayExecutor(settings, num_workers=args.num_workers, use_gpu=args.use_gpu)
    executor.start()
    try:
        results = executor.run(train, args=[os.path.abspath(args.data), args.epochs])
    finally:
        executor.shutdown()
    accs = [acc for acc, _ in results]
    same = all(np.array_equal(w, results[0][1]) for _, w in results[1:])
    print(f"held-out accuracy per worker {[round(a, 4) for a in accs]}; "
          f"weights identical on all {len(results)} workers: {same}")
    if min(accs) < args.min_accuracy or not same:
        sys.exit(1)


if __name__ == "__main__":
    main()
