"""horovod_cpp.tensorflow.SyncBatchNormalization against one process's Keras BatchNormalization
over the batch of every rank concatenated (uneven per-rank batch sizes): outputs, moving
statistics, input/gamma/beta gradients, eagerly and in tf.function; inference mode; model.fit.
Every rank builds every rank's batch from seeds."""

import os
import tempfile

import keras
import numpy as np
import pytest
import tensorflow as tf

import horovod_cpp.keras as hvdk
import horovod_cpp.tensorflow as hvd
from conftest import run_mode

TOL = dict(rtol=2e-4, atol=2e-4)


def rank_batch(r, n, shape, seed):
    rng = np.random.default_rng(100 * seed + r)
    return (rng.normal(size=(n,) + shape) * (1 + r) + r).astype(np.float32)


def make_pair(shape, axis):
    """(SyncBatchNormalization, reference BatchNormalization), built, with equal seeded
    gamma and beta."""
    layer = hvd.SyncBatchNormalization(axis=axis, momentum=0.8)
    ref = keras.layers.BatchNormalization(axis=axis, momentum=0.8)
    channels = shape[axis if axis < 0 else axis - 1]
    rng = np.random.default_rng(7)
    gamma = rng.uniform(0.5, 1.5, size=channels).astype(np.float32)
    beta = rng.normal(size=channels).astype(np.float32)
    for m in (layer, ref):
        m.build((None,) + shape)
        m.gamma.assign(gamma)
        m.beta.assign(beta)
    return layer, ref


def forward_backward(layer, x, g):
    """The layer's training-mode output and the gradients of sum(output * g) with respect to
    the input, gamma and beta."""
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = layer(x, training=True)
        loss = tf.reduce_sum(y * g)
    dx, dgamma, dbeta = tape.gradient(loss, [x, layer.gamma, layer.beta])
    return y, dx, dgamma, dbeta


@pytest.mark.parametrize("mode", ["eager", "function"])
@pytest.mark.parametrize("shape,axis", [((3,), -1), ((4, 5, 3), -1), ((3, 4, 5), 1)])
def test_training_matches_concatenated_batch(mode, shape, axis):
    n, r = hvd.size(), hvd.rank()
    sizes = [2 + k for k in range(n)]
    start = sum(sizes[:r])
    mine = slice(start, start + sizes[r])
    layer, ref = make_pair(shape, axis)
    step = forward_backward if mode == "eager" else tf.function(forward_backward)
    for seed in range(2):
        xs = np.concatenate([rank_batch(k, m, shape, seed) for k, m in enumerate(sizes)])
        gs = np.concatenate([rank_batch(k, m, shape, seed + 50) for k, m in enumerate(sizes)])
        want = forward_backward(ref, tf.constant(xs), tf.constant(gs))
        got = step(layer, tf.constant(xs[mine]), tf.constant(gs[mine]))
        np.testing.assert_allclose(got[0].numpy(), want[0].numpy()[mine], **TOL)
        np.testing.assert_allclose(got[1].numpy(), want[1].numpy()[mine], **TOL)
        # Each rank holds its share of gamma's and beta's gradients; their sum is the whole's.
        for i, what in ((2, "gamma"), (3, "beta")):
            total = hvd.allreduce(got[i], op=hvd.Sum, name=f"sbn_tf.{what}")
            np.testing.assert_allclose(total.numpy(), want[i].numpy(), **TOL)
        np.testing.assert_allclose(layer.moving_mean.numpy(), ref.moving_mean.numpy(), **TOL)
        np.testing.assert_allclose(layer.moving_variance.numpy(), ref.moving_variance.numpy(),
                                   **TOL)

    # Inference: moving statistics, no communication (ranks call it different numbers of
    # times; a collective would pair with nothing and the test would time out).
    x = tf.constant(rank_batch(r, 3, shape, seed=9))
    for _ in range(r + 1):
        y = run_mode(mode, lambda t: layer(t, training=False), x)
    np.testing.assert_allclose(y.numpy(), ref(x, training=False).numpy(), **TOL)
    check = hvd.allreduce(tf.ones([1]), op=hvd.Sum, name=f"sbn_tf.after_eval.{mode}.{axis}")
    assert check.numpy()[0] == n


