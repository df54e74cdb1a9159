"""horovod_cpp.torch collectives: values element by element, handles, autograd, errors."""

import os
import warnings

import numpy as np
import pytest
import torch

import horovod_cpp
import horovod_cpp.torch as hvd
from conftest import rank_data

DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
          torch.bfloat16, torch.float32, torch.float64]


def rank_tensor(r, shape, dtype, seed=0):
    if dtype == torch.bfloat16:
        return torch.from_numpy(rank_data(r, shape, np.float32, seed)).to(torch.bfloat16)
    if dtype == torch.bool:
        return torch.from_numpy(rank_data(r, shape, np.bool_, seed))
    np_dtype = torch.empty(0, dtype=dtype).numpy().dtype
    return torch.from_numpy(rank_data(r, shape, np_dtype, seed))


def close(got, want, dtype):
    if dtype in (torch.float16, torch.bfloat16):
        torch.testing.assert_close(got.double(), want.double(), rtol=3e-2, atol=3e-2)
    elif dtype.is_floating_point:
        torch.testing.assert_close(got.double(), want.double(), rtol=1e-5, atol=1e-5)
    else:
        assert torch.equal(got, want.to(dtype)), (got, want)


@pytest.mark.parametrize("dtype", DTYPES)
def test_allreduce_sum_and_average(rank, size, dtype):
    x = rank_tensor(rank, (4, 3), dtype, seed=1)
    all_x = [rank_tensor(r, (4, 3), dtype, seed=1) for r in range(size)]
    s = hvd.allreduce(x, op=hvd.Sum, name=f"t.sum.{dtype}")
    want = sum(t.double() for t in all_x)
    assert s.dtype == dtype and s.shape == x.shape
    close(s, want, dtype)
    a = hvd.allreduce(x, name=f"t.avg.{dtype}")  # default: Average
    avg = want / size
    close(a, torch.trunc(avg) if not dtype.is_floating_point else avg, dtype)
    assert torch.equal(x, rank_tensor(rank, (4, 3), dtype, seed=1))


@pytest.mark.parametrize("op", [hvd.Min, hvd.Max, hvd.Product])
def test_allreduce_min_max_product(rank, size, op):
    x = rank_tensor(rank, (6,), torch.float64, seed=2)
    stack = torch.stack([rank_tensor(r, (6,), torch.float64, seed=2) for r in range(size)])
    want = {hvd.Min: stack.min(0).values, hvd.Max: stack.max(0).values, hvd.Product: stack.prod(0)}[op]
    torch.testing.assert_close(hvd.allreduce(x, op=op), want)


def test_allreduce_bool(rank, size):
    b = torch.tensor([rank == 0, True, False])
    assert hvd.allreduce(b, op=hvd.Max).tolist() == [True, True, False]
    assert hvd.allreduce(b, op=hvd.Min).tolist() == [size == 1, True, False]


def test_allreduce_in_place_variants(rank, size):
    x = torch.full((5,), float(rank))
    ptr = x.data_ptr()
    out = hvd.allreduce_(x, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.5)
    assert out is x and x.data_ptr() == ptr
    torch.testing.assert_close(x, torch.full((5,), float(sum(range(size)))))
    # non-contiguous tensor, reduced in place through a contiguous buffer
    y = torch.arange(12, dtype=torch.float32).reshape(3, 4).t() * (rank + 1)
    hvd.allreduce_(y, op=hvd.Sum)
    want = torch.arange(12, dtype=torch.float32).reshape(3, 4).t() * sum(r + 1 for r in range(size))
    torch.testing.assert_close(y, want)


def test_average_argument_compatibility(rank, size):
    x = torch.full((2,), float(rank + 1))
    with pytest.warns(DeprecationWarning):
        s = hvd.allreduce(x, average=False)
    torch.testing.assert_close(s, torch.full((2,), float(sum(r + 1 for r in range(size)))))
    with pytest.warns(DeprecationWarning):
        a = hvd.allreduce(x, average=True)
    torch.testing.assert_close(a, torch.full((2,), sum(r + 1 for r in range(size)) / size))
    with pytest.raises(ValueError, match="supersedes average"):
        hvd.allreduce(x, average=True, op=hvd.Sum)


def test_async_handles(rank, size):
    xs = [torch.full((3,), float(rank * 10 + i)) for i in range(4)]
    hs = [hvd.allreduce_async(x, op=hvd.Sum, name=f"t.async.{i}") for i, x in enumerate(xs)]
    assert all(isinstance(h, int) for h in hs)
    hin = hvd.allreduce_async_(xs[0], op=hvd.Max)
    for i, h in enumerate(hs):
        out = hvd.synchronize(h)
        torch.testing.assert_close(out, torch.full((3,), float(sum(r * 10 + i for r in range(size)))))
    assert hvd.synchronize(hin) is xs[0]
    assert xs[0].tolist() == [float((size - 1) * 10)] * 3
    assert hvd.synchronize(hin) is None  # already synchronized: unknown handle
    with pytest.raises(ValueError):
        hvd.poll(hin)
    h = hvd.allreduce_async(torch.ones(2), op=hvd.Sum)
    while not hvd.poll(h):
        pass
    torch.testing.assert_close(hvd.synchronize(h), torch.full((2,), float(size)))


