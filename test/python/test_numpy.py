"""horovod_cpp on numpy arrays: every collective, element by element, and the errors."""

import os
import threading
import time

import numpy as np
import pytest

import horovod_cpp as hvd
from conftest import rank_data

FLOATS = [np.float16, np.float32, np.float64]
INTS = [np.uint8, np.int8, np.uint16, np.int16, np.int32, np.int64]


def tol(dtype):
    return {np.float16: 2e-2, np.float32: 1e-5, np.float64: 1e-12}.get(dtype, 0)


def expected_reduce(op, arrays):
    stack = np.stack([a.astype(np.float64) if a.dtype != np.bool_ else a for a in arrays])
    if op == hvd.Sum:
        return stack.sum(0)
    if op == hvd.Average:
        return stack.sum(0) / len(arrays)
    if op == hvd.Min:
        return stack.min(0)
    if op == hvd.Max:
        return stack.max(0)
    return stack.prod(0)


def test_topology(rank, size):
    assert 0 <= rank < size
    assert 0 <= hvd.local_rank() < hvd.local_size()
    assert 0 <= hvd.cross_rank() < hvd.cross_size()
    assert hvd.local_size() * hvd.cross_size() == size  # one host, or homogeneous hosts
    ranks = hvd.allgather_object((rank, hvd.local_rank(), hvd.size()))
    assert [r for r, _, _ in ranks] == list(range(size))
    assert all(s == size for _, _, s in ranks)
    assert hvd.is_initialized()
    assert hvd.is_homogeneous()
    hvd.init()  # a second init is a no-op, as in Horovod
    assert hvd.size() == size


def test_build_queries():
    on_gloo = os.environ.get("HOROVOD_GLOO") == "1" or os.environ.get("HOROVOD_CONTROLLER") == "gloo"
    assert hvd.mpi_built() is True and hvd.mpi_enabled() is (not on_gloo)
    assert isinstance(hvd.gloo_built(), bool) and hvd.gloo_enabled() is on_gloo
    assert isinstance(hvd.nccl_built(), bool) and isinstance(hvd.cuda_built(), bool)


@pytest.mark.parametrize("dtype", FLOATS + INTS)
@pytest.mark.parametrize("op", [hvd.Sum, hvd.Min, hvd.Max, hvd.Average])
def test_allreduce_ops_dtypes(rank, size, dtype, op):
    shape = (3, 5)
    mine = rank_data(rank, shape, dtype, seed=op)
    before = mine.copy()
    out = hvd.allreduce(mine, op=op, name=f"np.ar.{np.dtype(dtype).name}.{op}")
    want = expected_reduce(op, [rank_data(r, shape, dtype, seed=op) for r in range(size)])
    assert out.dtype == np.dtype(dtype) and out.shape == shape
    np.testing.assert_array_equal(mine, before)  # out of place: input untouched
    if np.issubdtype(np.dtype(dtype), np.integer):
        if op == hvd.Average:
            want = np.trunc(want)
        np.testing.assert_array_equal(out.astype(np.float64), want.astype(dtype).astype(np.float64))
    else:
        np.testing.assert_allclose(out.astype(np.float64), want, rtol=tol(dtype), atol=tol(dtype))


def test_uint16_is_unsigned_and_small_int_sums_wrap(rank, size):
    # uint16 values past int16's range: max and min compare them as unsigned; sums of 8- and
    # 16-bit integers wrap like numpy's (on every path, MPI's included).
    mine = (40000 + 997 * rank + np.arange(64) * 13).astype(np.uint16)
    every = [(40000 + 997 * r + np.arange(64) * 13).astype(np.uint16) for r in range(size)]
    got_max = hvd.allreduce(mine, op=hvd.Max, name="np.u16.max")
    assert got_max.dtype == np.uint16
    np.testing.assert_array_equal(got_max, np.max(every, axis=0))
    np.testing.assert_array_equal(hvd.allreduce(mine, op=hvd.Min, name="np.u16.min"),
                                  np.min(every, axis=0))
    np.testing.assert_array_equal(hvd.allreduce(mine, op=hvd.Sum, name="np.u16.sum"),
                                  np.sum(every, axis=0, dtype=np.uint16))
    for dtype, base in ((np.int8, 100), (np.uint8, 200), (np.int16, 30000)):
        x = np.full(64, base, dtype=dtype)
        np.testing.assert_array_equal(
            hvd.allreduce(x, op=hvd.Sum, name="np.wrap." + np.dtype(dtype).name),
            np.sum([x] * size, axis=0, dtype=dtype))
    gathered = hvd.allgather(mine, name="np.u16.gather")
    assert gathered.dtype == np.uint16
    np.testing.assert_array_equal(gathered, np.concatenate(every))


