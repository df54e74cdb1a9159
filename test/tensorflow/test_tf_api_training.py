"""Horovod's training-side TensorFlow/Keras names (issue 38): local gradients on Keras 3
variables (register_local_source, PartialDistributedGradientTape, the Keras optimizer's
register_local_var, PartialDistributedOptimizer), BroadcastGlobalVariablesCallback's
local_variables, and ranks outside a tape's or optimizer's process set keeping their gradients
local. Each rank computes the expected values from every rank's seeded data."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import horovod_cpp.keras as hvdk
import horovod_cpp.tensorflow as hvd
from conftest import rank_data

MODES = ["eager", "function"]


def _two_layers(seed=3):
    keras.utils.set_random_seed(seed)
    shared, local = keras.layers.Dense(2), keras.layers.Dense(1)
    shared.build((None, 3))
    local.build((None, 2))
    return shared, local


def _inputs(r):
    return tf.constant(rank_data(r, (4, 3), np.float32, 60))


def _local_grads(shared, local, x):
    """This rank's own gradients of sum(local(shared(x))) (no reduction)."""
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(local(shared(x)))
    return [g.numpy() for g in tape.gradient(loss, shared.trainable_weights +
                                             local.trainable_weights)]


def _expect(shared, local, scale_local):
    """Every rank's local gradients; the shared ones averaged, the local ones this rank's own
    (divided by the size when scale_local)."""
    n, r = hvd.size(), hvd.rank()
    every = [_local_grads(shared, local, _inputs(s)) for s in range(n)]
    k = len(shared.trainable_weights)
    want = [np.mean([e[i] for e in every], 0) for i in range(k)]
    want += [g / (n if scale_local else 1) for g in every[r][k:]]
    return want