def test_grouped_allreduce(rank, size):
    ts = [rank_tensor(rank, (i + 2,), torch.float32, seed=10 + i) for i in range(3)]
    outs = hvd.grouped_allreduce(ts, op=hvd.Sum)
    for i, o in enumerate(outs):
        want = sum(rank_tensor(r, (i + 2,), torch.float32, seed=10 + i) for r in range(size))
        torch.testing.assert_close(o, want)
    h = hvd.grouped_allreduce_async(ts, op=hvd.Average, name="t.grp")
    for i, o in enumerate(hvd.synchronize(h)):
        want = sum(rank_tensor(r, (i + 2,), torch.float32, seed=10 + i) for r in range(size)) / size
        torch.testing.assert_close(o, want)
    res = hvd.grouped_allreduce_(ts, op=hvd.Max)
    for i, (o, t) in enumerate(zip(res, ts)):
        assert o is t
        want = torch.stack([rank_tensor(r, (i + 2,), torch.float32, seed=10 + i) for r in range(size)]).max(0).values
        torch.testing.assert_close(t, want)
    h = hvd.grouped_allreduce_async_([torch.full((1,), float(rank))], op=hvd.Min)
    assert hvd.synchronize(h)[0].item() == 0.0


@pytest.mark.parametrize("dtype", DTYPES + [torch.bool])
def test_allgather(rank, size, dtype):
    x = rank_tensor(rank, (rank + 1, 2), dtype, seed=20)
    out = hvd.allgather(x, name=f"t.ag.{dtype}")
    want = torch.cat([rank_tensor(r, (r + 1, 2), dtype, seed=20) for r in range(size)])
    assert out.dtype == dtype
    assert torch.equal(out, want)
    h = hvd.allgather_async(x)
    assert torch.equal(hvd.synchronize(h), want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bfloat16, torch.bool])
def test_broadcast(rank, size, dtype):
    for root in range(size):
        x = rank_tensor(rank, (2, 3), dtype, seed=30)
        out = hvd.broadcast(x, root, name=f"t.bc.{dtype}.{root}")
        assert torch.equal(out, rank_tensor(root, (2, 3), dtype, seed=30))
        assert torch.equal(x, rank_tensor(rank, (2, 3), dtype, seed=30))
        assert hvd.broadcast_(x, root) is x
        assert torch.equal(x, rank_tensor(root, (2, 3), dtype, seed=30))
    y = torch.full((3,), float(rank))
    assert hvd.synchronize(hvd.broadcast_async(y, 0)).tolist() == [0.0] * 3
    assert y.tolist() == [float(rank)] * 3
    assert hvd.synchronize(hvd.broadcast_async_(y, size - 1)) is y
    assert y.tolist() == [float(size - 1)] * 3


# ---- autograd ----------------------------------------------------------------------------
def test_allreduce_grad(rank, size):
    x = torch.arange(4, dtype=torch.float64, requires_grad=True)
    w = torch.full((4,), float(rank + 1), dtype=torch.float64)
    y = hvd.allreduce(x * w, op=hvd.Sum)
    y.sum().backward()
    # d/dx_rank of sum_j sum_r (x_r*w_r): the backward allreduce(Sum) of ones is size, times w
    torch.testing.assert_close(x.grad, torch.full((4,), float(size * (rank + 1)), dtype=torch.float64))
    x.grad = None
    hvd.allreduce(x, op=hvd.Average).mul(float(rank + 1)).sum().backward()
    torch.testing.assert_close(x.grad, torch.full((4,), sum(r + 1 for r in range(size)) / size, dtype=torch.float64))


def test_grouped_allreduce_grad(rank, size):
    a = torch.ones(2, requires_grad=True)
    b = torch.ones(3, requires_grad=True)
    oa, ob = hvd.grouped_allreduce([a, b], op=hvd.Sum)
    (oa.sum() * (rank + 1) + ob.sum() * 2).backward()
    total = float(sum(r + 1 for r in range(size)))
    torch.testing.assert_close(a.grad, torch.full((2,), total))
    torch.testing.assert_close(b.grad, torch.full((3,), 2.0 * size))


