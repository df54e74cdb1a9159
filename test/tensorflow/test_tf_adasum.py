"""horovod_cpp.tensorflow with op=hvd.Adasum: allreduce and grouped_allreduce eagerly and in
tf.function, and DistributedGradientTape(op=Adasum), every element checked against the NumPy
reference of the pairwise tree (test/python/adasum_reference.py) computed on every rank."""

import os
import sys

import numpy as np
import pytest
import tensorflow as tf

import horovod_cpp.tensorflow as hvd
from conftest import rank_data, run_mode

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from adasum_reference import assert_close, reference  # noqa: E402

MODES = ["eager", "function"]
DTYPES = [(tf.float16, np.float16, 4e-3), (tf.float32, np.float32, 1e-5),
          (tf.float64, np.float64, 1e-12)]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("tfdt,npdt,tol", DTYPES)
def test_allreduce(mode, tfdt, npdt, tol):
    seed = 800 + MODES.index(mode) * 10 + DTYPES.index((tfdt, npdt, tol))
    inputs = [rank_data(r, (9, 13), npdt, seed) for r in range(hvd.size())]
    x = tf.constant(inputs[hvd.rank()], tfdt)
    out = run_mode(mode, lambda t: hvd.allreduce(t, op=hvd.Adasum, name=f"tf.ada.{seed}"), x)
    assert out.dtype == tfdt
    assert_close(out.numpy(), reference(inputs), tol)


@pytest.mark.parametrize("mode", MODES)
def test_grouped_allreduce_is_per_tensor(mode):
    shapes = [(4,), (6, 5), (300,)]
    seed = 900 + MODES.index(mode) * 10
    inputs = [[rank_data(r, s, np.float32, seed + k) for k, s in enumerate(shapes)]
              for r in range(hvd.size())]
    xs = [tf.constant(a) for a in inputs[hvd.rank()]]
    outs = run_mode(mode, lambda ts: hvd.grouped_allreduce(ts, op=hvd.Adasum,
                                                           name=f"tf.ada.group.{mode}"), xs)
    for k in range(len(shapes)):
        assert_close(outs[k].numpy(), reference([inputs[r][k] for r in range(hvd.size())]), 1e-5)


def test_integers_refused():
    with pytest.raises(Exception, match="adasum needs a floating-point tensor"):
        hvd.allreduce(tf.constant([1, 2, 3], tf.int32), op=hvd.Adasum, name="tf.ada.int")
    out = hvd.allreduce(tf.constant([1.0, 2.0]), op=hvd.Sum, name="tf.ada.after")
    np.testing.assert_allclose(out.numpy(), [hvd.size(), 2.0 * hvd.size()])


def test_gradient_tape_reduces_by_adasum():
    """loss_r = sum(c_r * w^2): rank r's gradient is 2 c_r w; the tape hands back the Adasum
    of those, not divided by the size."""
    size = hvd.size()
    w0 = rank_data(0, (20,), np.float64, 950)
    cs = [rank_data(r, (20,), np.float64, 951) for r in range(size)]
    w = tf.Variable(w0)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.constant(cs[hvd.rank()]) * w * w)
    tape = hvd.DistributedGradientTape(tape, op=hvd.Adasum)
    (g,) = tape.gradient(loss, [w])
    assert_close(g.numpy(), reference([2 * c * w0 for c in cs]), 1e-12)


def test_keras_distributed_optimizer_applies_the_adasum():
    """SGD(1.0) wrapped with op=Adasum moves each variable by the Adasum of the ranks'
    gradients (each variable its own vector; no division by the size)."""
    import keras

    import horovod_cpp.keras as hvdk

    size = hvd.size()
    w0 = [rank_data(0, (6,), np.float32, 960), rank_data(0, (3, 2), np.float32, 961)]
    cs = [[rank_data(r, w.shape, np.float32, 962 + k) for k, w in enumerate(w0)]
          for r in range(size)]
    ws = [keras.Variable(w) for w in w0]
    grads = [tf.constant(2 * c * w) for c, w in zip(cs[hvd.rank()], w0)]
    opt = hvdk.DistributedOptimizer(keras.optimizers.SGD(1.0), op=hvd.Adasum)
    opt.apply_gradients(zip(grads, ws))
    for k, w in enumerate(w0):
        want = w - reference([2 * cs[r][k] * w for r in range(size)])
        assert_close(np.asarray(ws[k].numpy()), want, 1e-5)
