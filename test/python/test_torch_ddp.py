"""horovod_cpp.torch.DistributedDataParallel (torch's DDP interface on horovod_cpp).

Every rank computes, on its own, what every other rank feeds in (data seeded by step and
rank), so each rank checks every element of its gradients, weights and buffers against a
single-process reference.
"""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import horovod_cpp.torch as hvd

SHARD = 5


def make_model(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 12), nn.Tanh(), nn.Linear(12, 4), nn.Tanh(),
                         nn.Linear(4, 3)).double()


def data(step, rank):
    g = torch.Generator().manual_seed(1000 * step + rank)
    return (torch.randn(SHARD, 6, generator=g, dtype=torch.float64),
            torch.randint(0, 3, (SHARD,), generator=g))


def local_grads(model, step, rank, passes=1):
    """Gradients of `passes` backward passes (steps step.. step+passes-1) of rank's shard on
    a plain copy of model, accumulated."""
    ref = make_model()
    ref.load_state_dict({k.replace("module.", "", 1): v for k, v in model.state_dict().items()})
    for k in range(passes):
        x, y = data(step + k, rank)
        F.cross_entropy(ref(x), y).backward()
    return [p.grad for p in ref.parameters()]


def assert_close(a, b, what, tol=1e-12):
    torch.testing.assert_close(a, b, rtol=tol, atol=tol, msg=what)


@pytest.mark.parametrize("cap", [None, 0, 0.0001])
@pytest.mark.parametrize("op", ["average", "sum"])
def test_grads_are_the_average_when_backward_returns(rank, size, cap, op):
    model = hvd.DistributedDataParallel(make_model(), bucket_cap_mb=cap,
                                        op=hvd.Sum if op == "sum" else hvd.Average)
    for step in range(3):
        model.zero_grad()
        x, y = data(step, rank)
        F.cross_entropy(model(x), y).backward()
        # Expected: the mean (or sum) over the ranks of each rank's own gradients.
        per_rank = [local_grads(model, step, r) for r in range(size)]
        for i, p in enumerate(model.parameters()):
            want = sum(g[i] for g in per_rank)
            if op == "average":
                want = want / size
            assert_close(p.grad, want, f"step {step} param {i}")


def seeded_bn_model(r):
    inner = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    torch.manual_seed(50 + r)
    with torch.no_grad():
        for p in inner.parameters():
            p.normal_()
        inner[1].running_mean.fill_(float(r + 1))
        inner[1].num_batches_tracked.fill_(7 * r)
    return inner


def test_construction_takes_the_first_ranks_state(rank, size):
    inner = seeded_bn_model(rank)
    want = [p.detach().clone() for p in seeded_bn_model(0).parameters()]
    model = hvd.DistributedDataParallel(inner)
    for i, p in enumerate(model.module.parameters()):
        assert torch.equal(p.detach(), want[i]), i
    assert torch.equal(inner[1].running_mean, torch.ones(4))
    assert int(inner[1].num_batches_tracked) == 0
    # DDP's state_dict keys: "module." in front of the module's.
    assert all(k.startswith("module.") for k in model.state_dict())


@pytest.mark.parametrize("kind", ["sgd", "adam"])
def test_training_matches_one_process_on_the_whole_batch(rank, size, kind):
    model = hvd.DistributedDataParallel(make_model(seed=rank))  # rank 0's weights win
    ref = make_model(seed=0)
    make = (lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9)) if kind == "sgd" else \
        (lambda ps: torch.optim.Adam(ps, lr=0.01))
    opt, ref_opt = make(model.parameters()), make(ref.parameters())
    for step in range(4):
        opt.zero_grad()
        x, y = data(step, rank)
        F.cross_entropy(model(x), y).backward()
        opt.step()
        ref_opt.zero_grad()
        xs, ys = zip(*[data(step, r) for r in range(size)])
        F.cross_entropy(ref(torch.cat(xs)), torch.cat(ys)).backward()
        ref_opt.step()
    for (n, a), b in zip(model.module.named_parameters(), ref.parameters()):
        assert_close(a, b, n, tol=1e-9)


def test_no_sync_accumulates_locally_then_averages(rank, size):
    model = hvd.DistributedDataParallel(make_model())
    with model.no_sync():
        for step in range(2):
            x, y = data(step, rank)
            F.cross_entropy(model(x), y).backward()
    mine = local_grads(model, 0, rank, passes=2)
    for i, p in enumerate(model.parameters()):
        assert_close(p.grad, mine[i], f"inside no_sync, param {i}")
    x, y = data(2, rank)
    F.cross_entropy(model(x), y).backward()
    per_rank = [local_grads(model, 0, r, passes=3) for r in range(size)]
    for i, p in enumerate(model.parameters()):
        assert_close(p.grad, sum(g[i] for g in per_rank) / size, f"after no_sync, param {i}")


