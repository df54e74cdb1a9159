"""DistributedOptimizer, broadcast_parameters and broadcast_optimizer_state.

Equivalence: N ranks each training on their shard of a batch must end with the same weights
as one model trained (here, on every rank independently) on the whole batch.
"""

import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import horovod_cpp.torch as hvd

SHARD = 6


def make_model(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 3)).double()


def batch(step, size):
    g = torch.Generator().manual_seed(100 + step)
    x = torch.randn(size * SHARD, 8, generator=g, dtype=torch.float64)
    y = torch.randint(0, 3, (size * SHARD,), generator=g)
    return x, y


def shard(t, rank):
    return t[rank * SHARD:(rank + 1) * SHARD]


def make_opt(kind, params):
    if kind == "sgd":
        return torch.optim.SGD(params, lr=0.1, momentum=0.9)
    if kind == "adam":
        return torch.optim.Adam(params, lr=0.01)
    raise ValueError(kind)


def assert_same_weights(m1, m2, tol=1e-9):
    for (n, a), (_, b) in zip(m1.named_parameters(), m2.named_parameters()):
        torch.testing.assert_close(a, b, rtol=tol, atol=tol, msg=n)


@pytest.mark.parametrize("kind", ["sgd", "adam"])
@pytest.mark.parametrize("variant", ["plain", "predivide", "groups_int", "groups_list", "fp16",
                                     "explicit_sync", "no_names", "sum"])
def test_equivalence_with_single_process(rank, size, kind, variant):
    dist_model, ref_model = make_model(), make_model()
    kwargs = {"named_parameters": dist_model.named_parameters()}
    if variant == "predivide":
        kwargs["gradient_predivide_factor"] = 2.0
    elif variant == "groups_int":
        kwargs["groups"] = 2
    elif variant == "groups_list":
        ps = list(dist_model.parameters())
        kwargs["groups"] = [[ps[0], ps[3]], [ps[1]]]
    elif variant == "fp16":
        kwargs["compression"] = hvd.Compression.fp16
    elif variant == "no_names":
        del kwargs["named_parameters"]
    elif variant == "sum":
        kwargs["op"] = hvd.Sum
    opt = hvd.DistributedOptimizer(make_opt(kind, dist_model.parameters()), **kwargs)
    assert isinstance(opt, type(make_opt(kind, [torch.zeros(1, requires_grad=True)])))
    ref_opt = make_opt(kind, ref_model.parameters())
    for step in range(3):
        x, y = batch(step, size)
        opt.zero_grad()
        F.cross_entropy(dist_model(shard(x, rank)), shard(y, rank)).backward()
        if variant == "explicit_sync":
            opt.synchronize()
            with opt.skip_synchronize():
                opt.step()
        else:
            opt.step()
        ref_opt.zero_grad()
        ref_loss = F.cross_entropy(ref_model(x), y)
        if variant == "sum":
            ref_loss = ref_loss * size  # Sum of the shard means
        ref_loss.backward()
        ref_opt.step()
    assert_same_weights(dist_model, ref_model, tol=2e-3 if variant == "fp16" else 1e-9)
    if variant != "fp16":
        # the reference does not depend on the ranks, so every rank has the same weights
        w = hvd.allgather_object([p.detach() for p in dist_model.parameters()])
        for other in w:
            for a, b in zip(other, dist_model.parameters()):
                assert torch.equal(a, b.detach())


def test_backward_passes_per_step(rank, size):
    dist_model, ref_model = make_model(), make_model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(dist_model.parameters(), lr=0.1),
                                   named_parameters=dist_model.named_parameters(),
                                   backward_passes_per_step=2)
    ref_opt = torch.optim.SGD(ref_model.parameters(), lr=0.1)
    for step in range(2):
        opt.zero_grad()
        ref_opt.zero_grad()
        for micro in range(2):
            x, y = batch(10 * step + micro, size)
            F.cross_entropy(dist_model(shard(x, rank)), shard(y, rank)).backward()
            F.cross_entropy(ref_model(x), y).backward()
        opt.step()
        ref_opt.step()
    assert_same_weights(dist_model, ref_model)


