"""Adasum (op=hvd.Adasum) from numpy and torch, checked element by element against a NumPy
reference of the same pairwise tree that every rank computes itself from every rank's input;
DistributedOptimizer(op=Adasum) and a digits training run with it."""

import gzip
import os

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import horovod_cpp as hvd
import horovod_cpp.torch as htorch
from adasum_reference import assert_close, reference
from conftest import rank_data

DIGITS = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "data", "digits.csv.gz")


TOL = {np.float16: 4e-3, np.float32: 1e-5, np.float64: 1e-12}


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("shape", [(1,), (7,), (10, 33), (4097,)])
def test_numpy_single(rank, size, dtype, shape):
    seed = len(shape) * 100 + shape[-1]
    mine = rank_data(rank, shape, dtype, seed)
    out = hvd.allreduce(mine, op=hvd.Adasum, name=f"ada.np.{np.dtype(dtype).name}.{shape}")
    want = reference([rank_data(r, shape, dtype, seed) for r in range(size)])
    assert out.dtype == mine.dtype and out.shape == mine.shape
    assert_close(out, want, TOL[dtype])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_numpy_grouped_is_per_tensor(rank, size, dtype):
    shapes = [(5,), (3, 4), (1000,), (2,)]
    mine = [rank_data(rank, s, dtype, 50 + k) for k, s in enumerate(shapes)]
    outs = hvd.grouped_allreduce(mine, op=hvd.Adasum, name=f"ada.np.group.{np.dtype(dtype).name}")
    for k, s in enumerate(shapes):
        want = reference([rank_data(r, s, dtype, 50 + k) for r in range(size)])
        assert_close(outs[k], want, TOL[dtype])
    # One vector over the concatenation would differ: the tensors are combined separately.
    whole = reference([np.concatenate([rank_data(r, s, dtype, 50 + k).ravel()
                                       for k, s in enumerate(shapes)]) for r in range(size)])
    assert not np.allclose(np.concatenate([o.ravel() for o in outs]), whole, rtol=1e-6)


def test_numpy_scale_factors(rank, size):
    mine = rank_data(rank, (64,), np.float64, 7)
    out = hvd.allreduce(mine, op=hvd.Adasum, prescale_factor=0.5, postscale_factor=4.0,
                        name="ada.np.scaled")
    assert_close(out, 2.0 * reference([rank_data(r, (64,), np.float64, 7) for r in range(size)]),
                 1e-12)


def test_integers_refused_and_next_call_works(rank, size):
    with pytest.raises(ValueError, match="adasum needs a floating-point tensor"):
        hvd.allreduce(np.ones(3, dtype=np.int32), op=hvd.Adasum, name="ada.int")
    out = hvd.allreduce(np.ones(3), op=hvd.Sum, name="ada.after")
    np.testing.assert_array_equal(out, [size] * 3)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_torch_allreduce(rank, size, dtype):
    tol = {torch.float32: 1e-5, torch.float64: 1e-12, torch.float16: 4e-3, torch.bfloat16: 3e-2}
    seed = 300 + list(tol).index(dtype)
    inputs = [torch.from_numpy(rank_data(r, (6, 17), np.float64, seed)).to(dtype)
              for r in range(size)]
    x = inputs[rank].clone()
    out = htorch.allreduce(x, op=htorch.Adasum, name=f"ada.torch.{dtype}")
    assert torch.equal(x, inputs[rank])  # out of place: the input is untouched
    want = reference([t.double().numpy() for t in inputs])
    assert out.dtype == dtype
    assert_close(out.double().numpy(), want, tol[dtype])
    y = inputs[rank].clone()
    htorch.allreduce_(y, op=htorch.Adasum, name=f"ada.torch_.{dtype}")
    assert torch.equal(y, out)  # every call of the same inputs gives the same bytes


def test_torch_grouped(rank, size):
    shapes = [(3,), (8, 8), (129,)]
    inputs = [[torch.from_numpy(rank_data(r, s, np.float32, 600 + k)) for k, s in enumerate(shapes)]
              for r in range(size)]
    outs = htorch.grouped_allreduce([t.clone() for t in inputs[rank]], op=htorch.Adasum,
                                    name="ada.torch.group")
    for k in range(len(shapes)):
        want = reference([inputs[r][k].numpy() for r in range(size)])
        assert_close(outs[k].numpy(), want, 1e-5)


def test_distributed_optimizer_reduces_gradients_by_adasum(rank, size):
    """One step of SGD(lr=1) with op=Adasum: the weights move by the Adasum of the ranks'
    gradients, each parameter its own vector, never divided by the size. (The optimizer
    combines the local steps' deltas, -g here: for plain SGD the same; the stateful cases are
    test_torch_adasum_optimizer.py's.)"""
    def model():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(5, 4), nn.Tanh(), nn.Linear(4, 2)).double()

    def data(r):
        g = torch.Generator().manual_seed(700 + r)
        x = torch.randn(3, 5, generator=g, dtype=torch.float64)
        return x, torch.randint(0, 2, (3,), generator=g)

    grads = []
    for r in range(size):
        m = model()
        x, y = data(r)
        F.cross_entropy(m(x), y).backward()
        grads.append([p.grad.detach().clone().numpy() for p in m.parameters()])
    m = model()
    before = [p.detach().clone().numpy() for p in m.parameters()]
    opt = htorch.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=1.0),
                                      named_parameters=m.named_parameters(), op=htorch.Adasum)
    x, y = data(rank)
    opt.zero_grad()
    F.cross_entropy(m(x), y).backward()
    opt.step()
    for k, p in enumerate(m.parameters()):
        want = before[k] - reference([grads[r][k] for r in range(size)])
        assert_close(p.detach().numpy(), want, 1e-12)