@pytest.mark.parametrize("mode", ["eager", "function"])
def test_mask_counts_only_unmasked_rows(mode):
    """A mask on (batch, steps, channels) inputs: the moments cover the unmasked steps of
    every rank, as one BatchNormalization given the concatenated batch and mask."""
    n, r = hvd.size(), hvd.rank()
    sizes = [1 + k for k in range(n)]
    mine = slice(sum(sizes[:r]), sum(sizes[:r + 1]))
    layer, ref = make_pair((6, 2), -1)
    xs = np.concatenate([rank_batch(k, m, (6, 2), 3) for k, m in enumerate(sizes)])
    mask = np.arange(6)[None, :] < (2 + np.arange(len(xs)) % 4)[:, None]
    want = ref(tf.constant(xs), training=True, mask=tf.constant(mask))
    got = run_mode(mode, lambda t, m: layer(t, training=True, mask=m), tf.constant(xs[mine]),
                   tf.constant(mask[mine]))
    np.testing.assert_allclose(got.numpy(), want.numpy()[mine], **TOL)
    np.testing.assert_allclose(layer.moving_variance.numpy(), ref.moving_variance.numpy(), **TOL)


def _bn_model(norm_layer):
    keras.utils.set_random_seed(11)
    return keras.Sequential([keras.Input((5,)), keras.layers.Dense(4), norm_layer,
                             keras.layers.Dense(1)])


def test_fit_on_uneven_shards_equals_one_process():
    """model.fit on uneven shards with a summed loss and op=Sum equals one process fitting the
    whole batch with Keras's BatchNormalization: weights and moving statistics."""
    n, r = hvd.size(), hvd.rank()
    sizes = [4 + 2 * k for k in range(n)]
    rng = np.random.default_rng(40)
    x = rng.normal(size=(sum(sizes), 5)).astype(np.float32) * 2 + 1
    y = (x @ rng.normal(size=(5, 1))).astype(np.float32)
    mine = slice(sum(sizes[:r]), sum(sizes[:r + 1]))

    model = _bn_model(hvdk.SyncBatchNormalization(momentum=0.5))
    model.compile(optimizer=hvdk.DistributedOptimizer(keras.optimizers.SGD(0.01), op=hvd.Sum),
                  loss=keras.losses.MeanSquaredError(reduction="sum"))
    model.fit(x[mine], y[mine], batch_size=sizes[r], epochs=3, shuffle=False, verbose=0)

    ref = _bn_model(keras.layers.BatchNormalization(momentum=0.5))
    ref.compile(optimizer=keras.optimizers.SGD(0.01),
                loss=keras.losses.MeanSquaredError(reduction="sum"))
    ref.fit(x, y, batch_size=len(x), epochs=3, shuffle=False, verbose=0)
    for got, want in zip(model.get_weights(), ref.get_weights()):
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4)


def test_saved_model_loads_without_custom_objects():
    model = _bn_model(hvd.SyncBatchNormalization(momentum=0.5, epsilon=0.01))
    x = np.random.default_rng(hvd.rank()).normal(size=(6, 5)).astype(np.float32)
    model(x, training=True)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "m.keras")
        model.save(path)
        loaded = keras.models.load_model(path)
    layer = loaded.layers[1]
    assert isinstance(layer, hvd.SyncBatchNormalization)
    assert layer.momentum == 0.5 and layer.epsilon == 0.01
    for got, want in zip(loaded.get_weights(), model.get_weights()):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_allclose(loaded(x, training=False).numpy(),
                               model(x, training=False).numpy(), rtol=1e-6, atol=1e-6)
