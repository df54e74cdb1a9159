"""The TF1 session style: a tf.compat.v1 graph fitting y = 2x + 10 with
MonitoredTrainingSession, DistributedOptimizer and BroadcastGlobalVariablesHook(0).

    mpirun -np 2 .venv-tf/bin/python examples/tensorflow/tf1_linear_regression.py

Written for horovod.tensorflow: only the import differs. The learning rate is scaled by the
number of ranks; checkpoint_dir is given on rank 0 only, so other ranks never write.
"""

import os
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import horovod_cpp.tensorflow as hvd  # noqa: E402  (was: import horovod.tensorflow as hvd)


def main():
    tf.compat.v1.disable_eager_execution()
    hvd.init()
    x = tf.compat.v1.placeholder(tf.float32, [None])
    y = tf.compat.v1.placeholder(tf.float32, [None])
    w = tf.compat.v1.get_variable("w", [], initializer=tf.compat.v1.random_normal_initializer())
    b = tf.compat.v1.get_variable("b", [], initializer=tf.compat.v1.random_normal_initializer())
    loss = tf.reduce_mean(tf.square(w * x + b - y))
    opt = tf.compat.v1.train.GradientDescentOptimizer(0.05 * hvd.size())
    opt = hvd.DistributedOptimizer(opt)
    global_step = tf.compat.v1.train.get_or_create_global_step()
    train_op = opt.minimize(loss, global_step=global_step)
    hooks = [hvd.BroadcastGlobalVariablesHook(0)]
    checkpoint_dir = tempfile.mkdtemp(prefix="tf1_linreg_") if hvd.rank() == 0 else None
    rng = np.random.default_rng(hvd.rank())  # every rank its own data
    with tf.compat.v1.train.MonitoredTrainingSession(checkpoint_dir=checkpoint_dir,
                                                     hooks=hooks) as sess:
        step = 0
        while step < 400 and not sess.should_stop():
            xs = rng.uniform(-1, 1, 64).astype(np.float32)
            _, l, step = sess.run([train_op, loss, global_step], {x: xs, y: 2 * xs + 10})
            if hvd.rank() == 0 and step % 100 == 0:
                print(f"step {step}: loss {l:.6f}")
        wf, bf = sess.run([w, b])
    everyone = hvd.allgather_object((float(wf), float(bf)))
    same = all(e == everyone[0] for e in everyone)
    if hvd.rank() == 0:
        print(f"w = {wf:.4f}, b = {bf:.4f} (want 2, 10); identical on all ranks: {same}")
    sys.exit(0 if same and abs(wf - 2) < 0.05 and abs(bf - 10) < 0.05 else 1)


if __name__ == "__main__":
    main()
