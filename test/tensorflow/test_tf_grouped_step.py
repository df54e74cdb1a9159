"""A step's gradients in one grouped allreduce: DistributedGradientTape and the Keras
DistributedOptimizer reduce every dense gradient of a step with one HorovodCppGroupedAllreduce
per dtype (no groups given, op not Adasum). Checked: the traced graph holds those ops and no
single allreduce, and every element of every result equals the average (or scaled sum) that
each rank computes itself from every rank's data, with several dtypes, a None gradient,
IndexedSlices and compression in the same step."""

import numpy as np
import pytest
import tensorflow as tf

import horovod_cpp.tensorflow as hvd
from conftest import rank_data

MODES = ["eager", "function"]
SHAPES = [(3, 4), (5,), (2, 3), (7,)]


def _variables():
    """Four dense variables (two float32, two float64), one unused, and an embedding table."""
    vs = [tf.Variable(np.zeros(s, np.float32 if i % 2 == 0 else np.float64))
          for i, s in enumerate(SHAPES)]
    unused = tf.Variable(np.zeros((2,), np.float32))
    table = tf.Variable(np.zeros((6, 2), np.float32))
    return vs, unused, table


def _weights(r, seed):
    """Rank r's coefficients: the gradient of loss = sum(w * v) is w."""
    return [rank_data(r, s, np.float32 if i % 2 == 0 else np.float64, seed + i)
            for i, s in enumerate(SHAPES)]


def _rows(r):
    return np.array([r % 6, (r + 2) % 6], np.int32)


def _expected(n, seed, op_scale):
    """(dense gradients, dense embedding gradient) as every rank computes them."""
    ws = [_weights(s, seed) for s in range(n)]
    dense = [op_scale(np.sum([w[i] for w in ws], 0), n) for i in range(len(SHAPES))]
    table = np.zeros((6, 2), np.float64)
    for s in range(n):
        for row in _rows(s):
            table[row] += rank_data(s, (2,), np.float32, seed + 9)
    return dense, op_scale(table, n)


def _tape_step(mode, op=hvd.Average, compression=hvd.Compression.none, seed=40, **kw):
    r = hvd.rank()
    vs, unused, table = _variables()
    ws = [tf.constant(w) for w in _weights(r, seed)]
    rows = tf.constant(_rows(r))
    emb_w = tf.constant(rank_data(r, (2,), np.float32, seed + 9))

    def step():
        with tf.GradientTape() as tape:
            loss = tf.add_n([tf.reduce_sum(tf.cast(w * v, tf.float64)) for w, v in zip(ws, vs)])
            loss += tf.cast(tf.reduce_sum(tf.gather(table, rows) * emb_w), tf.float64)
        tape = hvd.DistributedGradientTape(tape, op=op, compression=compression, **kw)
        return tape.gradient(loss, vs + [unused, table])

    fn = step if mode == "eager" else tf.function(step)
    return fn() if mode == "eager" else fn(), fn


def _op_types(fn):
    graph = fn.get_concrete_function().graph
    return [o.type for o in graph.get_operations()]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("op", ["Average", "Sum"])
def test_tape_step_grouped_exact(mode, op):
    n = hvd.size()
    scale = (lambda s, k: s / k) if op == "Average" else (lambda s, k: s)
    grads, fn = _tape_step(mode, op=getattr(hvd, op))
    dense, table = _expected(n, 40, scale)
    for g, want in zip(grads[:len(SHAPES)], dense):
        assert g.dtype == tf.as_dtype(want.dtype)
        np.testing.assert_allclose(g.numpy(), want, rtol=1e-6 if want.dtype == np.float32
                                   else 1e-13)
    assert grads[len(SHAPES)] is None  # the unused variable's gradient stays None
    assert isinstance(grads[-1], tf.IndexedSlices)  # gathered, not densified
    np.testing.assert_allclose(tf.convert_to_tensor(grads[-1]).numpy(), table, rtol=1e-6)
    if mode == "function":
        types = _op_types(fn)
        # One grouped op per dtype for the four dense gradients; the sparse one gathered.
        assert types.count("HorovodCppGroupedAllreduce") == 2, types
        assert "HorovodCppAllreduce" not in types
        assert types.count("HorovodCppAllgather") == 2  # its values and its indices


@pytest.mark.parametrize("mode", MODES)
def test_tape_step_grouped_with_compression_and_scale(mode):
    n = hvd.size()
    grads, fn = _tape_step(mode, compression=hvd.Compression.fp16, seed=50,
                           gradient_predivide_factor=2.0)
    dense, _ = _expected(n, 50, lambda s, k: s / k)
    for g, want in zip(grads[:len(SHAPES)], dense):
        # fp16 on the wire (float64 too): the values are rounded to half precision.
        tol = 2e-3
        assert g.dtype == tf.as_dtype(want.dtype)
        np.testing.assert_allclose(g.numpy(), want, rtol=tol, atol=tol)
    if mode == "function":
        types = _op_types(fn)
        assert types.count("HorovodCppGroupedAllreduce") == 1  # all float16 on the wire
        assert "HorovodCppAllreduce" not in types


def test_tape_step_with_adasum_stays_per_tensor():
    """Adasum's result depends on how the tensors are cut: it keeps one allreduce each."""
    _, fn = _tape_step("function", op=hvd.Adasum, seed=60, sparse_as_dense=True)
    types = _op_types(fn)
    assert "HorovodCppGroupedAllreduce" not in types
    assert types.count("HorovodCppAllreduce") == len(SHAPES) + 1  # the table's densified


@pytest.mark.parametrize("mode", MODES)
def test_keras_optimizer_step_grouped_exact(mode):
    """One SGD step of the Keras DistributedOptimizer: every variable moves by the average of
    every rank's gradient."""
    import keras

    import horovod_cpp.keras as hvd_keras
    r, n = hvd.rank(), hvd.size()
    shapes = [(4, 3), (3,), (6,)]
    vs = [keras.Variable(np.ones(s, np.float32)) for s in shapes]
    opt = hvd_keras.DistributedOptimizer(keras.optimizers.SGD(0.5))
    opt.build(vs)
    grads = [rank_data(r, s, np.float32, 70 + i) for i, s in enumerate(shapes)]

    def apply():
        # Made here, not captured: inside tf.function a captured eager tensor's placeholder
        # is named by a process-wide counter, which differs across ranks once earlier tests
        # built different graphs (rank-only code), and an op's default name comes from its
        # input's name, as in Horovod: the ranks' names would then differ.
        opt.apply([tf.constant(g) for g in grads], vs)

    (apply if mode == "eager" else tf.function(apply))()
    for i, (s, v) in enumerate(zip(shapes, vs)):
        avg = np.mean([rank_data(k, s, np.float32, 70 + i) for k in range(n)], 0)
        np.testing.assert_allclose(v.numpy(), 1.0 - 0.5 * avg, rtol=1e-6, atol=1e-6)