@pytest.mark.parametrize("kind", ["momentum", "adam"])
def test_digits_training_with_adasum(rank, size, kind):
    """The digits MLP trained with DistributedOptimizer(op=Adasum) at the single-worker
    learning rate (Horovod's advice for Adasum on CPU: no scaling by size) reaches >= 95%
    held-out accuracy, with identical weights on every rank; with SGD + momentum and with
    Adam (stateful: each rank's local step is combined, test_torch_adasum_optimizer.py)."""
    with gzip.open(DIGITS, "rt") as f:
        rows = np.loadtxt(f, delimiter=",", dtype=np.float32)
    x, y = torch.from_numpy(rows[:, :64] / 16.0), torch.from_numpy(rows[:, 64].astype(np.int64))
    perm = np.random.default_rng(0).permutation(len(y))
    n_test = len(y) // 5
    test_idx, train_idx = perm[:n_test], perm[n_test:]
    mine = train_idx[rank::size]
    torch.manual_seed(1234 + rank)
    net = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
    local = (torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9) if kind == "momentum"
             else torch.optim.Adam(net.parameters(), lr=3e-3))
    opt = htorch.DistributedOptimizer(local, named_parameters=net.named_parameters(),
                                      op=htorch.Adasum)
    htorch.broadcast_parameters(net.state_dict(), root_rank=0)
    batch = 32
    steps = int(htorch.allreduce(torch.tensor(len(mine) // batch), op=htorch.Min,
                                 name="ada.steps").item())
    xs, ys = x[mine], y[mine]
    for epoch in range(20):
        order = torch.randperm(len(mine), generator=torch.Generator().manual_seed(epoch))
        for s in range(steps):
            idx = order[s * batch:(s + 1) * batch]
            opt.zero_grad()
            F.cross_entropy(net(xs[idx]), ys[idx]).backward()
            opt.step()
    with torch.no_grad():
        acc = (net(x[test_idx]).argmax(1) == y[test_idx]).float().mean().item()
    flat = torch.cat([p.detach().flatten() for p in net.parameters()])
    spread = (htorch.allreduce(flat, op=htorch.Max, name="ada.wmax") -
              htorch.allreduce(flat, op=htorch.Min, name="ada.wmin")).abs().max().item()
    assert spread == 0
    assert acc >= 0.95, f"held-out accuracy {acc:.4f} with Adasum and {kind}"


CUDA = pytest.mark.skipif(not (torch.cuda.is_available() and hvd.nccl_built()),
                          reason="needs a CUDA device and a horovod_cpp build with NCCL")


def _cuda_device():
    # One GPU per rank by local rank, as test_torch_cuda.py (the library picks the same one).
    dev = torch.device("cuda", hvd.local_rank() % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    return dev


@CUDA
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_torch_cuda_allreduce(rank, size, dtype):
    """A CUDA tensor is combined on the host by the CPU tensors' code: the result stays on the
    device, matches the reference, and equals byte for byte the same values reduced as a CPU
    tensor (17 KiB to 70 KiB: both of the host's schedules across the dtypes)."""
    dev = _cuda_device()
    tol = {torch.float32: 1e-5, torch.float64: 1e-12, torch.float16: 4e-3, torch.bfloat16: 3e-2}
    seed = 800 + list(tol).index(dtype)
    inputs = [torch.from_numpy(rank_data(r, (17, 513), np.float64, seed)).to(dtype)
              for r in range(size)]
    out = htorch.allreduce(inputs[rank].to(dev), op=htorch.Adasum, name=f"ada.cuda.{dtype}")
    assert out.device == dev and out.dtype == dtype
    on_cpu = htorch.allreduce(inputs[rank].clone(), op=htorch.Adasum, name=f"ada.cuda.cpu.{dtype}")
    assert torch.equal(out.cpu(), on_cpu)
    want = reference([t.double().numpy() for t in inputs])
    assert_close(out.double().cpu().numpy(), want, tol[dtype])


@CUDA
def test_torch_cuda_grouped_is_per_tensor(rank, size):
    """A group of CUDA tensors is one fused batch; each tensor is still its own vector."""
    dev = _cuda_device()
    shapes = [(3,), (8, 8), (4100,), (129,)]
    inputs = [[rank_data(r, s, np.float32, 870 + k) for k, s in enumerate(shapes)]
              for r in range(size)]
    outs = htorch.grouped_allreduce([torch.from_numpy(a).to(dev) for a in inputs[rank]],
                                    op=htorch.Adasum, name="ada.cuda.group")
    for k, out in enumerate(outs):
        assert out.device == dev
        assert_close(out.cpu().numpy(), reference([inputs[r][k] for r in range(size)]), 1e-5)
