"""DistributedOptimizer(op=Adasum): Horovod's delta-based Adasum optimizer. Every rank computes
the expected parameters itself: each rank's replica (seeded with that rank's data) takes a
local step of its own optimizer from the common parameters, and the common parameters move by
the NumPy Adasum reference of the replicas' update deltas; every element is checked."""

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import horovod_cpp.torch as hvd
from adasum_reference import assert_close, reference

OPTIMIZERS = {
    "sgd": lambda ps: torch.optim.SGD(ps, lr=0.1),
    "momentum": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=0.01),
    "adam": lambda ps: torch.optim.Adam(ps, lr=0.01),
}


class Net(nn.Module):
    """A small MLP with an embedding (sparse gradients when `sparse`) and a head that only
    rank 0 uses (no gradient elsewhere)."""

    def __init__(self, sparse=False):
        super().__init__()
        torch.manual_seed(0)
        self.emb = nn.Embedding(10, 4, sparse=sparse)
        self.body = nn.Sequential(nn.Linear(4, 5), nn.Tanh(), nn.Linear(5, 3))
        self.extra = nn.Linear(4, 3)
        self.double()

    def forward(self, idx, r):
        h = self.emb(idx)
        out = self.body(h)
        return out + self.extra(h) if r == 0 else out


def batch(r, step, micro):
    g = torch.Generator().manual_seed(10000 * step + 100 * micro + r)
    return torch.randint(0, 10, (6,), generator=g), torch.randint(0, 3, (6,), generator=g)


def backward(model, r, step, micro):
    idx, y = batch(r, step, micro)
    F.cross_entropy(model(idx, r), y).backward()


def expected(kind, size, steps, passes, sparse=False, rule="delta"):
    """The common parameters after `steps` steps, per parameter, in double. rule "delta":
    Horovod's Adasum optimizer (each rank's replica steps locally with its own state; Adasum of
    the deltas); "gradient": one optimizer stepping on the Adasum of the gradients."""
    common = [p.detach().clone() for p in Net(sparse).parameters()]
    replicas = [Net(sparse) for _ in range(size)]
    opts = [OPTIMIZERS[kind](m.parameters()) for m in replicas]
    if rule == "gradient":
        single = Net(sparse)
        single_opt = OPTIMIZERS[kind](single.parameters())
    for step in range(steps):
        deltas, grads = [], []
        for r, (m, opt) in enumerate(zip(replicas, opts)):
            with torch.no_grad():
                for p, c in zip(m.parameters(), common):
                    p.copy_(c)
            opt.zero_grad()
            for micro in range(passes):
                backward(m, r, step, micro)
            grads.append([None if p.grad is None else p.grad.to_dense().numpy().copy()
                          for p in m.parameters()])
            opt.step()
            deltas.append([(p.detach() - c).numpy() for p, c in zip(m.parameters(), common)])
        if rule == "delta":
            common = [c + torch.from_numpy(reference([d[k] for d in deltas]))
                      for k, c in enumerate(common)]
            continue
        single_opt.zero_grad()
        for k, p in enumerate(single.parameters()):
            mine = [np.zeros(p.shape) if g[k] is None else g[k] for g in grads]
            p.grad = torch.from_numpy(reference(mine))
        single_opt.step()
        common = [p.detach().clone() for p in single.parameters()]
    return common


def run(rank, kind, steps, passes, sparse=False, **kwargs):
    model = Net(sparse)
    opt = hvd.DistributedOptimizer(OPTIMIZERS[kind](model.parameters()),
                                   named_parameters=model.named_parameters(), op=hvd.Adasum,
                                   backward_passes_per_step=passes, **kwargs)
    for step in range(steps):
        opt.zero_grad()
        before = [p.detach().clone() for p in model.parameters()]
        for micro in range(passes):
            backward(model, rank, step, micro)
        # The local steps have run in the hooks; the parameters keep their values until step()
        # (checked after it, so that a failure leaves no reduction pending for the next test).
        kept = all(torch.equal(p.detach(), b) for p, b in zip(model.parameters(), before))
        opt.step()
        assert kept, "a parameter changed between backward() and step()"
    return model, opt


