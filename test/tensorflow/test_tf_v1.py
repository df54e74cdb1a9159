"""The tf.compat.v1 session style: DistributedOptimizer + BroadcastGlobalVariablesHook in a
MonitoredTrainingSession (checkpoint_dir on rank 0 only)."""

import tempfile

import numpy as np
import pytest
import tensorflow as tf

import horovod_cpp.tensorflow as hvd


def test_monitored_session_with_hook_and_optimizer():
    r, n = hvd.rank(), hvd.size()
    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.set_random_seed(1 + r)  # different initial values on every rank
        x = tf.compat.v1.placeholder(tf.float32, [None])
        y = tf.compat.v1.placeholder(tf.float32, [None])
        w = tf.compat.v1.get_variable("w", [], initializer=tf.compat.v1.random_normal_initializer())
        b = tf.compat.v1.get_variable("b", [], initializer=tf.compat.v1.random_normal_initializer())
        loss = tf.reduce_mean(tf.square(w * x + b - y))
        opt = hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.05 * n))
        step = tf.compat.v1.train.get_or_create_global_step()
        train = opt.minimize(loss, global_step=step)
        # Every rank's local gradient of w at the broadcast initial point, for the check.
        local_grad = tf.gradients(loss, [w])[0]
        hooks = [hvd.BroadcastGlobalVariablesHook(0)]
        ckpt = tempfile.mkdtemp() if r == 0 else None
        rng = np.random.default_rng(80 + r)
        with tf.compat.v1.train.MonitoredTrainingSession(checkpoint_dir=ckpt, hooks=hooks,
                                                         save_checkpoint_secs=None) as sess:
            w0, b0 = sess.run([w, b])
            start = hvd.allgather_object((float(w0), float(b0)))
            assert all(s == start[0] for s in start)
            xs = rng.uniform(-1, 1, 32).astype(np.float32)
            g = sess.run(local_grad, {x: xs, y: 2 * xs + 10})
            sess.run(train, {x: xs, y: 2 * xs + 10})
            w1 = sess.run(w)
            grads = hvd.allgather_object(float(g))
            np.testing.assert_allclose(w1, w0 - 0.05 * n * np.mean(grads), rtol=1e-5)
            for _ in range(300):
                xs = rng.uniform(-1, 1, 32).astype(np.float32)
                sess.run(train, {x: xs, y: 2 * xs + 10})
            wf, bf = sess.run([w, b])
        final = hvd.allgather_object((float(wf), float(bf)))
        assert all(f == final[0] for f in final)
        np.testing.assert_allclose([wf, bf], [2.0, 10.0], atol=0.05)


# ---- backward_passes_per_step with tf.compat.v1 optimizers (Horovod's local aggregation) ----

def _pass_coeffs(r, p, n=3):
    """The gradient of rank r's loss at pass p (the loss is sum(w * c): its gradient is c)."""
    return np.array([1.0 + r + 10 * p, -2.0 * (r + 1) + p, 0.5 * p - r], np.float32)[:n]


@pytest.mark.parametrize("k", [2, 3])
@pytest.mark.parametrize("average", [False, True])
def test_v1_backward_passes_per_step(k, average):
    r, n = hvd.rank(), hvd.size()
    lr = 0.1
    graph = tf.Graph()
    with graph.as_default():
        c = tf.compat.v1.placeholder(tf.float32, [3])
        w = tf.compat.v1.get_variable("w", initializer=tf.constant([1.0, 2.0, 3.0]))
        frozen = tf.compat.v1.get_variable("frozen", initializer=tf.constant([5.0]))
        loss = tf.reduce_sum(w * c) + 0.0 * tf.reduce_sum(frozen)
        step = tf.compat.v1.train.get_or_create_global_step()
        opt = hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(lr),
                                       backward_passes_per_step=k,
                                       average_aggregated_gradients=average)
        train = opt.minimize(loss, global_step=step)
        with tf.compat.v1.Session() as sess:
            sess.run([tf.compat.v1.global_variables_initializer(),
                      tf.compat.v1.local_variables_initializer()])
            w_want = np.array([1.0, 2.0, 3.0], np.float32)
            for cycle in range(2):
                for p in range(k):
                    applied = sess.run(train, {c: _pass_coeffs(r, cycle * k + p)})
                    assert sess.run(step) == cycle * k + p + 1  # every pass counts
                    last = p == k - 1
                    assert bool(applied) == last
                    if last:
                        # Each rank's sum over the cycle's passes, averaged across ranks.
                        sums = [sum(_pass_coeffs(q, cycle * k + j) for j in range(k))
                                for q in range(n)]
                        g = np.mean(sums, axis=0)
                        if average:
                            g = g / k
                        w_want = w_want - lr * g
                    np.testing.assert_allclose(sess.run(w), w_want, rtol=1e-6, atol=1e-6)
            np.testing.assert_allclose(sess.run(frozen), [5.0])
            # The accumulators are local variables, zero again after the k-th pass.
            accs = [v for v in tf.compat.v1.local_variables() if "hvd_aggregated_grad" in v.name]
            assert accs and all(not np.any(sess.run(a)) for a in accs)
            assert not any("hvd_aggregat" in v.name for v in tf.compat.v1.global_variables())


