"""horovod_cpp.torch's integer handles and per-call allreduce path: many tiny tensors,
synchronize_all over every kind of handle, failures, and the errors of the fast path."""

import numpy as np
import pytest
import torch

import horovod_cpp.torch as hvd
from horovod_cpp import _C
from conftest import rank_data


def rank_floats(r, shape, seed):
    return torch.from_numpy(rank_data(r, shape, "float32", seed))


def summed(size, shape, seed):
    return sum(rank_floats(r, shape, seed).double() for r in range(size)).float()


def test_many_tiny_in_place_then_synchronize(rank, size):
    xs = [rank_floats(rank, (256,), seed=100 + i) for i in range(300)]
    hs = [hvd.allreduce_async_(x, name=f"t.tiny.{i}", op=hvd.Sum) for i, x in enumerate(xs)]
    assert len(set(hs)) == len(hs)
    for i, (x, h) in enumerate(zip(xs, hs)):
        assert hvd.synchronize(h) is x
        torch.testing.assert_close(x, summed(size, (256,), 100 + i), rtol=1e-5, atol=1e-5)


def test_synchronize_all_many_tiny(rank, size):
    before = _C.torch_handle_count()
    xs = [rank_floats(rank, (256,), seed=500 + i) for i in range(300)]
    hs = [hvd.allreduce_async_(x, name=f"t.tinyall.{i}") for i, x in enumerate(xs)]
    outs = hvd.synchronize_all(hs)
    assert _C.torch_handle_count() == before
    for i, (x, o) in enumerate(zip(xs, outs)):
        assert o is x
        torch.testing.assert_close(x, summed(size, (256,), 500 + i) / size, rtol=1e-5, atol=1e-5)
    assert hvd.synchronize_all(hs) == [None] * len(hs)  # consumed
    with pytest.raises(ValueError, match="unknown handle"):
        hvd.poll(hs[0])


def test_synchronize_all_every_kind_of_handle(rank, size):
    dense = rank_floats(rank, (3, 4), seed=31)
    strided = rank_floats(rank, (4, 3), seed=32).t()  # not contiguous: reduced in a copy
    assert not strided.is_contiguous()
    source = rank_floats(rank, (5,), seed=33)
    group = [rank_floats(rank, (i + 1,), seed=40 + i) for i in range(3)]
    gathered = rank_floats(rank, (rank + 1, 2), seed=34)
    bcast = rank_floats(rank, (6,), seed=35)
    handles = [
        hvd.allreduce_async_(dense, op=hvd.Sum, name="t.all.dense"),
        hvd.allreduce_async_(strided, op=hvd.Max, name="t.all.strided"),
        hvd.allreduce_async(source, op=hvd.Min, name="t.all.out"),
        hvd.grouped_allreduce_async(group, op=hvd.Sum, name="t.all.group"),
        hvd.allgather_async(gathered, name="t.all.gather"),
        hvd.broadcast_async_(bcast, root_rank=size - 1, name="t.all.bcast"),
        -12345,  # unknown
    ]
    outs = hvd.synchronize_all(handles)
    assert len(outs) == len(handles)
    assert outs[0] is dense
    torch.testing.assert_close(dense, summed(size, (3, 4), 31))
    assert outs[1] is strided and not strided.is_contiguous()
    want_max = torch.stack([rank_floats(r, (4, 3), seed=32).t() for r in range(size)]).max(0).values
    torch.testing.assert_close(strided, want_max)
    torch.testing.assert_close(source, rank_floats(rank, (5,), seed=33))  # input untouched
    want_min = torch.stack([rank_floats(r, (5,), seed=33) for r in range(size)]).min(0).values
    torch.testing.assert_close(outs[2], want_min)
    for i, o in enumerate(outs[3]):
        torch.testing.assert_close(o, summed(size, (i + 1,), 40 + i))
    want_gather = torch.cat([rank_floats(r, (r + 1, 2), seed=34) for r in range(size)])
    assert torch.equal(outs[4], want_gather)
    assert outs[5] is bcast
    assert torch.equal(bcast, rank_floats(size - 1, (6,), seed=35))
    assert outs[6] is None


