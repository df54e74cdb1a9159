"""A worker started by torchrun (or by a test setting torch's env:// variables itself).

    torchrun ... torchrun_worker.py MODE OUT_DIR

MODE: check (every collective's result checked against what this rank computes on its own),
pg_before / pg_after (torch.distributed.init_process_group before / after hvd.init(), the
same sums from both), backend (init_process_group("horovod_cpp") starts horovod_cpp itself;
torch.distributed's collectives and torch's DDP run on it), fail (rank 1 exits with 3 after
the first collective), restart (rank 1 of the first attempt exits with 3 after init; the next
attempt runs `check`), grow TARGET
(steps until the job has run 10 at TARGET ranks: a torchrun node joins meanwhile). Each rank
that gets through writes OUT_DIR/ok.<attempt>.<rank>.
"""

import os
import sys
import time

import torch

import horovod_cpp.torch as hvd


def expected_place():
    """(local_rank, local_size, cross_rank, cross_size) this rank must get."""
    if os.environ.get("LOCAL_WORLD_SIZE"):
        size = int(os.environ["WORLD_SIZE"])
        local_size = int(os.environ["LOCAL_WORLD_SIZE"])
        return (int(os.environ["LOCAL_RANK"]), local_size, int(os.environ["GROUP_RANK"]),
                size // local_size)
    # Plain env:// on this one host: every rank local, ordered by rank.
    return (int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), 0, 1)


