"""A Keras worker of the elastic test test_tf_elastic_driver.py: model.fit inside
horovod_cpp.keras.elastic.run with a KerasState and the elastic callbacks, on a membership the
harness changes. With --die-at E,B it SIGKILLs itself as batch B of epoch E begins.
Lines it prints (flushed):
    TRAIN worker=W epoch=E batch=B rank=R size=N    each time the run loop calls train()
    COMMIT worker=W epoch=E batch=B rank=R size=N   at each commit
    DONE worker=W epoch=E rank=R size=N steps=S params=<hex of the float32 weights>
        (S: the optimizer's step count, restored with the state at a reset: the batches
        trained in the committed history)
"""

import argparse
import os
import signal

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402

import horovod_cpp.keras as hvd  # noqa: E402

EPOCHS = 3
BATCHES = 6
PER_RANK = 4


class Die(keras.callbacks.Callback):
    def __init__(self, state, epoch, batch):
        super().__init__()
        self.state, self.epoch, self.batch = state, epoch, batch

    def on_train_batch_begin(self, batch, logs=None):
        if (self.state.epoch, self.state.batch) == (self.epoch, self.batch):
            os.kill(os.getpid(), signal.SIGKILL)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--worker", required=True)
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--die-at", default=None, help="E,B")
    a = p.parse_args()
    hvd.init()
    keras.utils.set_random_seed(a.seed)
    model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(3, activation="tanh"),
                              keras.layers.Dense(1)])
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.05, momentum=0.9)),
                  loss="mse")

    class State(hvd.elastic.KerasState):
        def commit(self):
            super().commit()
            say("COMMIT")

    state = State(model, epoch=0, batch=0)

    def say(what, extra=""):
        print(f"{what} worker={a.worker} epoch={state.epoch} batch={state.batch} "
              f"rank={hvd.rank()} size={hvd.size()}{extra}", flush=True)

    callbacks = [hvd.elastic.UpdateEpochStateCallback(state),
                 hvd.elastic.UpdateBatchStateCallback(state),
                 hvd.elastic.CommitStateCallback(state, batches_per_commit=2)]
    if a.die_at:
        callbacks.append(Die(state, *(int(v) for v in a.die_at.split(","))))

    @hvd.elastic.run
    def train(state):
        say("TRAIN")
        rng = np.random.default_rng(100 + hvd.rank())
        x = rng.normal(size=(BATCHES * PER_RANK, 5)).astype(np.float32)
        y = x.sum(axis=1, keepdims=True) * 0.3
        state.model.fit(x, y, batch_size=PER_RANK, epochs=EPOCHS - state.epoch, shuffle=False,
                        verbose=0, callbacks=callbacks)

    train(state)
    flat = np.concatenate([w.ravel() for w in model.get_weights()]).astype(np.float32)
    steps = int(model.optimizer.iterations.numpy())
    print(f"DONE worker={a.worker} epoch={state.epoch} rank={hvd.rank()} size={hvd.size()} "
          f"steps={steps} params={flat.tobytes().hex()}", flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