def test_synchronize_all_raises_first_failure_after_all_completed(rank, size):
    if size < 2:
        pytest.skip("a mismatch needs two ranks")
    before = _C.torch_handle_count()
    good_before = rank_floats(rank, (7,), seed=60)
    good_after = rank_floats(rank, (7,), seed=61)
    handles = [
        hvd.allreduce_async_(good_before, op=hvd.Sum, name="t.fail.before"),
        hvd.allreduce_async_(torch.zeros(rank + 1), name="t.fail.shape"),  # shapes differ
        hvd.allgather_async(torch.zeros(1, rank + 1), name="t.fail.ag"),  # so do these
        hvd.allreduce_async_(good_after, op=hvd.Sum, name="t.fail.after"),
    ]
    with pytest.raises(hvd.HorovodInternalError, match="t.fail.shape"):
        hvd.synchronize_all(handles)
    assert _C.torch_handle_count() == before  # every handle consumed
    torch.testing.assert_close(good_before, summed(size, (7,), 60))
    torch.testing.assert_close(good_after, summed(size, (7,), 61))
    torch.testing.assert_close(hvd.allreduce(torch.ones(2), op=hvd.Sum),
                               torch.full((2,), float(size)))


def test_fast_path_errors_name_the_tensor(rank, size):
    sparse = torch.sparse_coo_tensor(torch.tensor([[0]]), torch.tensor([1.0]), (3,))
    with pytest.raises(ValueError, match="allreduce input: sparse tensors are not supported"):
        hvd.allreduce_async_(sparse)
    with pytest.raises(ValueError, match="allreduce input: unsupported torch dtype torch.complex64"):
        hvd.allreduce_async_(torch.zeros(2, dtype=torch.complex64))
    with pytest.raises(ValueError, match="unsupported torch dtype torch.complex64"):
        hvd.allreduce_async(torch.zeros(2, 2, dtype=torch.complex64).t())
    with pytest.raises(TypeError, match="must be a torch.Tensor, got list"):
        hvd.allreduce_async_([1.0, 2.0])
    with pytest.raises(NotImplementedError, match="on device 'meta'"):
        hvd.allreduce_async_(torch.empty(2, device="meta"))
    with pytest.raises(ValueError, match="adasum needs a floating-point tensor"):
        hvd.allreduce_async_(torch.zeros(2, dtype=torch.int64), op=hvd.Adasum)
    with pytest.raises(ValueError, match="unknown reduction op"):
        hvd.allreduce_async_(torch.zeros(2), op=17)
    # The next collective works, and a second tensor's dtype (cached table) is still right.
    for dtype in (torch.float64, torch.int32, torch.float32):
        x = torch.full((3,), rank + 1, dtype=dtype)
        assert hvd.synchronize(hvd.allreduce_async_(x, op=hvd.Sum)) is x
        assert x.tolist() == [sum(r + 1 for r in range(size))] * 3


def test_fast_path_scalars_views_and_requires_grad(rank, size):
    scalar = torch.tensor(float(rank + 1))
    assert hvd.allreduce_(scalar, op=hvd.Sum) is scalar
    assert scalar.item() == sum(r + 1 for r in range(size))
    base = rank_floats(rank, (10,), seed=70)
    view = base[2:6]  # contiguous view at an offset: data_ptr() is not the storage's start
    hvd.allreduce_(view, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.5)
    want = rank_floats(rank, (10,), seed=70)
    want[2:6] = summed(size, (10,), 70)[2:6]
    torch.testing.assert_close(base, want)
    leaf = rank_floats(rank, (4,), seed=71).requires_grad_()
    out = hvd.synchronize(hvd.allreduce_async(leaf, op=hvd.Sum, name="t.leaf"))
    torch.testing.assert_close(out, summed(size, (4,), 71))
    torch.testing.assert_close(leaf.detach(), rank_floats(rank, (4,), seed=71))


