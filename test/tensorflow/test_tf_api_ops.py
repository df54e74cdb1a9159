"""Horovod's TensorFlow names and behaviours beyond the basic collectives (issue 38): uint16
through the moving collectives, grouped_allgather, grouped_reducescatter, broadcast_,
process_set_included_op, IndexedSlices with Average on integers, the reducescatter gradient
and unknown process set ids. Eagerly and in tf.function; each rank computes the expected
values from every rank's seeded data."""

import numpy as np
import pytest
import tensorflow as tf

import horovod_cpp.tensorflow as hvd
from conftest import rank_data, run_mode

MODES = ["eager", "function"]


def _u16(r, shape, seed):
    """Rank r's uint16 values, spanning the whole range (so a signed reading would differ)."""
    rng = np.random.default_rng(100 * seed + r)
    return rng.integers(0, 65536, size=shape).astype(np.uint16)


@pytest.mark.parametrize("mode", MODES)
def test_uint16_allgather_broadcast_alltoall(mode):
    n, r = hvd.size(), hvd.rank()
    rows = [s + 1 for s in range(n)]
    vals = [_u16(s, (rows[s], 3), 1) for s in range(n)]
    got = run_mode(mode, hvd.allgather, tf.constant(vals[r]))
    assert got.dtype == tf.uint16
    np.testing.assert_array_equal(got.numpy(), np.concatenate(vals, 0))

    got = run_mode(mode, lambda t: hvd.broadcast(t, n - 1), tf.constant(vals[r][:1]))
    assert got.dtype == tf.uint16
    np.testing.assert_array_equal(got.numpy(), vals[n - 1][:1])

    # Rank s sends (d + s) % 2 + 1 rows to rank d.
    sent = [[(d + s) % 2 + 1 for d in range(n)] for s in range(n)]
    data = [_u16(s, (sum(sent[s]), 2), 2) for s in range(n)]
    out, rsplits = run_mode(mode, lambda t, sp: hvd.alltoall(t, splits=sp),
                            tf.constant(data[r]), tf.constant(sent[r], tf.int32))
    assert out.dtype == tf.uint16
    want = [data[s][sum(sent[s][:r]):sum(sent[s][:r + 1])] for s in range(n)]
    np.testing.assert_array_equal(out.numpy(), np.concatenate(want, 0))
    np.testing.assert_array_equal(rsplits.numpy(), [sent[s][r] for s in range(n)])


@pytest.mark.parametrize("mode", MODES)
def test_uint16_against_int16_is_a_dtype_mismatch(mode):
    """uint16 is a dtype of its own in the runtime: a rank passing int16 where the others pass
    uint16 fails on every rank, naming both, and the next collective works."""
    n, r = hvd.size(), hvd.rank()
    dtype = tf.int16 if r == n - 1 else tf.uint16
    with pytest.raises(tf.errors.FailedPreconditionError) as e:
        run_mode(mode, lambda t: hvd.broadcast(t, 0, name="tf.u16.mismatch." + mode),
                 tf.zeros([4], dtype))
    msg = str(e.value)
    assert "uint16" in msg and "int16[4]" in msg and "rank {}".format(n - 1) in msg
    got = run_mode(mode, hvd.allgather, tf.constant(_u16(r, (2,), 9)))
    np.testing.assert_array_equal(got.numpy(), np.concatenate([_u16(s, (2,), 9) for s in range(n)]))


