"""Elastic Keras 3 training on the 8x8 digits data set with horovod_cpp.keras.elastic.

    hvdrun -np 3 --min-np 2 --max-np 3 --host-discovery-script ./discover.sh \
        .venv-tf/bin/python examples/elastic/keras_digits_elastic.py [--epochs 20]

Written for horovod.tensorflow.keras's elastic API: only the import differs. model.fit runs
inside hvd.elastic.run with a KerasState (weights, optimizer state, epoch, batch); the elastic
callbacks keep epoch and batch current and commit every --batches-per-commit batches. After a
failure the survivors restore the last commit and fit the remaining epochs at the new size:
each call shards the training set over the current workers, and a reset callback rescales the
learning rate. At the end every rank checks that its weights equal rank 0's and rank 0 prints
the held-out accuracy (exit status 1 below --min-accuracy or when weights differ).
"""

import argparse
import gzip
import os
import sys

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
    parser.add_argument("--batch-size", type=int, default=32, help="per worker")
    parser.add_argument("--lr", type=float, default=0.05, help="scaled by the number of workers")
    parser.add_argument("--batches-per-commit", type=int, default=5)
    parser.add_argument("--min-accuracy", type=float, default=0.95)
    args = parser.parse_args()

    hvd.init()
    keras.utils.set_random_seed(1234 + hvd.rank())  # different init per rank: the sync fixes it

    x, y = load_digits(args.data)
    perm = np.random.default_rng(0).permutation(len(y))  # the same split on every rank
    n_test = len(y) // 5
    test_idx, train_idx = perm[:n_test], perm[n_test:]

    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(64, activation="relu"),
                              keras.layers.Dense(10)])
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(args.lr * hvd.size(), momentum=0.9))
    model.compile(optimizer=opt,
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])

    state = hvd.elastic.KerasState(model, batch=0, epoch=0)

    def on_state_reset():
        model.optimizer.learning_rate.assign(args.lr * hvd.size())

    state.register_reset_callbacks([on_state_reset])
    callbacks = [
        hvd.callbacks.MetricAverageCallback(),
        hvd.elastic.UpdateEpochStateCallback(state),
        hvd.elastic.UpdateBatchStateCallback(state),
        hvd.elastic.CommitStateCallback(state, batches_per_commit=args.batches_per_commit),
    ]

    @hvd.elastic.run
    def train(state):
        # This worker's shard at the current size; equal steps on every worker.
        mine = train_idx[hvd.rank()::hvd.size()]
        steps = len(train_idx) // hvd.size() // args.batch_size
        rows = mine[:steps * args.batch_size]
        state.model.fit(x[rows], y[rows], batch_size=args.batch_size,
                        epochs=args.epochs - state.epoch, shuffle=True, callbacks=callbacks,
                        verbose=2 if hvd.rank() == 0 else 0)

    train(state)

    flat = np.concatenate([w.ravel() for w in model.get_weights()])
    everyone = hvd.allgather_object(flat)
    same = all(np.array_equal(w, everyone[0]) for w in everyone)
    logits = model.predict(x[test_idx], verbose=0)
    acc = float(np.mean(np.argmax(logits, 1) == y[test_idx]))
    if hvd.rank() == 0:
        print(f"held-out accuracy {acc:.4f} on {len(test_idx)} digits after {state.epoch} "
              f"epochs; weights identical on all {hvd.size()} workers: {same}")
    sys.exit(0 if same and acc >= args.min_accuracy else 1)


if __name__ == "__main__":
    main()