def test_too_many_backward_passes_is_an_error(rank, size):
    if size < 2:
        pytest.skip("hooks are registered with more than one rank")
    model = make_model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    x, y = batch(0, size)
    F.cross_entropy(model(shard(x, rank)), shard(y, rank)).backward()
    with pytest.raises(AssertionError, match="backward_passes_per_step"):
        F.cross_entropy(model(shard(x, rank)), shard(y, rank)).backward()
    with pytest.raises(AssertionError, match="zero_grad"):
        opt.zero_grad()
    opt.synchronize()  # completes the pending allreduces on every rank
    opt.zero_grad()


def test_step_after_synchronize_warns(rank, size):
    model = make_model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    x, y = batch(0, size)
    F.cross_entropy(model(shard(x, rank)), shard(y, rank)).backward()
    opt.synchronize()
    with pytest.warns(UserWarning, match="skip_synchronize"):
        opt.step()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        opt.zero_grad()
        F.cross_entropy(model(shard(x, rank)), shard(y, rank)).backward()
        opt.step()


def test_unused_parameter_gets_reduced_gradient(rank, size):
    model = make_model()
    extra = nn.Parameter(torch.ones(2, dtype=torch.float64))
    params = list(model.parameters()) + [extra]
    named = list(model.named_parameters()) + [("extra", extra)]
    opt = hvd.DistributedOptimizer(torch.optim.SGD(params, lr=0.1), named_parameters=named)
    x, y = batch(0, size)
    loss = F.cross_entropy(model(shard(x, rank)), shard(y, rank))
    if rank == 0:
        loss = loss + (extra * 3.0).sum()  # only rank 0 uses `extra`
    loss.backward()
    opt.step()
    if size > 1:
        torch.testing.assert_close(extra.grad, torch.full((2,), 3.0 / size, dtype=torch.float64))


@pytest.mark.parametrize("sparse_as_dense", [False, True])
def test_sparse_gradients(rank, size, sparse_as_dense):
    def make():
        torch.manual_seed(3)
        return nn.Embedding(10, 4, sparse=True).double()
    dist_model, ref_model = make(), make()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(dist_model.parameters(), lr=0.5),
                                   named_parameters=dist_model.named_parameters(),
                                   sparse_as_dense=sparse_as_dense)
    ref_opt = torch.optim.SGD(ref_model.parameters(), lr=0.5)
    g = torch.Generator().manual_seed(9)
    idx = torch.randint(0, 10, (size, 5), generator=g)
    for _ in range(2):
        opt.zero_grad()
        dist_model(idx[rank]).pow(2).mean().backward()
        opt.step()
        ref_opt.zero_grad()
        (sum(ref_model(idx[r]).pow(2).mean() for r in range(size)) / size).backward()
        ref_opt.step()
    torch.testing.assert_close(dist_model.weight, ref_model.weight)


def test_sparse_and_dense_together_across_pass_changes(rank, size):
    """Dense gradients take the engine's plain path and sparse ones the general one in the same
    step; set_backward_passes_per_step leaves the plain path (2 passes) and comes back (1)."""
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(4)
            self.emb = nn.Embedding(10, 4, sparse=True).double()
            self.lin = nn.Linear(4, 2).double()

        def forward(self, idx):
            return self.lin(self.emb(idx)).pow(2).mean()

    dist_model, ref_model = Net(), Net()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(dist_model.parameters(), lr=0.5),
                                   named_parameters=dist_model.named_parameters())
    ref_opt = torch.optim.SGD(ref_model.parameters(), lr=0.5)
    g = torch.Generator().manual_seed(11)
    for passes in (1, 2, 1):
        opt.set_backward_passes_per_step(passes)
        idx = torch.randint(0, 10, (passes, size, 5), generator=g)
        opt.zero_grad()
        for p in range(passes):
            dist_model(idx[p, rank]).backward()
        opt.step()
        ref_opt.zero_grad()
        for p in range(passes):
            (sum(ref_model(idx[p, r]) for r in range(size)) / size).backward()
        ref_opt.step()
    for (n, a), (_, b) in zip(dist_model.named_parameters(), ref_model.named_parameters()):
        torch.testing.assert_close(a, b, msg=n)