def test_allreduce_product_and_bool(rank, size):
    x = np.array([1.0 + rank, 2.0, -1.0], dtype=np.float64)
    np.testing.assert_allclose(hvd.allreduce(x, op=hvd.Product),
                               [np.prod([1.0 + r for r in range(size)]), 2.0 ** size, (-1.0) ** size])
    b = np.array([rank == 0, True, False, rank % 2 == 1])
    np.testing.assert_array_equal(hvd.allreduce(b, op=hvd.Max), [True, True, False, size > 1])
    np.testing.assert_array_equal(hvd.allreduce(b, op=hvd.Min), [size == 1, True, False, False])


def test_allreduce_in_place_and_scaling(rank, size):
    x = rank_data(rank, (4, 4), np.float32, seed=7)
    same = x
    res = hvd.allreduce_(x, op=hvd.Sum, prescale_factor=0.5, postscale_factor=3.0)
    assert res is same
    want = sum(rank_data(r, (4, 4), np.float32, seed=7).astype(np.float64) for r in range(size)) * 1.5
    np.testing.assert_allclose(x, want, rtol=1e-5, atol=1e-5)


def test_allreduce_scalar_and_python_list(size):
    assert float(hvd.allreduce(np.float64(2.5), op=hvd.Sum)) == 2.5 * size
    np.testing.assert_array_equal(hvd.allreduce([1, 2, 3], op=hvd.Sum), np.array([1, 2, 3]) * size)


def test_async_poll_synchronize(rank, size):
    arrays = [rank_data(rank, (100,), np.float32, seed=20 + i) for i in range(5)]
    handles = [hvd.allreduce_async(a, op=hvd.Sum, name=f"np.async.{i}") for i, a in enumerate(arrays)]
    inplace = rank_data(rank, (7,), np.int32, seed=30)
    h2 = hvd.allreduce_async_(inplace, op=hvd.Max)
    for i, h in enumerate(handles):
        out = hvd.synchronize(h)
        assert hvd.poll(h)
        want = sum(rank_data(r, (100,), np.float32, seed=20 + i).astype(np.float64) for r in range(size))
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
    assert hvd.synchronize(h2) is inplace
    np.testing.assert_array_equal(inplace, np.max([rank_data(r, (7,), np.int32, seed=30) for r in range(size)], 0))


def test_poll_before_completion_and_timeout(rank, size):
    x = np.ones(3, dtype=np.float32)
    if rank == 0:
        h = hvd.allreduce_async(x, op=hvd.Sum, name="np.late")
        assert not hvd.poll(h) or size == 1
        if size > 1:
            with pytest.raises(hvd.HorovodTimeoutError):
                hvd.synchronize(h, timeout=0.2)
        hvd.barrier()  # the other ranks submit after this
    else:
        hvd.barrier()
        h = hvd.allreduce_async(x, op=hvd.Sum, name="np.late")
    np.testing.assert_array_equal(hvd.synchronize(h), np.full(3, size, dtype=np.float32))


def test_gil_released_while_waiting(rank, size):
    """While rank 0 waits for a late rank, another Python thread keeps running."""
    counter = [0]
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            counter[0] += 1
            time.sleep(0.001)

    if rank == 1:
        time.sleep(0.5)
    t = threading.Thread(target=spin)
    t.start()
    try:
        out = hvd.allreduce(np.array([1.0]), op=hvd.Sum, name="np.gil")
    finally:
        stop.set()
        t.join()
    assert out[0] == size
    if rank == 0 and size > 1:
        assert counter[0] > 50  # the spinning thread ran during the ~0.5 s wait