class TwoBranches(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(3)
        self.a = nn.Linear(4, 2).double()
        self.b = nn.Linear(4, 2).double()
        self.c = nn.Linear(4, 2).double()  # used by no rank

    def forward(self, x, use_b):
        out = self.a(x)
        return out + self.b(x) if use_b else out


@pytest.mark.parametrize("find_unused", [True, False])
def test_a_parameter_unused_on_some_ranks(rank, size, find_unused):
    """Branch b only on rank 0 in the first pass, on every rank in the second: its gradient is
    the average with zeros from the ranks that did not use it. Branch c, used nowhere, keeps
    no gradient with find_unused_parameters (as DDP), zeros without."""
    model = hvd.DistributedDataParallel(TwoBranches(), find_unused_parameters=find_unused)
    for step, b_on in enumerate([lambda r: r == 0, lambda r: True]):
        model.zero_grad(set_to_none=True)
        x = torch.arange(12, dtype=torch.float64).reshape(3, 4) * (rank + 1 + step) / 10
        model(x, use_b=b_on(rank)).pow(2).sum().backward()
        ref_a, ref_b = [], []
        for r in range(size):
            ref = TwoBranches()
            xr = torch.arange(12, dtype=torch.float64).reshape(3, 4) * (r + 1 + step) / 10
            ref(xr, use_b=b_on(r)).pow(2).sum().backward()
            ref_a.append(ref.a.weight.grad)
            ref_b.append(ref.b.weight.grad if b_on(r) else torch.zeros_like(ref.b.weight))
        assert_close(model.module.a.weight.grad, sum(ref_a) / size, f"a, pass {step}")
        assert_close(model.module.b.weight.grad, sum(ref_b) / size, f"b, pass {step}")
        if find_unused:
            assert model.module.c.weight.grad is None, step
        else:
            assert torch.equal(model.module.c.weight.grad, torch.zeros(2, 4, dtype=torch.float64))


@pytest.mark.parametrize("broadcast_buffers", [True, False])
def test_buffers_come_from_the_first_rank_at_each_forward(rank, size, broadcast_buffers):
    torch.manual_seed(9)
    model = hvd.DistributedDataParallel(nn.BatchNorm1d(3).double(),
                                        broadcast_buffers=broadcast_buffers)
    m = 0.1  # BatchNorm1d's default momentum

    def batch(step, r):
        g = torch.Generator().manual_seed(77 * step + r)
        return torch.randn(4, 3, generator=g, dtype=torch.float64) + r

    mean = [torch.zeros(3, dtype=torch.float64) for _ in range(size)]  # every rank's buffer
    for step in range(3):
        model(batch(step, rank)).sum().backward()
        if broadcast_buffers:
            mean = [mean[0].clone() for _ in range(size)]
        mean = [(1 - m) * mean[r] + m * batch(step, r).mean(0) for r in range(size)]
        assert_close(model.module.running_mean, mean[rank], f"step {step}")
    # Without gradients (evaluation) no broadcast, as in DDP.
    with torch.no_grad():
        model(batch(9, rank))
    assert_close(model.module.running_mean, (1 - m) * mean[rank] + m * batch(9, rank).mean(0),
                 "no_grad forward")


def test_sparse_embedding_gradients(rank, size):
    torch.manual_seed(4)
    emb = nn.EmbeddingBag(10, 3, mode="sum", sparse=True).double()
    model = hvd.DistributedDataParallel(emb)
    rows = torch.tensor([[rank % 10, (rank + 3) % 10]])
    model(rows).pow(2).sum().backward()
    assert model.module.weight.grad.is_sparse
    want = torch.zeros(10, 3, dtype=torch.float64)
    for r in range(size):
        ref = nn.EmbeddingBag(10, 3, mode="sum").double()
        ref.load_state_dict(emb.state_dict())
        ref(torch.tensor([[r % 10, (r + 3) % 10]])).pow(2).sum().backward()
        want += ref.weight.grad
    assert_close(model.module.weight.grad.to_dense(), want / size, "embedding")


def test_process_set(rank, size):
    evens = hvd.add_process_set(list(range(0, size, 2)))
    try:
        model = hvd.DistributedDataParallel(make_model(seed=rank), process_set=evens)
        x, y = data(0, rank)
        F.cross_entropy(model(x), y).backward()
        if rank % 2 == 0:
            members = list(range(0, size, 2))
            ref = make_model(seed=0)
            per_rank = [local_grads(ref, 0, r) for r in members]
            for i, p in enumerate(model.parameters()):
                assert_close(p.grad, sum(g[i] for g in per_rank) / len(members), f"param {i}")
        else:  # outside the set: its own weights and gradients, no communication
            ref = make_model(seed=rank)
            for i, p in enumerate(model.parameters()):
                assert torch.equal(p.detach(), list(ref.parameters())[i]), i
            mine = local_grads(model, 0, rank)
            for i, p in enumerate(model.parameters()):
                assert_close(p.grad, mine[i], f"param {i}")
    finally:
        hvd.remove_process_set(evens)


def test_arguments_refused_with_a_reason():
    with pytest.raises(ValueError, match="process_set"):
        hvd.DistributedDataParallel(make_model(), process_group=object())
    with pytest.raises(ValueError, match="one device per process"):
        hvd.DistributedDataParallel(make_model(), device_ids=[0, 1])
    with pytest.raises(ValueError, match="the module's parameters are on"):
        hvd.DistributedDataParallel(make_model(), device_ids=[0])
    for op in (hvd.Adasum, hvd.Min, hvd.Max, hvd.Product):
        with pytest.raises(ValueError, match="Average or Sum"):
            hvd.DistributedDataParallel(make_model(), op=op)


def test_mismatched_models_fail_on_every_rank_and_the_next_call_works(rank, size):
    width = 5 if rank == size - 1 else 4
    with pytest.raises(hvd.MismatchError,
                       match=r"broadcast_parameters\.weight.*rank \d sent float32\[5,3\]"):
        hvd.DistributedDataParallel(nn.Linear(3, width))
    got = hvd.allreduce(torch.ones(2), op=hvd.Sum, name="ddp.after_mismatch")
    assert torch.equal(got, torch.full((2,), float(size)))


def test_join_with_uneven_batches(rank, size):
    """Rank r has 2 + r batches. Until the last rank leaves, the others' averages get zeros
    from the ranks that left (divided by the full size); then every rank holds the last
    rank's parameters: those of one model stepped with those averages."""
    model = hvd.DistributedDataParallel(make_model(seed=rank))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with model.join():
        for step in range(2 + rank):
            opt.zero_grad()
            x, y = data(step, rank)
            F.cross_entropy(model(x), y).backward()
            opt.step()
    ref = make_model(seed=0)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for step in range(2 + size - 1):
        active = [r for r in range(size) if step < 2 + r]
        grads = [local_grads(ref, step, r) for r in active]
        with torch.no_grad():
            for i, p in enumerate(ref.parameters()):
                p.grad = sum(g[i] for g in grads) / size
        ref_opt.step()
    for (n, a), b in zip(model.module.named_parameters(), ref.parameters()):
        assert_close(a, b, n, tol=1e-9)
    # The next collective works.
    got = hvd.allreduce(torch.ones(2), op=hvd.Sum, name="ddp.after_join")
    assert torch.equal(got, torch.full((2,), float(size)))


def test_join_refuses_what_it_cannot_do():
    with pytest.raises(NotImplementedError, match="broadcast_buffers=False"):
        with hvd.DistributedDataParallel(nn.BatchNorm1d(2)).join():
            pass
    with pytest.raises(NotImplementedError, match="divide_by_initial_world_size"):
        with hvd.DistributedDataParallel(make_model()).join(divide_by_initial_world_size=False):
            pass


class ManyBuffers(nn.Module):
    """Buffers of three dtypes and shapes, one of them non-contiguous, that forward leaves
    alone: after a forward with gradients every rank holds rank 0's values."""

    def __init__(self, r):
        super().__init__()
        self.lin = nn.Linear(2, 2)
        self.register_buffer("grid", torch.arange(12, dtype=torch.float32).reshape(3, 4) + r)
        self.register_buffer("counts", torch.full((5,), r, dtype=torch.int32))
        side = torch.arange(6, dtype=torch.float64).reshape(2, 3) * (r + 1)
        self.register_buffer("side", side.t())

    def forward(self, x):
        return self.lin(x)


def test_buffers_of_every_dtype_and_layout_are_coalesced(rank, size):
    model = hvd.DistributedDataParallel(ManyBuffers(0))  # construction: rank 0's everywhere
    with torch.no_grad():  # then each rank changes them in place, differently
        model.module.grid.add_(rank)
        model.module.counts.add_(7 * rank)
        model.module.side.mul_(rank + 2)
    assert not model.module.side.is_contiguous()
    model(torch.ones(1, 2)).sum().backward()
    want = ManyBuffers(0)
    with torch.no_grad():
        want.side.mul_(2)
    for name in ("grid", "counts", "side"):
        assert torch.equal(getattr(model.module, name), getattr(want, name)), name