def test_allgather_grad(rank, size):
    x = torch.full((rank + 1, 2), float(rank), requires_grad=True)
    g = hvd.allgather(x)
    n = g.shape[0]
    weights = torch.arange(n, dtype=torch.float32).unsqueeze(1).expand(n, 2) * (rank + 1)
    (g * weights).sum().backward()
    # Horovod's allgather gradient: the average over ranks of the incoming gradient, sliced
    offset = sum(r + 1 for r in range(rank))
    mean_scale = sum(r + 1 for r in range(size)) / size
    want = torch.arange(offset, offset + rank + 1, dtype=torch.float32).unsqueeze(1).expand(rank + 1, 2) * mean_scale
    torch.testing.assert_close(x.grad, want)


def test_broadcast_grad(rank, size):
    x = torch.full((3,), float(rank), requires_grad=True)
    y = hvd.broadcast(x, 0)
    (y * (rank + 1)).sum().backward()
    want = sum(r + 1 for r in range(size)) / size if rank == 0 else 0.0
    torch.testing.assert_close(x.grad, torch.full((3,), want))


def test_compression(rank, size):
    x = torch.full((4,), 0.5 + rank, dtype=torch.float32)
    out = hvd.allreduce(x, op=hvd.Sum, compression=hvd.Compression.fp16)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, torch.full((4,), sum(0.5 + r for r in range(size))))
    c, ctx = hvd.Compression.fp16.compress(x)
    assert c.dtype == torch.float16
    assert hvd.Compression.fp16.decompress(c, ctx).dtype == torch.float32
    i = torch.ones(2, dtype=torch.int32)
    assert hvd.Compression.fp16.compress(i)[0].dtype == torch.int32
    assert hvd.allreduce(x, compression=hvd.Compression.none, op=hvd.Sum).dtype == torch.float32


def test_sparse_allreduce(rank, size):
    idx = torch.tensor([[rank, 0]])
    val = torch.tensor([1.0 + rank, 10.0])
    sp = torch.sparse_coo_tensor(idx, val, (size + 1,))
    out = hvd.sparse_allreduce_async(sp, name="t.sparse", op=hvd.Sum)()
    want = torch.zeros(size + 1)
    for r in range(size):
        want[r] += 1.0 + r
        want[0] += 10.0
    torch.testing.assert_close(out.to_dense(), want)
    avg = hvd.sparse_allreduce_async(sp, name="t.sparse.avg", op=hvd.Average)()
    torch.testing.assert_close(avg.to_dense(), want / size)


# ---- misc --------------------------------------------------------------------------------
def test_objects_and_barrier(rank, size):
    assert hvd.broadcast_object({"r": rank, "t": torch.ones(2) * rank}, root_rank=0)["r"] == 0
    assert hvd.allgather_object(rank * 2) == [2 * r for r in range(size)]
    hvd.barrier()


def test_build_queries():
    on_gloo = os.environ.get("HOROVOD_GLOO") == "1" or os.environ.get("HOROVOD_CONTROLLER") == "gloo"
    assert hvd.mpi_built() and hvd.mpi_enabled() is (not on_gloo)
    assert isinstance(hvd.gloo_built(), bool) and hvd.gloo_enabled() is on_gloo
    assert not hvd.ddl_built() and not hvd.ccl_built() and not hvd.rocm_built()
    assert hvd.sycl_built() is False and horovod_cpp.sycl_built() is False
    assert isinstance(hvd.nccl_built(), bool) and isinstance(hvd.cuda_built(), bool)


def test_errors(rank, size):
    with pytest.raises(ValueError):
        hvd.allreduce(torch.zeros(2, dtype=torch.complex64))
    with pytest.raises(TypeError):
        hvd.allreduce([1.0])
    with pytest.raises(ValueError):
        hvd.broadcast(torch.zeros(2), root_rank=-1)
    with pytest.raises(ValueError, match="adasum needs a floating-point tensor"):
        hvd.allreduce(torch.zeros(2, dtype=torch.int32), op=hvd.Adasum)
    with pytest.raises(TypeError):
        hvd.join(device="cuda:0")  # a device id is an int (any id is accepted, as in Horovod)
    assert hvd.remove_process_set(hvd.ProcessSet([0])) is False  # not registered
    assert hvd.remove_process_set(hvd.global_process_set) is False
    with pytest.raises(ValueError):
        hvd.reducescatter(torch.zeros(4), op=hvd.Max)
    if size > 1:
        with pytest.raises(hvd.HorovodInternalError) as info:
            hvd.allreduce(torch.zeros(rank + 1), name="t.mismatch")
        assert isinstance(info.value, RuntimeError)
        h = hvd.allgather_async(torch.zeros(1, rank + 1), name="t.mismatch.ag")
        with pytest.raises(hvd.HorovodInternalError):
            hvd.synchronize(h)
    torch.testing.assert_close(hvd.allreduce(torch.ones(1), op=hvd.Sum), torch.full((1,), float(size)))