def check_collectives(tag):
    r, n = hvd.rank(), hvd.size()
    for dtype in (torch.float32, torch.float64, torch.int64):
        x = (torch.arange(1000) * (r + 1) + r).to(dtype)
        got = hvd.allreduce(x, op=hvd.Sum, name=f"{tag}.sum.{dtype}")
        want = (torch.arange(1000) * (n * (n + 1) // 2) + n * (n - 1) // 2).to(dtype)
        assert torch.equal(got, want), (tag, dtype, got[:5], want[:5])
    # Uneven first dimensions: rank k gives k+1 rows of value 10k + column.
    mine = torch.arange(3, dtype=torch.float32).repeat(r + 1, 1) + 10 * r
    got = hvd.allgather(mine, name=f"{tag}.gather")
    want = torch.cat([torch.arange(3, dtype=torch.float32).repeat(k + 1, 1) + 10 * k
                      for k in range(n)])
    assert torch.equal(got, want), (tag, got, want)
    root = n - 1
    b = torch.full((257,), float(r))
    got = hvd.broadcast(b, root_rank=root, name=f"{tag}.bcast")
    assert torch.equal(got, torch.full((257,), float(root))), (tag, got[:4])
    # A process set after init reaches the rendezvous store again (its own Gloo group).
    evens = hvd.add_process_set(list(range(0, n, 2)))
    if r % 2 == 0:
        got = hvd.allreduce(torch.tensor([float(r)]), op=hvd.Sum, process_set=evens,
                            name=f"{tag}.evens")
        assert got.item() == float(sum(range(0, n, 2))), (tag, got)
    hvd.remove_process_set(evens)


def grow(out, target):
    """Steps of a checked allreduce, resumed from rank 0's step file, until the job has run
    10 steps at `target` ranks (torchrun restarts the workers when a node joins). Rank 0
    appends "step size" to OUT/sizes."""
    r, n = hvd.rank(), hvd.size()
    path = os.path.join(out, "step")
    step = int(open(path).read()) if os.path.exists(path) else 0
    at_target = 0
    while at_target < 10:
        got = hvd.allreduce(torch.full((4,), float(r + 1)), op=hvd.Sum, name="grow")
        assert torch.equal(got, torch.full((4,), n * (n + 1) / 2)), (n, got)
        step += 1
        at_target += n == target
        if r == 0:
            with open(path + ".tmp", "w") as f:
                f.write(str(step))
            os.replace(path + ".tmp", path)
            with open(os.path.join(out, "sizes"), "a") as f:
                f.write(f"{step} {n}\n")
        assert step < 3000, "the job never grew"
        time.sleep(0.05)


def check_backend():
    """torch.distributed on the horovod_cpp backend: collectives, one step of torch's DDP
    whose gradient is the mean of every rank's, and send/recv around the ring, each checked
    against this rank's own values."""
    import torch.distributed as dist
    r, n = hvd.rank(), hvd.size()
    assert dist.get_backend() == "horovod_cpp", dist.get_backend()
    assert (dist.get_rank(), dist.get_world_size()) == (r, n)
    x = torch.arange(6, dtype=torch.float64) * (r + 1)
    dist.all_reduce(x)
    assert torch.equal(x, torch.arange(6, dtype=torch.float64) * (n * (n + 1) // 2)), x
    gathered = [torch.empty(2) for _ in range(n)]
    dist.all_gather(gathered, torch.full((2,), float(r)))
    assert all(torch.equal(g, torch.full((2,), float(k))) for k, g in enumerate(gathered))
    torch.manual_seed(r)  # different starting weights: DDP makes them rank 0's
    model = torch.nn.Linear(3, 1, bias=False)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    w0 = model.weight.detach().clone()
    ddp(torch.full((1, 3), float(r + 1))).sum().backward()
    # d/dw of w.x is x: the mean over the ranks of (r + 1) is (n + 1) / 2 in every element.
    assert torch.allclose(model.weight.grad, torch.full((1, 3), (n + 1) / 2)), model.weight.grad
    everyone = [torch.empty_like(w0) for _ in range(n)]
    dist.all_gather(everyone, w0)
    assert all(torch.equal(w, everyone[0]) for w in everyone), everyone
    check_subgroup()
    # send/recv around the ring, through the group's store (torchrun's agent store here).
    dist.send(torch.full((4,), float(r)), dst=(r + 1) % n)
    got = torch.empty(4)
    dist.recv(got, src=(r - 1) % n)
    assert torch.equal(got, torch.full((4,), float((r - 1) % n))), got
    dist.barrier()
    dist.destroy_process_group()


def check_subgroup(backend=None):
    """A torch group of every rank but the last (horovod_cpp's process set of those ranks):
    an all_reduce over its members only."""
    import torch.distributed as dist
    r, n = dist.get_rank(), dist.get_world_size()
    members = list(range(max(1, n - 1)))
    sub = dist.new_group(members, backend=backend)
    if r in members:
        x = torch.full((3,), float(r + 1))
        dist.all_reduce(x, group=sub)
        assert torch.equal(x, torch.full((3,), float(sum(m + 1 for m in members)))), x
    dist.barrier()


def main():
    mode, out = sys.argv[1], sys.argv[2]
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    if mode == "pg_before":
        torch.distributed.init_process_group("gloo")
        # A group of the horovod_cpp backend beside gloo's default: horovod_cpp starts in
        # new_group, on every rank, through the default group's store.
        check_subgroup(backend="horovod_cpp")
        assert hvd.is_initialized()
    if mode == "backend":
        torch.distributed.init_process_group("horovod_cpp")  # starts horovod_cpp too
        assert hvd.is_initialized()
        check_backend()
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    assert (r, n) == (int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])), (r, n)
    place = (hvd.local_rank(), hvd.local_size(), hvd.cross_rank(), hvd.cross_size())
    assert place == expected_place(), (place, expected_place())
    if mode == "grow":
        grow(out, int(sys.argv[3]))
        hvd.shutdown()
        with open(os.path.join(out, f"ok.{attempt}.{r}"), "w") as f:
            f.write(f"size={n}\n")
        return
    if mode == "restart" and attempt == "0" and r == 1:
        sys.exit(3)
    if mode == "fail":
        hvd.allreduce(torch.ones(4), name="before")
        if r == 1:
            sys.exit(3)
        hvd.allreduce(torch.ones(4), name="never")  # rank 1 never comes
        return
    check_collectives("first")
    if mode == "pg_after":
        torch.distributed.init_process_group("gloo")
    if mode in ("pg_before", "pg_after"):
        x = torch.arange(5, dtype=torch.float32) + r
        y = x.clone()
        torch.distributed.all_reduce(y)
        assert torch.equal(hvd.allreduce(x, op=hvd.Sum, name="pg"), y)
    # A second init in the same process reuses the variables and rank 0's store.
    hvd.shutdown()
    hvd.init()
    check_collectives("again")
    hvd.shutdown()
    with open(os.path.join(out, f"ok.{attempt}.{r}"), "w") as f:
        f.write(f"place={place} host={os.environ['HOROVOD_HOSTNAME']} "
                f"store={os.environ['HOROVOD_GLOO_RENDEZVOUS_ADDR']}:"
                f"{os.environ['HOROVOD_GLOO_RENDEZVOUS_PORT']}\n")


if __name__ == "__main__":
    main()