def test_one_native_call_for_every_argument_form(rank, size):
    """_C.allreduce_async is the only native entry of an allreduce: it raises horovod.torch's
    errors for bad arguments having submitted nothing, and reduces every accepted form."""
    native = _C.allreduce_async
    x = torch.ones(3)
    g = hvd.global_process_set
    before = _C.torch_handle_count()
    refused = [
        ((x, None, "n", 17, 1.0, 1.0, g, None), ValueError, "unknown reduction op"),
        ((x.int(), None, "n", hvd.Adasum, 1.0, 1.0, g, None), ValueError, "adasum needs"),
        ((x, None, "n", hvd.Sum, 1.0, 1.0, g, True), ValueError, "supersedes average"),
        ((x, None, "n", None, "two", 1.0, g, None), ValueError, "could not convert"),
        ((x, None, "n", None, 1.0, 2 ** 2000, g, None), OverflowError, "too large"),
        ((x, None, "n", None, 1.0, 1.0, hvd.ProcessSet([0]), None), ValueError, "not registered"),
        ((x, None, "n", None, 1.0, 1.0, "set", None), TypeError, "ProcessSet"),
        (([1.0], None, "n", None, 1.0, 1.0, g, None), TypeError, "must be a torch.Tensor, got list"),
        ((x.numpy(), None, "n", None, 1.0, 1.0, g, None), TypeError, "got ndarray"),
        ((torch.zeros(2, dtype=torch.complex64), None, "n", None, 1.0, 1.0, g, None), ValueError,
         "allreduce input: unsupported torch dtype torch.complex64"),
        ((torch.empty(2, device="meta"), None, "n", None, 1.0, 1.0, g, None), NotImplementedError,
         "on device 'meta'"),
    ]
    for args, error, match in refused:
        with pytest.raises(error, match=match):
            native(*args, True)
    assert _C.torch_handle_count() == before
    with pytest.raises(TypeError, match="takes 9 arguments"):
        native(x)
    h = native(x, None, "t.native.direct", hvd.Sum, 1, 1.0, g, None, True)
    assert h > 0 and hvd.synchronize(h) is x and x.tolist() == [float(size)] * 3
    # Forms that go through the package's rules: each is reduced by the same one call.
    t = torch.ones(4, 4).t()  # not contiguous: reduced in a copy, copied back
    assert hvd.synchronize(native(t, None, "t.native.nc", hvd.Sum, 1.0, 1.0, g, None, True)) is t
    assert t.tolist() == [[float(size)] * 4] * 4
    y = torch.ones(3)
    with pytest.warns(DeprecationWarning, match="replaced with `op`"):
        h = native(y, None, "t.native.avg", None, 1.0, 1.0, g, False, True)
    assert hvd.synchronize(h) is y and y.tolist() == [float(size)] * 3
    y = torch.ones(3)  # a bool op (True == Average), a name str()ed, a tensor scale, set None
    h = native(y, None, 5, True, torch.tensor(2.0), 1, None, None, True)
    assert hvd.synchronize(h) is y and y.tolist() == [2.0] * 3
    a = np.ones(3, dtype=np.float32)  # numpy's form of the same entry: a Handle object
    assert native(a, None, "t.native.np", hvd.Sum, 1.0, 1.0, g, None, False).result() is a
    assert a.tolist() == [float(size)] * 3
    assert _C.torch_handle_count() == before


def test_general_path_arguments_give_the_same_results(rank, size):
    def fresh(seed):
        return rank_floats(rank, (5,), seed=seed)

    # Each call declines the fast path for one argument; the general path must reduce as before.
    y = fresh(80)
    assert hvd.synchronize(hvd.allreduce_async_(y, name=81, op=hvd.Sum)) is y  # name str()ed
    torch.testing.assert_close(y, summed(size, (5,), 80))
    y = fresh(82)
    hvd.allreduce_(y, op=hvd.Sum, prescale_factor=torch.tensor(2.0), process_set=None)
    torch.testing.assert_close(y, 2 * summed(size, (5,), 82))
    y = fresh(83)
    with pytest.warns(DeprecationWarning, match="replaced with `op`"):
        hvd.allreduce_(y, average=False)
    torch.testing.assert_close(y, summed(size, (5,), 83))
    with pytest.raises(ValueError, match="supersedes average"):
        hvd.allreduce_async_(fresh(84), average=True, op=hvd.Sum)
    y = fresh(85)
    hvd.allreduce_(y, op=True)  # True == Average, as horovod.torch's dict lookup takes it
    torch.testing.assert_close(y, summed(size, (5,), 85) / size)
    # A subclass of torch.Tensor takes the fast path, and its result is right.
    p = torch.nn.Parameter(fresh(86), requires_grad=False)
    assert hvd.synchronize(hvd.allreduce_async_(p, op=hvd.Max)) is p
    torch.testing.assert_close(p.data, torch.stack([rank_floats(r, (5,), 86)
                                                    for r in range(size)]).max(dim=0).values)