@pytest.mark.parametrize("mode", MODES)
def test_grouped_allgather_mixed_dtypes_uneven_rows(mode):
    n, r = hvd.size(), hvd.rank()
    a = [rank_data(s, (s + 1, 2), np.float32, 3) for s in range(n)]
    b = [_u16(s, (2 * s + 1,), 4) for s in range(n)]
    c = [rank_data(s, (n - s, 1, 2), np.int64, 5) for s in range(n)]
    got = run_mode(mode, lambda x, y, z: hvd.grouped_allgather([x, y, z]),
                   tf.constant(a[r]), tf.constant(b[r]), tf.constant(c[r]))
    assert [g.dtype for g in got] == [tf.float32, tf.uint16, tf.int64]
    for g, vals in zip(got, [a, b, c]):
        np.testing.assert_array_equal(g.numpy(), np.concatenate(vals, 0))
    assert hvd.grouped_allgather([]) == []


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("op", ["Sum", "Average"])
def test_grouped_reducescatter(mode, op):
    n, r = hvd.size(), hvd.rank()
    rows = [2 * n + 1, n]
    vals = [[rank_data(s, (rows[k], 3), np.float64, 6 + k) for s in range(n)] for k in range(2)]
    got = run_mode(mode, lambda x, y: hvd.grouped_reducescatter([x, y], op=getattr(hvd, op)),
                   tf.constant(vals[0][r]), tf.constant(vals[1][r]))
    for k, g in enumerate(got):
        total = np.sum(vals[k], 0) / (n if op == "Average" else 1)
        counts = [rows[k] // n + (1 if i < rows[k] % n else 0) for i in range(n)]
        start = sum(counts[:r])
        np.testing.assert_allclose(g.numpy(), total[start:start + counts[r]], rtol=1e-12)


def _grad(mode, f, xs, ws):
    def g(xs, ws):
        with tf.GradientTape() as tape:
            for x in xs:
                tape.watch(x)
            outs = f(xs)
            loss = tf.add_n([tf.reduce_sum(w * o) for w, o in zip(ws, outs)])
        return tape.gradient(loss, xs)
    return (g if mode == "eager" else tf.function(g))(xs, ws)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("op", ["Sum", "Average"])
def test_grouped_reducescatter_gradient(mode, op):
    """As Horovod's reducescatter gradient (test_tf_gradients.py): the allgathered upstream
    gradient, times the set's size for Sum."""
    n, r = hvd.size(), hvd.rank()
    rows = 2 * n + 1
    counts = [rows // n + (1 if i < rows % n else 0) for i in range(n)]
    ws = [rank_data(d, (counts[d], 2), np.float64, 8) for d in range(n)]
    x = tf.constant(rank_data(r, (rows, 2), np.float64, 9))
    want = np.concatenate(ws, 0) * (n if op == "Sum" else 1)
    got = _grad(mode, lambda xs: hvd.grouped_reducescatter(xs, op=getattr(hvd, op)), [x, 2 * x],
                [tf.constant(ws[r]), tf.constant(ws[r])])
    for g in got:
        np.testing.assert_allclose(g.numpy(), want, rtol=1e-12)


@pytest.mark.parametrize("mode", MODES)
def test_grouped_allgather_gradient(mode):
    """Each member as allgather's gradient: averaged over the ranks, then this rank's rows."""
    n, r = hvd.size(), hvd.rank()
    rows = [s + 1 for s in range(n)]
    ws = [rank_data(s, (sum(rows), 2), np.float64, 10) for s in range(n)]
    x = tf.constant(rank_data(r, (rows[r], 2), np.float64, 11))
    x2 = tf.constant(rank_data(r, (rows[r], 2), np.float64, 12))
    got = _grad(mode, hvd.grouped_allgather, [x, x2], [tf.constant(ws[r]), tf.constant(ws[r])])
    start = sum(rows[:r])
    for g in got:
        np.testing.assert_allclose(g.numpy(), np.mean(ws, 0)[start:start + rows[r]],
                                   rtol=1e-12)


@pytest.mark.parametrize("mode", MODES)
def test_broadcast_in_place(mode):
    n, r = hvd.size(), hvd.rank()
    root = n - 1
    vs = [tf.Variable(np.full((2, 3), r, np.float32)), tf.Variable([r, r + 1], dtype=tf.int64)]
    out = run_mode(mode, lambda: hvd.broadcast_(vs, root_rank=root))
    np.testing.assert_array_equal(vs[0].numpy(), np.full((2, 3), root))
    np.testing.assert_array_equal(vs[1].numpy(), [root, root + 1])
    np.testing.assert_array_equal(out[0].numpy(), np.full((2, 3), root))
    one = tf.Variable(float(r))
    got = run_mode(mode, lambda: hvd.broadcast_(one, root_rank=0))
    assert one.numpy() == 0.0 and got.numpy() == 0.0
    with pytest.raises(TypeError):
        hvd.broadcast_([tf.constant(1.0)], root_rank=0)


def test_process_set_included_op():
    n, r = hvd.size(), hvd.rank()
    first = hvd.add_process_set([0])
    try:
        assert int(hvd.process_set_included_op()) == 1
        assert int(hvd.process_set_included_op(first.process_set_id)) == (1 if r == 0 else 0)
        with pytest.raises(ValueError):
            hvd.process_set_included_op(12345)
    finally:
        hvd.remove_process_set(first)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", [tf.uint8, tf.int32, tf.int64, tf.float16, tf.float32])
def test_indexed_slices_average_divides(mode, dtype):
    """As Horovod: the gathered values divided by the size (a true division: integers become
    floating point)."""
    n, r = hvd.size(), hvd.rank()
    dense_shape = tf.constant([6, 2], tf.int64)
    vals = [rank_data(s, (2, 2), np.int64, 12).astype(np.float64) % 4 + 1 for s in range(n)]
    idx = [np.array([s % 6, (s + 3) % 6], np.int64) for s in range(n)]

    def f(v, i):
        sl = tf.IndexedSlices(v, i, dense_shape)
        a = hvd.allreduce(sl, op=hvd.Average)
        g = hvd.grouped_allreduce([sl, tf.cast(v, tf.float32)], op=hvd.Average)[0]
        return a.values, a.indices, g.values

    values, indices, gvalues = run_mode(mode, f, tf.constant(vals[r], dtype), tf.constant(idx[r]))
    want = np.concatenate(vals, 0) / n
    assert values.dtype == tf.math.truediv(tf.constant(1, dtype), tf.constant(1, dtype)).dtype
    np.testing.assert_allclose(values.numpy().astype(np.float64), want, rtol=1e-3)
    np.testing.assert_allclose(gvalues.numpy().astype(np.float64), want, rtol=1e-3)
    np.testing.assert_array_equal(indices.numpy(), np.concatenate(idx, 0))


def test_indexed_slices_with_scale_factors_not_implemented():
    sl = tf.IndexedSlices(tf.ones([1, 2]), tf.constant([0], tf.int64), tf.constant([3, 2]))
    for kw in (dict(prescale_factor=2.0), dict(postscale_factor=0.5)):
        with pytest.raises(NotImplementedError):
            hvd.allreduce(sl, op=hvd.Sum, **kw)
        with pytest.raises(NotImplementedError):
            hvd.grouped_allreduce([sl], op=hvd.Average, **kw)
    got = hvd.allreduce(tf.constant([1.0]), op=hvd.Sum)  # the next collective still works
    assert got.numpy()[0] == hvd.size()


def test_unknown_process_set_id_raises_value_error():
    ps = hvd.add_process_set(list(range(hvd.size())))
    removed = hvd.ProcessSet(list(range(hvd.size())))
    removed.process_set_id = 4321  # an id no registration gave
    try:
        for call in (lambda: hvd.allreduce(tf.ones([2]), process_set=removed),
                     lambda: hvd.allgather(tf.ones([2]), process_set=removed),
                     lambda: hvd.grouped_allreduce([tf.ones([2])], process_set=removed),
                     lambda: hvd.broadcast(tf.ones([2]), 0, process_set=removed)):
            with pytest.raises(ValueError, match="4321"):
                call()
        got = hvd.allreduce(tf.ones([2]), op=hvd.Sum, process_set=ps)
        np.testing.assert_array_equal(got.numpy(), [hvd.size()] * 2)
    finally:
        hvd.remove_process_set(ps)