def _tape_grads(mode, shared, local, make_tape):
    variables = shared.trainable_weights + local.trainable_weights

    def step(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(local(shared(x)))
        return make_tape(tape).gradient(loss, variables)

    return (step if mode == "eager" else tf.function(step))(_inputs(hvd.rank()))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("scale", [True, False])
def test_register_local_source_on_keras_variables(mode, scale):
    shared, local = _two_layers()

    def make(tape):
        tape = hvd.DistributedGradientTape(tape, scale_local_gradients=scale)
        for v in local.trainable_weights:  # Keras 3 variables: no .ref()
            tape.register_local_source(v)
        return tape

    got = _tape_grads(mode, shared, local, make)
    for g, w in zip(got, _expect(shared, local, scale)):
        np.testing.assert_allclose(g.numpy(), w, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode", MODES)
def test_partial_distributed_gradient_tape(mode):
    shared, local = _two_layers()
    got = _tape_grads(mode, shared, local, lambda tape: hvd.PartialDistributedGradientTape(
        tape, local_layers=local))
    for g, w in zip(got, _expect(shared, local, True)):
        np.testing.assert_allclose(g.numpy(), w, rtol=1e-5, atol=1e-6)


def _optimizer_step(mode, opt, shared, local):
    """One SGD(1.0) step with this rank's gradients; returns how far each weight moved."""
    variables = shared.trainable_weights + local.trainable_weights
    before = [v.numpy().copy() for v in variables]
    grads = [tf.constant(g) for g in _local_grads(shared, local, _inputs(hvd.rank()))]

    def apply(grads):
        opt.apply(grads, variables)

    (apply if mode == "eager" else tf.function(apply))(grads)
    return [b - v.numpy() for b, v in zip(before, variables)]


@pytest.mark.parametrize("mode", MODES)
def test_keras_optimizer_register_local_var(mode):
    shared, local = _two_layers()
    want = _expect(shared, local, True)
    opt = hvdk.DistributedOptimizer(keras.optimizers.SGD(1.0))
    for v in local.trainable_weights:
        opt.register_local_var(v)
    for moved, w in zip(_optimizer_step(mode, opt, shared, local), want):
        np.testing.assert_allclose(moved, w, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode", MODES)
def test_keras_partial_distributed_optimizer(mode):
    shared, local = _two_layers()
    want = _expect(shared, local, False)
    opt = hvdk.PartialDistributedOptimizer(keras.optimizers.SGD(1.0), local_layers=[local],
                                           scale_local_gradients=False)
    for moved, w in zip(_optimizer_step(mode, opt, shared, local), want):
        np.testing.assert_allclose(moved, w, rtol=1e-4, atol=1e-5)


def test_broadcast_callback_leaves_local_variables():
    r = hvd.rank()
    keras.utils.set_random_seed(100 + r)  # different initial weights on every rank
    model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(3), keras.layers.Dense(1)])
    own = model.layers[1].kernel
    own_initial = own.numpy().copy()
    root = hvd.broadcast_object([w.numpy() for w in model.weights], root_rank=0)
    model.compile(optimizer=hvdk.DistributedOptimizer(keras.optimizers.SGD(0.0)), loss="mse")
    x = rank_data(r, (8, 5), np.float32, 61)
    model.fit(x, x[:, :1], batch_size=8, epochs=1, verbose=0,
              callbacks=[hvdk.callbacks.BroadcastGlobalVariablesCallback(
                  0, local_variables=[own])])
    for w, want in zip(model.weights, root):
        np.testing.assert_array_equal(w.numpy(), own_initial if w is own else want)


def _outside_set():
    """A set of every rank but the last; the last rank is outside it."""
    return hvd.add_process_set(list(range(hvd.size() - 1)))


@pytest.mark.parametrize("mode", MODES)
def test_tape_outside_its_process_set_keeps_gradients_local(mode):
    n, r = hvd.size(), hvd.rank()
    ps = _outside_set()
    try:
        v = tf.Variable([1.0, -2.0])

        def step(c):
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(c * v)
            return hvd.DistributedGradientTape(tape, process_set=ps).gradient(loss, [v])[0]

        got = (step if mode == "eager" else tf.function(step))(tf.constant(float(r + 1)))
        want = float(r + 1) if r == n - 1 else np.mean([s + 1.0 for s in range(n - 1)])
        np.testing.assert_allclose(got.numpy(), [want, want], rtol=1e-6)
    finally:
        hvd.barrier()
        hvd.remove_process_set(ps)


def test_tf1_optimizer_register_local_var():
    n, r = hvd.size(), hvd.rank()
    with tf.Graph().as_default():
        w = tf.compat.v1.get_variable("w", initializer=tf.constant([1.0, 2.0]))
        own = tf.compat.v1.get_variable("own", initializer=tf.constant([3.0]))
        loss = float(r + 1) * (tf.reduce_sum(w) + tf.reduce_sum(own))
        opt = hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(1.0))
        opt.register_local_var(own)
        grads = opt.compute_gradients(loss, [w, own])
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            gw, gown = sess.run([grads[0][0], grads[1][0]])
    np.testing.assert_allclose(gw, [np.mean([s + 1.0 for s in range(n)])] * 2, rtol=1e-6)
    np.testing.assert_allclose(gown, [(r + 1.0) / n], rtol=1e-6)


def test_tf1_optimizer_outside_its_process_set_keeps_gradients_local():
    n, r = hvd.size(), hvd.rank()
    ps = _outside_set()
    try:
        with tf.Graph().as_default():
            w = tf.compat.v1.get_variable("w", initializer=tf.constant([1.0, 2.0]))
            loss = tf.reduce_sum(float(r + 1) * w)
            opt = hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(1.0),
                                           process_set=ps)
            grads = opt.compute_gradients(loss, [w])
            with tf.compat.v1.Session() as sess:
                sess.run(tf.compat.v1.global_variables_initializer())
                g = sess.run(grads[0][0])
        want = float(r + 1) if r == n - 1 else np.mean([s + 1.0 for s in range(n - 1)])
        np.testing.assert_allclose(g, [want, want], rtol=1e-6)
    finally:
        hvd.barrier()
        hvd.remove_process_set(ps)
