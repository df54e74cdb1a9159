"""A training step as a PyTorch user runs it: DistributedDataParallel against
horovod_cpp.torch.DistributedOptimizer and horovod_cpp.torch.DistributedDataParallel, and the
same step with no exchange (the floor).

    mpirun -np 2 python examples/benchmark/ddp_vs_hvd.py [--shapes one,small,resnet50]
    mpirun -np 2 python examples/benchmark/ddp_vs_hvd.py --smoke     # CI: correctness only

The step has almost no compute, so what is left after subtracting the floor is the cost of
the exchange as each framework organises it (hooks, buckets or per-tensor collectives, waits):
zero_grad, loss = sum over the parameters of (p * c).sum(), backward, SGD step. Shapes:
  one       one float parameter;
  small     1000 parameters of 256 floats (the shape of models with many small tensors);
  resnet50  ResNet-50's 161 parameter shapes (resnet50_shapes.txt, 97.5 MiB).
DDP is torch.distributed with gloo (its defaults: 25 MiB buckets) over loopback; its rendezvous
port is chosen by rank 0 and sent to the others through horovod_cpp. The variants take turns,
one step each, for --steps turns after --warmup; a step's time is the slowest rank's. Variants:
floor, ddp (torch's), hvd (DistributedOptimizer), hvd_ddp (horovod_cpp's DDP wrapper around
torch's SGD), ddp_hvd (torch's DDP on a group of torch.distributed's "horovod_cpp" backend).
Printed: each variant's median step, each exchange (the median over turns of the step's time
minus the floor's in the same turn) and the ratio of ours to DDP's.

--smoke runs a few steps of each variant and checks that every rank's parameters are equal
to each other and to the SGD result computed here independently: c is chosen so that every
gradient, average and update is exact in float32, so the comparison is exact.
"""

import argparse
import os
import socket
import statistics
import sys
import time

import torch
import torch.distributed as dist

import horovod_cpp.torch as hvd
from hvd_bench import load_shapes  # this folder's resnet50_shapes.txt reader

LR = 0.25


def shape_set(which, here):
    if which == "one":
        return [(1,)]
    if which == "small":
        return [(256,)] * 1000
    if which == "resnet50":
        return load_shapes(os.path.join(here, "resnet50_shapes.txt"))
    raise ValueError(f"unknown shape set {which!r} (one, small, resnet50)")


def initial(shape, i):
    """Parameter i's starting value, the same on every rank: small integers (exact)."""
    n = 1
    for d in shape:
        n *= d
    return (torch.arange(n, dtype=torch.float32) % 5 + i % 3).view(shape)


def coefficient(shape, i, rank):
    """The rank's c for parameter i (its gradient): integers, so that the average over n
    ranks, (n + 1) / 2 + k, is a multiple of 1/2 and every SGD update with LR = 1/4 is exact."""
    n = 1
    for d in shape:
        n *= d
    return ((torch.arange(n, dtype=torch.float32) + i) % 7 + rank + 1).view(shape)


class Model(torch.nn.Module):
    """The parameters and the step's loss: sum over the parameters of (p * c).sum()."""

    def __init__(self, shapes, rank):
        super().__init__()
        self.ps = torch.nn.ParameterList(
            [torch.nn.Parameter(initial(s, i)) for i, s in enumerate(shapes)])
        self.cs = [coefficient(s, i, rank) for i, s in enumerate(shapes)]
        self.pairs = list(zip(self.ps, self.cs))  # ParameterList's indexing is slow Python

    def forward(self):
        return sum((p * c).sum() for p, c in self.pairs)


#: Variants that are ours, in the order their columns are printed.
OURS = ("hvd", "hvd_ddp", "ddp_hvd")


def make_step(kind, shapes, rank, hvd_group=None):
    """(model, step()) of one variant: 'floor' (no exchange), 'ddp', 'hvd', 'hvd_ddp' or
    'ddp_hvd' (torch's DDP over hvd_group, a group of the horovod_cpp backend)."""
    model = Model(shapes, rank)
    if kind in ("ddp", "hvd_ddp", "ddp_hvd"):
        if kind == "hvd_ddp":
            net = hvd.DistributedDataParallel(model)
        else:
            net = torch.nn.parallel.DistributedDataParallel(
                model, process_group=hvd_group if kind == "ddp_hvd" else None)
        opt = torch.optim.SGD(net.parameters(), lr=LR)
    else:
        net = model
        opt = torch.optim.SGD(model.parameters(), lr=LR)
        if kind == "hvd":
            opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())

    def step():
        opt.zero_grad()
        net().backward()
        opt.step()

    return model, step


