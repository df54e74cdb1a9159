"""horovod_cpp.tensorflow's ops: every op and dtype, eagerly and in tf.function, every
element checked against values each rank computes on its own from every rank's seeded data."""

import numpy as np
import pytest
import tensorflow as tf

import horovod_cpp.tensorflow as hvd
from conftest import rank_data, run_mode

MODES = ["eager", "function"]
# TensorFlow dtype, the numpy dtype its test data is drawn as.
DTYPES = [(tf.uint8, np.uint8), (tf.int8, np.int8), (tf.int16, np.int16), (tf.int32, np.int32),
          (tf.int64, np.int64), (tf.float16, np.float16), (tf.bfloat16, np.float32),
          (tf.float32, np.float32), (tf.float64, np.float64)]
ALL_DTYPES = DTYPES + [(tf.bool, np.bool_)]


def _all(shape, npdt, seed):
    return [rank_data(r, shape, npdt, seed) for r in range(hvd.size())]


def _tf(x, dtype):
    return tf.cast(tf.constant(x), dtype) if dtype == tf.bfloat16 else tf.constant(x, dtype)


def _as_np(t, dtype):
    return tf.cast(t, tf.float32).numpy() if dtype == tf.bfloat16 else t.numpy()


def _tol(dtype):
    if dtype in (tf.float16, tf.bfloat16):
        return dict(rtol=2e-2, atol=5e-2)
    if dtype.is_floating:
        return dict(rtol=1e-5, atol=1e-5)
    return dict(rtol=0, atol=0)


def _rounded(vals, dtype):
    """Each rank's values as the dtype holds them, in float64 for the expectation."""
    return [_as_np(_tf(v, dtype), dtype).astype(np.float64) if dtype != tf.bool else v
            for v in vals]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype,npdt", DTYPES, ids=[d.name for d, _ in DTYPES])
def test_allreduce_every_op(mode, dtype, npdt):
    n = hvd.size()
    vals = _all((3, 5), npdt, seed=1)
    if dtype in (tf.float16, tf.bfloat16):  # keep products and sums small for half types
        vals = [np.round(v) for v in vals]
    exact = _rounded(vals, dtype)
    x = _tf(vals[hvd.rank()], dtype)
    expected = {hvd.Sum: np.sum(exact, 0), hvd.Min: np.min(exact, 0), hvd.Max: np.max(exact, 0),
                hvd.Product: np.prod(exact, 0)}
    if dtype.is_floating:
        expected[hvd.Average] = np.mean(exact, 0)
    else:
        expected[hvd.Average] = np.trunc(np.sum(exact, 0) / n)
    if dtype == tf.uint8:
        expected[hvd.Product] = np.prod(exact, 0) % 256
    for op, want in expected.items():
        got = run_mode(mode, lambda t: hvd.allreduce(t, op=op), x)
        assert got.dtype == dtype and got.shape == (3, 5)
        np.testing.assert_allclose(_as_np(got, dtype).astype(np.float64), want, **_tol(dtype),
                                   err_msg=f"op {op}")


@pytest.mark.parametrize("mode", MODES)
def test_allreduce_scale_factors_and_average_flag(mode):
    vals = _all((4,), np.float64, seed=2)
    x = tf.constant(vals[hvd.rank()])
    got = run_mode(mode, lambda t: hvd.allreduce(t, op=hvd.Sum, prescale_factor=0.5,
                                                 postscale_factor=3.0), x)
    np.testing.assert_allclose(got.numpy(), 1.5 * np.sum(vals, 0), rtol=1e-12)
    with pytest.warns(DeprecationWarning):
        got = hvd.allreduce(x, average=False)
    np.testing.assert_allclose(got.numpy(), np.sum(vals, 0), rtol=1e-12)
    with pytest.raises(ValueError):
        hvd.allreduce(x, average=True, op=hvd.Sum)


@pytest.mark.parametrize("mode", MODES)
def test_allreduce_fp16_compression(mode):
    vals = _all((6,), np.float32, seed=3)
    x = tf.constant(vals[hvd.rank()])
    got = run_mode(mode, lambda t: hvd.allreduce(t, compression=hvd.Compression.fp16), x)
    assert got.dtype == tf.float32
    np.testing.assert_allclose(got.numpy(), np.mean(vals, 0), rtol=5e-3, atol=5e-3)


@pytest.mark.parametrize("mode", MODES)
def test_grouped_allreduce_mixed(mode):
    a = _all((2, 3), np.float32, seed=4)
    b = _all((5,), np.float64, seed=5)
    c = _all((7,), np.int32, seed=6)
    r = hvd.rank()
    xs = [tf.constant(a[r]), tf.constant(b[r]), tf.constant(c[r])]
    got = run_mode(mode, lambda *t: hvd.grouped_allreduce(list(t), op=hvd.Sum), *xs)
    np.testing.assert_allclose(got[0].numpy(), np.sum(a, 0), rtol=1e-5)
    np.testing.assert_allclose(got[1].numpy(), np.sum(b, 0), rtol=1e-12)
    np.testing.assert_array_equal(got[2].numpy(), np.sum(c, 0))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype,npdt", ALL_DTYPES, ids=[d.name for d, _ in ALL_DTYPES])