def test_v1_backward_passes_with_adam_and_monitored_session():
    """Slot-creating optimizers apply inside the k-th pass only; MonitoredTrainingSession
    initializes the accumulators; every rank ends with the same weights."""
    r, n = hvd.rank(), hvd.size()
    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.set_random_seed(7 + r)  # different initial values on every rank
        c = tf.compat.v1.placeholder(tf.float32, [3])
        w = tf.compat.v1.get_variable("w", [3],
                                      initializer=tf.compat.v1.random_normal_initializer())
        loss = tf.reduce_sum(tf.square(w - c))
        step = tf.compat.v1.train.get_or_create_global_step()
        opt = hvd.DistributedOptimizer(tf.compat.v1.train.AdamOptimizer(0.01),
                                       backward_passes_per_step=2)
        train = opt.minimize(loss, global_step=step)
        hooks = [hvd.BroadcastGlobalVariablesHook(0)]
        with tf.compat.v1.train.MonitoredTrainingSession(hooks=hooks) as sess:
            w0 = sess.run(w)
            for p in range(6):
                before = sess.run(w)
                applied = sess.run(train, {c: _pass_coeffs(r, p)})
                after = sess.run(w)
                assert bool(applied) == (p % 2 == 1)
                if p % 2 == 0:
                    np.testing.assert_array_equal(after, before)
                else:
                    assert np.all(after != before)
            assert sess.run(step) == 6
            final = sess.run(w)
    everyone = hvd.allgather_object(final.tolist())
    assert all(e == everyone[0] for e in everyone)
    assert not np.allclose(final, w0)


def test_v1_backward_passes_sparse_gradients():
    """IndexedSlices gradients need sparse_as_dense=True (as in Horovod), then are accumulated
    densely."""
    r, n = hvd.rank(), hvd.size()
    graph = tf.Graph()
    with graph.as_default():
        emb = tf.compat.v1.get_variable("emb", initializer=tf.zeros([4, 2]))
        rows = tf.gather(emb, [r % 4, (r + 1) % 4])
        loss = tf.reduce_sum(rows * tf.constant([[1.0, 2.0], [3.0, 4.0]]))
        with pytest.raises(ValueError, match="sparse_as_dense"):
            hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(1.0),
                                     backward_passes_per_step=2).minimize(loss)
        opt = hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(1.0),
                                       backward_passes_per_step=2, sparse_as_dense=True)
        train = opt.minimize(loss)
        with tf.compat.v1.Session() as sess:
            sess.run([tf.compat.v1.global_variables_initializer(),
                      tf.compat.v1.local_variables_initializer()])
            sess.run(train)
            np.testing.assert_array_equal(sess.run(emb), np.zeros([4, 2]))
            sess.run(train)
            want = np.zeros([4, 2], np.float32)
            for q in range(n):  # two passes of every rank's gradient, averaged across ranks
                want[q % 4] -= 2 * np.array([1.0, 2.0]) / n
                want[(q + 1) % 4] -= 2 * np.array([3.0, 4.0]) / n
            np.testing.assert_allclose(sess.run(emb), want, rtol=1e-6)


def test_v1_backward_passes_eager():
    """The same aggregation without a graph: tf.compat.v1 optimizers run eagerly in TF 2."""
    r, n = hvd.rank(), hvd.size()
    w = tf.Variable([1.0, 2.0, 3.0])
    opt = hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1),
                                   backward_passes_per_step=2)
    want = np.array([1.0, 2.0, 3.0], np.float32)
    for p in range(4):
        coeff = tf.constant(_pass_coeffs(r, p))
        opt.minimize(lambda: tf.reduce_sum(w * coeff), var_list=[w])
        if p % 2 == 1:
            g = np.mean([_pass_coeffs(q, p - 1) + _pass_coeffs(q, p) for q in range(n)], axis=0)
            want = want - 0.1 * g
        np.testing.assert_allclose(w.numpy(), want, rtol=1e-6, atol=1e-6)
