"""Gradients of the ops against analytic values, and DistributedGradientTape's options.

Every rank computes loss_r = sum(w_r * op(x_r)) with seeded w_r; the expected gradient of
x_r follows from every rank's w (Horovod's conventions: allreduce -> the same allreduce,
allgather -> averaged then sliced, broadcast -> averaged on the root and zero elsewhere,
alltoall -> alltoall back, reducescatter -> allgather, times the set's size for Sum)."""

import numpy as np
import pytest
import tensorflow as tf

import horovod_cpp.tensorflow as hvd
from conftest import rank_data

MODES = ["eager", "function"]


def _grad(mode, f, x, w):
    def g(x, w):
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = tf.reduce_sum(w * f(x))
        return tape.gradient(loss, x)
    return (g if mode == "eager" else tf.function(g))(x, w)


def _ws(shape, seed):
    return [rank_data(s, shape, np.float64, seed) for s in range(hvd.size())]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("op", ["Sum", "Average"])
def test_allreduce_gradient(mode, op):
    r, n = hvd.rank(), hvd.size()
    ws = _ws((3, 4), 20)
    x = tf.constant(rank_data(r, (3, 4), np.float64, 21))
    got = _grad(mode, lambda t: hvd.allreduce(t, op=getattr(hvd, op), prescale_factor=2.0), x,
                tf.constant(ws[r]))
    want = 2.0 * (np.sum(ws, 0) if op == "Sum" else np.mean(ws, 0))
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12)


@pytest.mark.parametrize("mode", MODES)
def test_grouped_allreduce_gradient(mode):
    r = hvd.rank()
    ws = _ws((5,), 22)
    x = tf.constant(rank_data(r, (5,), np.float64, 23))
    got = _grad(mode, lambda t: hvd.grouped_allreduce([t, 2 * t], op=hvd.Sum)[1], x,
                tf.constant(ws[r]))
    np.testing.assert_allclose(got.numpy(), 2 * np.sum(ws, 0), rtol=1e-12)


@pytest.mark.parametrize("mode", MODES)
def test_allgather_gradient(mode):
    r, n = hvd.rank(), hvd.size()
    rows = [s + 1 for s in range(n)]
    ws = _ws((sum(rows), 2), 24)
    x = tf.constant(rank_data(r, (rows[r], 2), np.float64, 25))
    got = _grad(mode, hvd.allgather, x, tf.constant(ws[r]))
    start = sum(rows[:r])
    np.testing.assert_allclose(got.numpy(), np.mean(ws, 0)[start:start + rows[r]], rtol=1e-12)


@pytest.mark.parametrize("mode", MODES)
def test_broadcast_gradient(mode):
    r, n = hvd.rank(), hvd.size()
    ws = _ws((4,), 26)
    x = tf.constant(rank_data(r, (4,), np.float64, 27))
    got = _grad(mode, lambda t: hvd.broadcast(t, 1), x, tf.constant(ws[r]))
    want = np.mean(ws, 0) if r == 1 else np.zeros(4)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12)


@pytest.mark.parametrize("mode", MODES)
def test_alltoall_gradient(mode):
    r, n = hvd.rank(), hvd.size()
    splits = [[(s + 2 * d) % 3 + 1 for d in range(n)] for s in range(n)]
    recv = [sum(splits[s][d] for s in range(n)) for d in range(n)]
    ws = [rank_data(d, (recv[d], 3), np.float64, 28) for d in range(n)]
    x = tf.constant(rank_data(r, (sum(splits[r]), 3), np.float64, 29))
    got = _grad(mode, lambda t: hvd.alltoall(t, splits=tf.constant(splits[r]))[0], x,
                tf.constant(ws[r]))
    # Row block sent to rank d lands in d's output after the blocks of ranks < r.
    want = []
    for d in range(n):
        off = sum(splits[s][d] for s in range(r))
        want.append(ws[d][off:off + splits[r][d]])
    np.testing.assert_allclose(got.numpy(), np.concatenate(want, 0), rtol=1e-12)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("op", ["Sum", "Average"])
def test_reducescatter_gradient(mode, op):
    r, n = hvd.rank(), hvd.size()
    rows = 2 * n + 1
    counts = [rows // n + (1 if i < rows % n else 0) for i in range(n)]
    ws = [rank_data(d, (counts[d], 2), np.float64, 30) for d in range(n)]
    x = tf.constant(rank_data(r, (rows, 2), np.float64, 31))
    got = _grad(mode, lambda t: hvd.reducescatter(t, op=getattr(hvd, op)), x, tf.constant(ws[r]))
    want = np.concatenate(ws, 0) * (n if op == "Sum" else 1)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12)


def _tape_case(mode, **options):
    """Gradients of loss_r = sum(w_r * v^2) + sum(emb rows) through a DistributedGradientTape:
    each rank's local gradient is 2 w_r v, so the average is 2 mean(w) v."""
    r, n = hvd.rank(), hvd.size()
    v = tf.Variable(np.arange(6, dtype=np.float32).reshape(2, 3))
    emb = tf.Variable(np.ones((5, 2), np.float32))
    ws = [rank_data(s, (2, 3), np.float32, 32) for s in range(n)]
    ids = [np.array([s % 5, (s + 1) % 5, 4]) for s in range(n)]

    def step(w, i):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(w * v * v) + tf.reduce_sum(tf.gather(emb, i))
        tape = hvd.DistributedGradientTape(tape, **options)
        return tape.gradient(loss, [v, emb])

    fn = step if mode == "eager" else tf.function(step)
    gv, gemb = fn(tf.constant(ws[r]), tf.constant(ids[r]))
    np.testing.assert_allclose(gv.numpy(), 2 * np.mean(ws, 0) * v.numpy(), rtol=2e-3, atol=2e-3)
    want = np.zeros((5, 2))
    for s in range(n):
        np.add.at(want, ids[s], 1.0)
    np.testing.assert_allclose(tf.convert_to_tensor(gemb).numpy(), want / n, rtol=1e-6)
    return gemb


@pytest.mark.parametrize("mode", MODES)
def test_tape_default_gathers_sparse(mode):
    assert isinstance(_tape_case(mode), tf.IndexedSlices)


@pytest.mark.parametrize("mode", MODES)
def test_tape_sparse_as_dense(mode):
    assert not isinstance(_tape_case(mode, sparse_as_dense=True), tf.IndexedSlices)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("options", [dict(compression=hvd.Compression.fp16),
                                     dict(gradient_predivide_factor=2.0),
                                     dict(num_groups=1, sparse_as_dense=True),
                                     dict(groups=2, sparse_as_dense=True)],
                         ids=["fp16", "predivide", "num_groups", "groups"])
def test_tape_options(mode, options):
    _tape_case(mode, **options)


def test_tape_local_source_is_not_reduced():
    r, n = hvd.rank(), hvd.size()
    v = tf.Variable([1.0, 2.0])
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(float(r + 1) * v)
    tape = hvd.DistributedGradientTape(tape)
    tape.register_local_source(v)
    g = tape.gradient(loss, [v])[0]
    np.testing.assert_allclose(g.numpy(), [(r + 1) / n] * 2, rtol=1e-6)