@pytest.mark.parametrize("passes", [1, 2])
@pytest.mark.parametrize("kind", ["sgd", "momentum", "adam"])
def test_parameters_move_by_adasum_of_local_deltas(rank, size, kind, passes):
    model, opt = run(rank, kind, steps=3, passes=passes)
    assert type(opt).__name__ == ("Adam" if kind == "adam" else "SGD")
    assert isinstance(opt, torch.optim.Optimizer) and opt.backward_passes_per_step == passes
    want = expected(kind, size, 3, passes)
    for (name, p), w in zip(model.named_parameters(), want):
        assert_close(p.detach().numpy(), w.numpy(), 1e-10)
    if kind != "sgd":
        # Stateful optimizers: the rule matters, so this test tells the two apart. (For plain
        # SGD the two agree: Adasum is homogeneous.)
        other = expected(kind, size, 3, passes, rule="gradient")
        assert any(not np.allclose(w.numpy(), o.numpy(), rtol=0, atol=1e-6)
                   for w, o in zip(want, other))


def test_sparse_gradients_give_dense_deltas(rank, size):
    """As in Horovod: the local step applies the sparse gradient to the dense parameter, and
    its dense delta is combined."""
    model, _ = run(rank, "sgd", steps=2, passes=1, sparse=True)
    want = expected("sgd", size, 2, 1, sparse=True)
    for p, w in zip(model.parameters(), want):
        assert_close(p.detach().numpy(), w.numpy(), 1e-10)


def test_fp16_compression(rank, size):
    """The deltas travel as float16: the result is the reference over the float16 deltas,
    cast back, added to the old value."""
    model = Net()
    common = [p.detach().clone() for p in model.parameters()]
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(), op=hvd.Adasum,
                                   compression=hvd.Compression.fp16)
    backward(model, rank, 0, 0)
    opt.step()
    deltas = []
    for r in range(size):
        m = Net()
        backward(m, r, 0, 0)
        deltas.append([np.zeros(p.shape) if p.grad is None else
                       (-0.1 * p.grad).half().double().numpy() for p in m.parameters()])
    for k, (p, c) in enumerate(zip(model.parameters(), common)):
        want = c.numpy() + reference([d[k] for d in deltas])
        assert_close(p.detach().numpy(), want, 4e-3 * 0.1)
        # What was added is a float16 value (a float64 result would be off that grid).
        applied = p.detach() - c
        torch.testing.assert_close(applied, applied.half().double(), rtol=0, atol=1e-12)


def test_refusals_and_misuse(rank, size):
    model = Net()
    sgd = lambda: torch.optim.SGD(model.parameters(), lr=0.1)  # noqa: E731
    with pytest.raises(ValueError, match="gradient_predivide_factor"):
        hvd.DistributedOptimizer(sgd(), op=hvd.Adasum, gradient_predivide_factor=2.0)
    with pytest.raises(ValueError, match="staleness / local SGD"):
        hvd.DistributedOptimizer(sgd(), op=hvd.Adasum, staleness=1)
    subset = hvd.add_process_set([0])  # registered, not the global set
    try:
        with pytest.raises(NotImplementedError, match="global process set only"):
            hvd.DistributedOptimizer(sgd(), op=hvd.Adasum, process_set=subset)
    finally:
        hvd.remove_process_set(subset)
    opt = hvd.DistributedOptimizer(sgd(), named_parameters=model.named_parameters(),
                                   op=hvd.Adasum)
    with pytest.raises(AssertionError, match="not supported when using Adasum"):
        with opt.skip_synchronize():
            pass
    backward(model, rank, 0, 0)
    with pytest.raises(AssertionError, match="zero_grad"):
        opt.zero_grad()
    with pytest.raises(AssertionError, match="backward_passes_per_step"):
        backward(model, rank, 0, 1)
    opt.step()  # the reductions started by the first pass complete on every rank
    opt.zero_grad()
    before = [p.detach().clone() for p in model.parameters()]
    backward(model, rank, 1, 0)
    opt.step()  # the optimizer still works: every parameter moved
    assert all(not torch.equal(p.detach(), b) for p, b in zip(model.parameters(), before)
               if p.grad is not None and p.grad.abs().sum() > 0)



def test_broadcast_optimizer_state(rank, size):
    """broadcast_optimizer_state on the Adasum optimizer: the fresh state is created by a step
    of the wrapped optimizer (no reduction), the parameters are left as they were, root's
    options and state reach every rank, and training goes on."""
    model = Net()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(rank)
    opt = hvd.DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=0.01 * (rank + 1)),
                                   named_parameters=model.named_parameters(), op=hvd.Adasum)
    before = [p.detach().clone() for p in model.parameters()]
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    assert all(torch.equal(p.detach(), b) for p, b in zip(model.parameters(), before))
    assert opt.param_groups[0]["lr"] == 0.01
    assert len(opt.state) == len(before)
    opt.zero_grad()
    backward(model, rank, 0, 0)
    opt.step()
    assert all(not torch.equal(p.detach(), b) for p, b in zip(model.parameters(), before)
               if p.grad is not None and p.grad.abs().sum() > 0)