def test_allgather_uneven(mode, dtype, npdt):
    vals = [rank_data(r, (r + 1, 4), npdt, seed=7) for r in range(hvd.size())]
    got = run_mode(mode, hvd.allgather, _tf(vals[hvd.rank()], dtype))
    assert got.dtype == dtype
    want = np.concatenate(_rounded(vals, dtype), 0)
    np.testing.assert_array_equal(_as_np(got, dtype), want)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype,npdt", ALL_DTYPES, ids=[d.name for d, _ in ALL_DTYPES])
def test_broadcast(mode, dtype, npdt):
    root = hvd.size() - 1
    vals = _all((3, 2), npdt, seed=8)
    got = run_mode(mode, lambda t: hvd.broadcast(t, root), _tf(vals[hvd.rank()], dtype))
    np.testing.assert_array_equal(_as_np(got, dtype), _rounded(vals, dtype)[root])


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype,npdt", ALL_DTYPES, ids=[d.name for d, _ in ALL_DTYPES])
def test_alltoall_uneven(mode, dtype, npdt):
    n, r = hvd.size(), hvd.rank()
    # Rank s sends (s + d) % 3 rows to rank d.
    splits = [[(s + d) % 3 for d in range(n)] for s in range(n)]
    vals = [rank_data(s, (sum(splits[s]), 2), npdt, seed=9) for s in range(n)]
    out, rsplits = run_mode(mode, lambda t, sp: hvd.alltoall(t, splits=sp),
                            _tf(vals[r], dtype), tf.constant(splits[r], tf.int32))
    rounded = _rounded(vals, dtype)
    want = []
    for s in range(n):
        start = sum(splits[s][:r])
        want.append(rounded[s][start:start + splits[s][r]])
    np.testing.assert_array_equal(_as_np(out, dtype), np.concatenate(want, 0))
    np.testing.assert_array_equal(rsplits.numpy(), [splits[s][r] for s in range(n)])


@pytest.mark.parametrize("mode", MODES)
def test_alltoall_even_split(mode):
    n, r = hvd.size(), hvd.rank()
    vals = [np.arange(2 * n, dtype=np.int64) + 100 * s for s in range(n)]
    got = run_mode(mode, hvd.alltoall, tf.constant(vals[r]))
    np.testing.assert_array_equal(got.numpy(), np.concatenate([v[2 * r:2 * r + 2] for v in vals]))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype,npdt", DTYPES, ids=[d.name for d, _ in DTYPES])