def timed(steps_of, steps, warmup, tag):
    """{variant: the slowest rank's time of each step, in seconds}. The variants take turns
    step by step, so that a change in the machine's load falls on all of them alike."""
    for _ in range(warmup):
        for step in steps_of.values():
            step()
    hvd.barrier()
    local = {kind: [] for kind in steps_of}
    for _ in range(steps):
        for kind, step in steps_of.items():
            t0 = time.perf_counter()
            step()
            local[kind].append(time.perf_counter() - t0)
    times = torch.tensor([local[k] for k in steps_of], dtype=torch.float64)
    every = hvd.allgather(times.unsqueeze(0), name=f"ddp_vs_hvd.times.{tag}")
    slowest = every.max(dim=0).values  # [variants, steps]
    return {kind: slowest[i].tolist() for i, kind in enumerate(steps_of)}


def check(model, shapes, steps, tag):
    """Mismatches of the parameters after `steps` steps against the independent SGD result
    and against the other ranks (0 when all agree)."""
    n, wrong = hvd.size(), 0
    flat = torch.cat([p.detach().reshape(-1) for p in model.ps])
    for i, (s, p) in enumerate(zip(shapes, model.ps)):
        avg = sum(coefficient(s, i, r) for r in range(n)) / n
        expected = initial(s, i)
        for _ in range(steps):
            expected = expected - LR * avg
        wrong += int((p.detach() != expected).sum())
    hi = hvd.allreduce(flat, op=hvd.Max, name=f"ddp_vs_hvd.max.{tag}")
    lo = hvd.allreduce(flat, op=hvd.Min, name=f"ddp_vs_hvd.min.{tag}")
    wrong += int((hi != lo).sum())
    return wrong


def exchange_columns(times):
    """The exchanges (the median over steps of the step's time minus the floor's in the same
    turn, ms) of DDP and of each of ours that ran, and ours / DDP's."""
    if not {"floor", "ddp"} <= times.keys():
        return ""

    def exchange(k):
        return statistics.median(a - f for a, f in zip(times[k], times["floor"])) * 1e3

    ddp = exchange("ddp")
    out = f" {ddp:10.3f}"
    for k in OURS:
        if k in times:
            ours = exchange(k)
            out += f" {ours:10.3f} {ours / ddp if ddp > 0 else float('nan'):8.2f}x"
    return out


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="one,small,resnet50")
    ap.add_argument("--variants", default="floor,ddp,hvd,hvd_ddp,ddp_hvd")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--smoke", action="store_true",
                    help="a few steps of each variant, checking the parameters (CI)")
    args = ap.parse_args()
    if args.smoke:  # the floor does not average, so only the exchanging variants are checked
        args.steps, args.warmup = 3, 0
        args.variants = ",".join(v for v in args.variants.split(",") if v != "floor")

    hvd.init()
    torch.set_num_threads(1)
    n, me = hvd.size(), hvd.rank()
    port = hvd.broadcast_object(free_port() if me == 0 else None, root_rank=0)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=me, world_size=n)
    # Every rank, on torch.distributed's horovod_cpp backend (registered by the import).
    hvd_group = dist.new_group(list(range(n)), backend="horovod_cpp")

    variants = args.variants.split(",")
    if me == 0:
        print(f"# {n} ranks | torch {torch.__version__} | median of the slowest rank per step "
              f"over {args.steps} steps after {args.warmup}, the variants taking turns | "
              f"exchange: median of (step - floor's step of the same turn) | ms", flush=True)
        if not args.smoke:
            ours = [v for v in OURS if v in variants]
            print(f"{'shapes':<10} " + " ".join(f"{v:>9}" for v in variants) +
                  ("   exch ddp" if "ddp" in variants else "") +
                  "".join(f" {'exch ' + v:>10} {v + '/ddp':>9}" for v in ours), flush=True)
    failures = 0
    for which in args.shapes.split(","):
        shapes = shape_set(which, here)
        if args.smoke:
            for kind in variants:
                model, step = make_step(kind, shapes, me, hvd_group)
                tag = f"{which}.{kind}"
                for _ in range(args.steps):
                    step()
                wrong = check(model, shapes, args.steps, tag)
                failures += wrong > 0
                if me == 0:
                    print(f"{tag:<16} {'ok' if wrong == 0 else f'{wrong} wrong values'}",
                          flush=True)
            continue
        steps_of = {kind: make_step(kind, shapes, me, hvd_group)[1] for kind in variants}
        times = timed(steps_of, args.steps, args.warmup, which)
        del steps_of
        if me == 0:
            print(f"{which:<10} " + " ".join(f"{statistics.median(times[v]) * 1e3:9.3f}"
                                             for v in variants) + exchange_columns(times),
                  flush=True)
    failures = hvd.allreduce(torch.tensor([failures]), op=hvd.Sum, name="ddp_vs_hvd.verdict")
    dist.destroy_process_group()
    hvd.shutdown()
    return 1 if int(failures) else 0


if __name__ == "__main__":
    sys.exit(main())
