"""horovod_cpp.keras.elastic (also horovod_cpp.tensorflow.keras.elastic): Horovod's elastic
API for Keras 3: KerasState and the callbacks that keep it current during model.fit()."""

import keras

from ..elastic import (HorovodInternalError, HostsUpdatedInterrupt, ObjectState, State,
                       TensorFlowKerasState, run, run_fn)  # run: TensorFlow's errors mapped


class KerasState(TensorFlowKerasState):
    """The elastic state of a Keras model: its weights, its optimizer's variables and plain
    attributes (epoch=0, batch=0 are what the Update*StateCallbacks keep current)."""

    def __init__(self, model, optimizer=None, **kwargs):
        super().__init__(model, optimizer=optimizer, **kwargs)


class CommitStateCallback(keras.callbacks.Callback):
    """Commits `state` every `batches_per_commit` batches and at the end of every epoch. Put it
    after UpdateBatchStateCallback / UpdateEpochStateCallback in the callback list, so that a
    commit holds the counters of the step it follows."""

    def __init__(self, state, batches_per_commit=1):
        super().__init__()
        if int(batches_per_commit) < 1:
            raise ValueError(f"CommitStateCallback: batches_per_commit must be >= 1, got "
                             f"{batches_per_commit}")
        self.state = state
        self.batches_per_commit = int(batches_per_commit)
        self.batches_remaining = self.batches_per_commit

    def on_train_begin(self, logs=None):
        self.batches_remaining = self.batches_per_commit

    def on_train_batch_end(self, batch, logs=None):
        self.batches_remaining -= 1
        if self.batches_remaining == 0:
            self.state.commit()
            self.batches_remaining = self.batches_per_commit

    def on_epoch_end(self, epoch, logs=None):
        self.state.commit()
        self.batches_remaining = self.batches_per_commit


class UpdateBatchStateCallback(keras.callbacks.Callback):
    """Keeps state.batch = the number of batches finished in the current epoch (0 at the end
    of an epoch). After a reset in the middle of an epoch it counts on from the restored value
    and ends that epoch once it has its full length (fit's steps per epoch): the batches
    committed before the reset are not trained again. Keras 3 no longer reads a shortened
    params['steps'] (how Horovod did it), so the epoch is ended by model.stop_training after
    its last batch, which this callback clears again at the epoch's end so that fit goes on
    with the next epoch: put it before callbacks that stop training (EarlyStopping) in the
    list. The resumed epoch takes its batches from the start of the epoch's data, as
    Horovod's did; a program that must not see them again skips them (ElasticSampler in
    PyTorch, or data built from state.batch). With data of unknown length (no steps) the
    resumed epoch runs in full."""

    def __init__(self, state):
        super().__init__()
        self.state = state
        self._base = 0
        self._cut = False  # this callback ended the epoch early (stop_training is its own)

    def on_epoch_begin(self, epoch, logs=None):
        self._base = self.state.batch
        self._cut = False

    def on_train_batch_end(self, batch, logs=None):
        self.state.batch = self._base + batch + 1
        steps = (self.params or {}).get("steps")
        if self._base and steps and self.state.batch >= steps and not self.model.stop_training:
            self.model.stop_training = self._cut = True

    def on_epoch_end(self, epoch, logs=None):
        self.state.batch = 0
        if self._cut:
            self.model.stop_training = self._cut = False


class UpdateEpochStateCallback(keras.callbacks.Callback):
    """Keeps state.epoch = the number of epochs finished. The first epoch Keras runs in a
    fit() is taken to be epoch state.epoch, so both `fit(epochs=n - state.epoch)` (Horovod's
    examples) and `fit(initial_epoch=state.epoch, epochs=n)` count right after a reset."""

    def __init__(self, state):
        super().__init__()
        self.state = state
        self._offset = None

    def on_train_begin(self, logs=None):
        self._offset = None

    def on_epoch_begin(self, epoch, logs=None):
        if self._offset is None:
            self._offset = self.state.epoch - epoch

    def on_epoch_end(self, epoch, logs=None):
        self.state.epoch = self._offset + epoch + 1


__all__ = ["CommitStateCallback", "HorovodInternalError", "HostsUpdatedInterrupt",
           "KerasState", "ObjectState", "State", "TensorFlowKerasState",
           "UpdateBatchStateCallback", "UpdateEpochStateCallback", "run", "run_fn"]