def test_reducescatter(mode, dtype, npdt):
    n, r = hvd.size(), hvd.rank()
    rows = 2 * n + 1
    vals = _all((rows, 3), npdt, seed=10)
    if dtype in (tf.float16, tf.bfloat16):
        vals = [np.round(v) for v in vals]
    exact = _rounded(vals, dtype)
    counts = [rows // n + (1 if i < rows % n else 0) for i in range(n)]
    start = sum(counts[:r])
    for op in (hvd.Sum, hvd.Average):
        got = run_mode(mode, lambda t: hvd.reducescatter(t, op=op), _tf(vals[r], dtype))
        full = np.sum(exact, 0)
        if op == hvd.Average:
            full = full / n if dtype.is_floating else np.trunc(full / n)
        np.testing.assert_allclose(_as_np(got, dtype).astype(np.float64),
                                   full[start:start + counts[r]], **_tol(dtype))


def test_mismatch_raises_on_every_rank_then_next_op_works():
    r = hvd.rank()
    with pytest.raises(tf.errors.FailedPreconditionError) as e:
        hvd.allreduce(tf.zeros([r + 1]), name="tf.mismatch.shape")
    msg = str(e.value)
    assert "tf.mismatch.shape" in msg and "rank 0" in msg and "rank 1" in msg
    with pytest.raises(tf.errors.FailedPreconditionError) as e:
        hvd.allreduce(tf.zeros([2], tf.float32 if r == 0 else tf.float64),
                      name="tf.mismatch.dtype")
    assert "tf.mismatch.dtype" in str(e.value)

    @tf.function
    def in_graph(x):
        return hvd.allgather(x, name="tf.mismatch.graph")

    with pytest.raises(tf.errors.FailedPreconditionError):
        in_graph(tf.zeros([1, r + 1]))
    got = hvd.allreduce(tf.fill([3], float(r)), op=hvd.Sum)
    np.testing.assert_array_equal(got.numpy(), [sum(range(hvd.size()))] * 3)


def test_unregistered_process_set_raises():
    # A set not registered with add_process_set() is refused locally, at once.
    with pytest.raises(ValueError):
        hvd.allreduce(tf.ones([1]), process_set=hvd.ProcessSet([0]))


def test_process_set_collectives():
    n, r = hvd.size(), hvd.rank()
    evens = hvd.add_process_set([i for i in range(n) if i % 2 == 0])
    try:
        if r % 2 == 0:
            got = hvd.allreduce(tf.constant([float(r)]), op=hvd.Sum, process_set=evens)
            assert got.numpy()[0] == sum(i for i in range(n) if i % 2 == 0)
            g = hvd.allgather(tf.constant([[r]]), process_set=evens)
            np.testing.assert_array_equal(g.numpy().ravel(), [i for i in range(n) if i % 2 == 0])
        hvd.barrier()
    finally:
        hvd.remove_process_set(evens)


def test_join_and_barrier():
    last = int(hvd.join())
    assert 0 <= last < hvd.size()
    lasts = hvd.allgather(tf.constant([last])).numpy()
    assert (lasts == last).all()
    hvd.barrier()


def test_objects_and_variables():
    r = hvd.rank()
    obj = hvd.broadcast_object({"rank": r, "list": [r] * 3}, root_rank=1)
    assert obj == {"rank": 1, "list": [1, 1, 1]}
    assert hvd.allgather_object(("x", r)) == [("x", i) for i in range(hvd.size())]
    vs = [tf.Variable(np.full((2, 2), r, np.float32)), tf.Variable([r, r + 1])]
    hvd.broadcast_variables(vs, root_rank=0)
    np.testing.assert_array_equal(vs[0].numpy(), np.zeros((2, 2)))
    np.testing.assert_array_equal(vs[1].numpy(), [0, 1])


def test_indexed_slices_are_gathered():
    n, r = hvd.size(), hvd.rank()
    dense_shape = tf.constant([6, 2], tf.int64)
    vals = [rank_data(s, (2, 2), np.float32, seed=11) for s in range(n)]
    idx = [np.array([s % 6, (s + 3) % 6], np.int64) for s in range(n)]
    sl = tf.IndexedSlices(tf.constant(vals[r]), tf.constant(idx[r]), dense_shape)
    got = hvd.allreduce(sl, op=hvd.Average)
    assert isinstance(got, tf.IndexedSlices)
    want = np.zeros((6, 2), np.float64)
    for s in range(n):
        np.add.at(want, idx[s], vals[s])
    np.testing.assert_allclose(tf.convert_to_tensor(got).numpy(), want / n, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode", MODES)
def test_large_results_stay_intact_while_held(mode):
    """Results of 64 KiB and more become outputs without a copy (the op's output shares the
    library's buffer): each must keep its values while later collectives of the same sizes run
    (their buffers must not be handed out again while TensorFlow holds them), and must work as
    any tensor in later ops."""
    n, r = hvd.size(), hvd.rank()
    rows = 40000  # 40000 x 4 float32 per rank: an allgather result of n x 640 KB
    held = []
    for step in range(4):
        vals = [rank_data(s, (rows + s, 4), np.float32, seed=20 + step) for s in range(n)]
        gathered = run_mode(mode, hvd.allgather, tf.constant(vals[r]))
        a2a_vals = [rank_data(s, (rows * n, 2), np.float32, seed=40 + step) for s in range(n)]
        exchanged = run_mode(mode, hvd.alltoall, tf.constant(a2a_vals[r]))
        rs_vals = [rank_data(s, (rows * n, 2), np.float64, seed=60 + step) for s in range(n)]
        scattered = run_mode(mode, lambda t: hvd.reducescatter(t, op=hvd.Sum),
                             tf.constant(rs_vals[r]))
        held.append((vals, gathered, a2a_vals, exchanged, rs_vals, scattered))
    for step, (vals, gathered, a2a_vals, exchanged, rs_vals, scattered) in enumerate(held):
        np.testing.assert_array_equal(gathered.numpy(), np.concatenate(vals, 0),
                                      err_msg=f"allgather of step {step}")
        np.testing.assert_array_equal(
            exchanged.numpy(), np.concatenate([v[r * rows:(r + 1) * rows] for v in a2a_vals], 0),
            err_msg=f"alltoall of step {step}")
        full = np.sum(rs_vals, 0)
        np.testing.assert_allclose(scattered.numpy(), full[r * rows:(r + 1) * rows], rtol=1e-12,
                                   err_msg=f"reducescatter of step {step}")
        # Consumed by later ops like any tensor.
        np.testing.assert_allclose((gathered * 2.0 + 1.0).numpy(),
                                   np.concatenate(vals, 0) * 2.0 + 1.0, rtol=1e-6)
