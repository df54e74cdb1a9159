"""A custom training loop: tf.function + horovod_cpp.tensorflow.DistributedGradientTape on the
digits data set.

    mpirun -np 2 .venv-tf/bin/python examples/tensorflow/custom_loop_digits.py

Written for horovod.tensorflow: only the import differs. The variables are broadcast from
rank 0 after the first step (when the optimizer's state exists), as in Horovod's examples.
"""

import argparse
import gzip
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import horovod_cpp.tensorflow as hvd  # noqa: E402  (was: import horovod.tensorflow as hvd)

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_DATA = os.path.join(HERE, "..", "data", "digits.csv.gz")


def load_digits(path):
    with gzip.open(path, "rt") as f:
        rows = np.loadtxt(f, delimiter=",", dtype=np.float32)
    return rows[:, :64] / 16.0, rows[:, 64].astype(np.int64)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", default=DEFAULT_DATA)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--min-accuracy", type=float, default=0.95)
    args = parser.parse_args()

    hvd.init()
    keras.utils.set_random_seed(4321 + hvd.rank())
    x, y = load_digits(args.data)
    perm = np.random.default_rng(0).permutation(len(y))
    n_test = len(y) // 5
    test_idx, train_idx = perm[:n_test], perm[n_test:]
    my_idx = train_idx[hvd.rank()::hvd.size()]
    steps = len(train_idx) // hvd.size() // args.batch_size

    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(64, activation="relu"),
                              keras.layers.Dense(10)])
    opt = keras.optimizers.SGD(args.lr * hvd.size(), momentum=0.9)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def train_step(xb, yb, first_batch):
        with tf.GradientTape() as tape:
            loss = loss_fn(yb, model(xb, training=True))
        tape = hvd.DistributedGradientTape(tape)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        if first_batch:
            hvd.broadcast_variables(model.variables, root_rank=0)
            hvd.broadcast_variables(opt.variables, root_rank=0)
        return loss

    rng = np.random.default_rng(hvd.rank())
    for epoch in range(args.epochs):
        order = rng.permutation(my_idx)
        total = 0.0
        for s in range(steps):
            b = order[s * args.batch_size:(s + 1) * args.batch_size]
            total += float(train_step(x[b], y[b], epoch == 0 and s == 0))
        avg = float(hvd.allreduce(tf.constant(total / steps)))
        if hvd.rank() == 0:
            print(f"epoch {epoch + 1}: loss {avg:.4f}")

    flat = np.concatenate([v.numpy().ravel() for v in model.variables])
    everyone = hvd.allgather_object(flat)
    same = all(np.array_equal(w, everyone[0]) for w in everyone)
    acc = float(np.mean(np.argmax(model(x[test_idx]).numpy(), 1) == y[test_idx]))
    if hvd.rank() == 0:
        print(f"held-out accuracy {acc:.4f}; weights identical on all {hvd.size()} ranks: {same}")
    sys.exit(0 if same and acc >= args.min_accuracy else 1)


if __name__ == "__main__":
    main()
