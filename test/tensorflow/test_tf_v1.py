"""The tf.compat.v1 session style: DistributedOptimizer + BroadcastGlobalVariablesHook in a
MonitoredTrainingSession (checkpoint_dir on rank 0 only)."""

import tempfile

import numpy as np
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
