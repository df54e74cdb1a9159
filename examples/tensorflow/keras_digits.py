"""Keras 3 data-parallel training on the 8x8 digits data set with horovod_cpp.keras.

    mpirun -np 2 .venv-tf/bin/python examples/tensorflow/keras_digits.py [--epochs 20]

Written for horovod.tensorflow.keras: only the import differs. Each rank fits its shard; the
learning rate is scaled by the number of ranks and warmed up; rank 0 alone writes checkpoints;
at the end every rank checks that its weights equal rank 0's and rank 0 prints the held-out
accuracy (exit status 1 below --min-accuracy or when weights differ).
"""

import argparse
import gzip
import os
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402

import horovod_cpp.keras as hvd  # noqa: E402  (was: import horovod.tensorflow.keras as hvd)

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_DATA = os.path.join(HERE, "..", "data", "digits.csv.gz")


def load_digits(path):
    """1,797 rows of 64 pixel values (0..16) followed by the label."""
    with gzip.open(path, "rt") as f:
        rows = np.loadtxt(f, delimiter=",", dtype=np.float32)
    return rows[:, :64] / 16.0, rows[:, 64].astype(np.int64)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", default=DEFAULT_DATA)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--lr", type=float, default=0.05, help="scaled by the number of ranks")
    parser.add_argument("--min-accuracy", type=float, default=0.95)
    parser.add_argument("--checkpoint-dir", default=None)
    args = parser.parse_args()

    hvd.init()
    keras.utils.set_random_seed(1234 + hvd.rank())  # different init per rank: broadcast fixes it

    x, y = load_digits(args.data)
    perm = np.random.default_rng(0).permutation(len(y))  # the same split on every rank
    n_test = len(y) // 5
    test_idx, train_idx = perm[:n_test], perm[n_test:]
    my_idx = train_idx[hvd.rank()::hvd.size()]  # this rank's shard

    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(64, activation="relu"),
                              keras.layers.Dense(10)])
    lr = args.lr * hvd.size()
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(lr, momentum=0.9))
    model.compile(optimizer=opt,
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    callbacks = [
        hvd.callbacks.BroadcastGlobalVariablesCallback(0),
        hvd.callbacks.MetricAverageCallback(),
        hvd.callbacks.LearningRateWarmupCallback(lr, warmup_epochs=3, verbose=1),
    ]
    if hvd.rank() == 0:  # checkpoints on rank 0 only
        ckpt_dir = args.checkpoint_dir or tempfile.mkdtemp(prefix="keras_digits_")
        callbacks.append(keras.callbacks.ModelCheckpoint(
            os.path.join(ckpt_dir, "checkpoint-{epoch}.weights.h5"), save_weights_only=True))
    # Equal steps per rank (shards may differ by one row): drop the ragged tail.
    steps = len(train_idx) // hvd.size() // args.batch_size
    n_rows = steps * args.batch_size
    model.fit(x[my_idx][:n_rows], y[my_idx][:n_rows], batch_size=args.batch_size,
              epochs=args.epochs, shuffle=True, verbose=2 if hvd.rank() == 0 else 0,
              callbacks=callbacks)

    flat = np.concatenate([w.ravel() for w in model.get_weights()])
    everyone = hvd.allgather_object(flat)
    same = all(np.array_equal(w, everyone[0]) for w in everyone)
    logits = model.predict(x[test_idx], verbose=0)
    acc = float(np.mean(np.argmax(logits, 1) == y[test_idx]))
    if hvd.rank() == 0:
        print(f"held-out accuracy {acc:.4f} on {len(test_idx)} digits; weights identical on "
              f"all {hvd.size()} ranks: {same}")
    ok = same and acc >= args.min_accuracy
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