def test_grouped_allreduce(rank, size):
    arrays = [rank_data(rank, (i + 1, 3), np.float64, seed=40 + i) for i in range(4)]
    outs = hvd.grouped_allreduce(arrays, op=hvd.Average, name="np.group")
    assert len(outs) == 4
    for i, out in enumerate(outs):
        want = sum(rank_data(r, (i + 1, 3), np.float64, seed=40 + i) for r in range(size)) / size
        np.testing.assert_allclose(out, want, rtol=1e-12)
        np.testing.assert_array_equal(arrays[i], rank_data(rank, (i + 1, 3), np.float64, seed=40 + i))
    inplace = [rank_data(rank, (5,), np.int64, seed=50 + i) for i in range(3)]
    res = hvd.grouped_allreduce_(inplace, op=hvd.Sum)
    for i, a in enumerate(inplace):
        assert res[i] is a
        np.testing.assert_array_equal(a, sum(rank_data(r, (5,), np.int64, seed=50 + i) for r in range(size)))
    h = hvd.grouped_allreduce_async([np.full(2, rank, np.float32)], op=hvd.Min)
    np.testing.assert_array_equal(hvd.synchronize(h)[0], [0, 0])


@pytest.mark.parametrize("dtype", FLOATS + INTS + [np.bool_])
def test_allgather_varying_first_dim(rank, size, dtype):
    mine = rank_data(rank, (rank + 1, 2, 3), dtype, seed=60)
    out = hvd.allgather(mine, name=f"np.ag.{np.dtype(dtype).name}")
    want = np.concatenate([rank_data(r, (r + 1, 2, 3), dtype, seed=60) for r in range(size)])
    assert out.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(out, want)
    out[...] = out  # the result is an ordinary writable array owned by the library


def test_allgather_async_and_empty(rank, size):
    h = hvd.allgather_async(np.arange(rank, dtype=np.int32))  # rank 0 gives zero rows
    np.testing.assert_array_equal(hvd.synchronize(h), np.concatenate([np.arange(r, dtype=np.int32) for r in range(size)]))


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.bool_, np.float16])
def test_broadcast(rank, size, dtype):
    for root in range(size):
        mine = rank_data(rank, (3, 2), dtype, seed=70)
        out = hvd.broadcast(mine, root_rank=root, name=f"np.bc.{np.dtype(dtype).name}.{root}")
        np.testing.assert_array_equal(out, rank_data(root, (3, 2), dtype, seed=70))
        np.testing.assert_array_equal(mine, rank_data(rank, (3, 2), dtype, seed=70))
        h = hvd.broadcast_async_(mine, root)
        assert hvd.synchronize(h) is mine
        np.testing.assert_array_equal(mine, rank_data(root, (3, 2), dtype, seed=70))


def test_broadcast_in_place_and_async(rank, size):
    x = np.full(4, rank, dtype=np.int32)
    hvd.broadcast_(x, size - 1)
    np.testing.assert_array_equal(x, np.full(4, size - 1))
    h = hvd.broadcast_async(np.full(2, rank + 10.0), 0)
    np.testing.assert_array_equal(hvd.synchronize(h), [10.0, 10.0])


def test_barrier(rank, size):
    t0 = time.time()
    if rank == 0:
        time.sleep(0.3)
    hvd.barrier()
    if rank != 0:
        assert time.time() - t0 >= 0.25


def test_objects(rank, size):
    obj = {"rank": rank, "data": list(range(rank)), "s": "x" * rank}
    got = hvd.broadcast_object(obj if rank == size - 1 else None, root_rank=size - 1)
    assert got == {"rank": size - 1, "data": list(range(size - 1)), "s": "x" * (size - 1)}
    everyone = hvd.allgather_object(obj, name="objs")
    assert everyone == [{"rank": r, "data": list(range(r)), "s": "x" * r} for r in range(size)]
    assert hvd.broadcast_object(None, root_rank=0) is None