def test_misuse_errors():
    model = make_model()
    sgd = lambda: torch.optim.SGD(model.parameters(), lr=0.1)  # noqa: E731
    named = list(model.named_parameters())
    with pytest.raises(ValueError, match="unique"):
        hvd.DistributedOptimizer(sgd(), named_parameters=[("a", p) for _, p in named])
    with pytest.raises(ValueError, match="not named"):
        hvd.DistributedOptimizer(sgd(), named_parameters=named[:1])
    with pytest.raises(ValueError, match="sequence of tuples"):
        hvd.DistributedOptimizer(sgd(), named_parameters=[p for _, p in named])
    with pytest.raises(ValueError, match="gradient_predivide_factor"):
        hvd.DistributedOptimizer(sgd(), op=hvd.Sum, gradient_predivide_factor=2.0)
    with pytest.raises(ValueError, match="groups"):
        hvd.DistributedOptimizer(sgd(), groups=-1)
    with pytest.raises(ValueError, match="torch.Tensor"):
        hvd.DistributedOptimizer(sgd(), groups=[[1, 2]])
    p0 = named[0][1]
    with pytest.raises(ValueError, match="only appear once"):
        hvd.DistributedOptimizer(sgd(), groups=[[p0], [p0]])
    with pytest.raises(ValueError, match="gradient_predivide_factor"):
        hvd.DistributedOptimizer(sgd(), op=hvd.Adasum, gradient_predivide_factor=2.0)
    with pytest.warns(DeprecationWarning):
        hvd.DistributedOptimizer(sgd(), num_groups=1)


# ---- broadcast_parameters / broadcast_optimizer_state ---------------------------------------
def test_broadcast_parameters(rank, size):
    model = make_model(seed=rank)
    model.add_module("bn", nn.BatchNorm1d(3).double())
    model.bn.running_mean.fill_(rank)
    model.bn.num_batches_tracked.fill_(rank + 5)
    root_model = make_model(seed=size - 1)
    hvd.broadcast_parameters(model.state_dict(), root_rank=size - 1)
    for (n, a), (_, b) in zip(model[:3].state_dict().items(), root_model.state_dict().items()):
        assert torch.equal(a, b), n
    assert torch.equal(model.bn.running_mean, torch.full((3,), float(size - 1), dtype=torch.float64))
    assert model.bn.num_batches_tracked.item() == size + 4
    other = make_model(seed=rank + 7)
    hvd.broadcast_parameters(list(other.named_parameters()), root_rank=0)
    for a, b in zip(other.parameters(), make_model(seed=7).parameters()):
        assert torch.equal(a, b)
    with pytest.raises(ValueError, match="invalid params"):
        hvd.broadcast_parameters(other.named_parameters(), root_rank=0)