# ---- errors ------------------------------------------------------------------------------
def test_mismatched_shape_is_internal_error_on_every_rank(rank, size):
    if size < 2:
        pytest.skip("needs 2 ranks")
    x = np.zeros(3 + rank, dtype=np.float32)
    with pytest.raises(hvd.HorovodInternalError) as info:
        hvd.allreduce(x, name="np.mismatch.shape")
    assert isinstance(info.value, RuntimeError)
    assert isinstance(info.value, hvd.MismatchError)


def test_mismatched_dtype_and_root(rank, size):
    if size < 2:
        pytest.skip("needs 2 ranks")
    x = np.zeros(3, dtype=np.float32 if rank == 0 else np.float64)
    with pytest.raises(hvd.HorovodInternalError):
        hvd.allreduce(x, name="np.mismatch.dtype")
    with pytest.raises(hvd.HorovodInternalError):
        hvd.broadcast(np.zeros(2), root_rank=rank, name="np.mismatch.root")
    # the runtime still works afterwards
    np.testing.assert_array_equal(hvd.allreduce(np.ones(2), op=hvd.Sum), [size, size])


def test_local_misuse_is_value_error():
    with pytest.raises(ValueError):
        hvd.allreduce(np.zeros(3, dtype=np.complex64))
    with pytest.raises(ValueError):
        hvd.allreduce(np.zeros(3, dtype=np.uint32))
    with pytest.raises(ValueError):
        hvd.allreduce_(np.zeros((4, 4))[:, 1])  # not contiguous
    ro = np.zeros(3)
    ro.setflags(write=False)
    with pytest.raises(ValueError):
        hvd.allreduce_(ro)
    with pytest.raises(ValueError):
        hvd.allreduce(np.array([True, False]), op=hvd.Average)
    with pytest.raises(ValueError):
        hvd.allreduce(np.ones(2, dtype=np.bool_), op=hvd.Sum, prescale_factor=2.0)
    with pytest.raises(ValueError):
        hvd.broadcast(np.zeros(2), root_rank=hvd.size())
    with pytest.raises(ValueError):
        hvd.allreduce(np.zeros(2), op=42)
    with pytest.raises(ValueError):
        hvd.allgather(np.float32(1.0))  # a scalar cannot be gathered
    with pytest.raises(TypeError):
        hvd.allreduce_([1.0, 2.0])
    with pytest.raises(hvd.InvalidArgumentError):  # a name twice in one group
        hvd._C.grouped_allreduce_async([np.zeros(2), np.zeros(2)], ["dup", "dup"])
    # after all these the runtime is healthy
    np.testing.assert_array_equal(hvd.allreduce(np.ones(1), op=hvd.Sum), [hvd.size()])


def test_duplicate_pending_name_is_value_error(rank, size):
    x, y = np.ones(2), np.ones(2)
    h = hvd.allreduce_async_(x, op=hvd.Sum, name="np.dup")
    with pytest.raises(ValueError):
        hvd.allreduce_async_(y, op=hvd.Sum, name="np.dup")
    np.testing.assert_array_equal(hvd.synchronize(h), [size, size])


def test_still_not_implemented():
    with pytest.raises(ValueError, match="adasum needs a floating-point tensor"):
        hvd.allreduce(np.zeros(2, dtype=np.int32), op=hvd.Adasum)
    with pytest.raises(TypeError):
        hvd.join(device="cuda:0")


def test_unregistered_process_set_is_value_error():
    with pytest.raises(ValueError, match="not registered"):
        hvd.allreduce(np.zeros(2), process_set=hvd.ProcessSet([0]))
    assert hvd.ProcessSet([0]).size() is None


def test_process_set_global(rank, size):
    ps = hvd.global_process_set
    assert ps.size() == size and ps.rank() == rank and ps.included()
    np.testing.assert_array_equal(hvd.allreduce(np.ones(1), op=hvd.Sum, process_set=ps), [size])