OPTIMIZERS = {
    "SGD": lambda p, lr: torch.optim.SGD(p, lr=lr, momentum=0.9, weight_decay=0.01),
    "Adam": lambda p, lr: torch.optim.Adam(p, lr=lr, betas=(0.8, 0.9 + lr)),
    "AdamW": lambda p, lr: torch.optim.AdamW(p, lr=lr, amsgrad=True),
    "Adagrad": lambda p, lr: torch.optim.Adagrad(p, lr=lr),
    "Adadelta": lambda p, lr: torch.optim.Adadelta(p, lr=lr),
    "Adamax": lambda p, lr: torch.optim.Adamax(p, lr=lr),
    "ASGD": lambda p, lr: torch.optim.ASGD(p, lr=lr, t0=1),
    "NAdam": lambda p, lr: torch.optim.NAdam(p, lr=lr),
    "RAdam": lambda p, lr: torch.optim.RAdam(p, lr=lr),
    "RMSprop": lambda p, lr: torch.optim.RMSprop(p, lr=lr, momentum=0.5, centered=True),
    "Rprop": lambda p, lr: torch.optim.Rprop(p, lr=lr),
}


def state_snapshot(opt):
    sd = opt.state_dict()
    state = {pid: {k: (v.clone() if torch.is_tensor(v) else v) for k, v in s.items()}
             for pid, s in sd["state"].items()}
    groups = [{k: v for k, v in g.items() if k != "params"} for g in sd["param_groups"]]
    return state, groups


@pytest.mark.parametrize("name", sorted(OPTIMIZERS) + ["SparseAdam"])
@pytest.mark.parametrize("fresh", [False, True])
def test_broadcast_optimizer_state(rank, size, name, fresh):
    root = size - 1
    if name == "SparseAdam":
        torch.manual_seed(rank)
        model = nn.Embedding(6, 3, sparse=True).double()
        opt = torch.optim.SparseAdam(model.parameters(), lr=0.01 * (rank + 1))
        run = lambda: model(torch.tensor([rank % 6, 2])).pow(2).sum().backward()  # noqa: E731
    else:
        model = make_model(seed=rank)
        opt = OPTIMIZERS[name](model.parameters(), 0.01 * (rank + 1))
        x = torch.randn(4, 8, dtype=torch.float64)
        run = lambda: model(x).pow(2).sum().backward()  # noqa: E731
    if not fresh:
        for _ in range(2):  # rank-specific state
            opt.zero_grad()
            run()
            opt.step()
    hvd.broadcast_parameters(model.state_dict(), root_rank=root)
    hvd.broadcast_optimizer_state(opt, root_rank=root)
    mine = state_snapshot(opt)
    theirs = hvd.broadcast_object(mine, root_rank=root)
    assert mine[1] == theirs[1]  # every param-group option (lr, betas, ...)
    assert mine[1][0]["lr"] == pytest.approx(0.01 * (root + 1))
    assert sorted(mine[0]) == sorted(theirs[0]) and len(mine[0]) > 0
    for pid in theirs[0]:
        assert sorted(mine[0][pid]) == sorted(theirs[0][pid])
        for k, v in theirs[0][pid].items():
            if torch.is_tensor(v):
                assert torch.equal(mine[0][pid][k], v), (pid, k)
            else:
                assert mine[0][pid][k] == v, (pid, k)
    # the same data now gives the same step everywhere
    opt.zero_grad()
    if name == "SparseAdam":
        model(torch.tensor([0, 1])).pow(2).sum().backward()
    else:
        model(torch.ones(2, 8, dtype=torch.float64)).pow(2).sum().backward()
    opt.step()
    everyone = hvd.allgather_object([p.detach() for p in model.parameters()])
    for other in everyone:
        for a, b in zip(other, model.parameters()):
            assert torch.equal(a, b.detach())


def test_broadcast_optimizer_state_distributed_and_lbfgs(rank, size):
    model = make_model(seed=rank)
    opt = hvd.DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=0.001 * (rank + 1)),
                                   named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)  # fresh state: no allreduce, no deadlock
    assert opt.param_groups[0]["lr"] == pytest.approx(0.001)
    steps = hvd.allgather_object([float(s["step"]) for s in opt.state.values()])
    assert all(s == steps[0] for s in steps)
    with pytest.raises(ValueError, match="LBFGS"):
        hvd.broadcast_optimizer_state(torch.optim.LBFGS(model.parameters()), root_rank=0)
