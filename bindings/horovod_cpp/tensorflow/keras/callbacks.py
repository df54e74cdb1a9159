"""Keras 3 callbacks of horovod.keras: broadcast of the initial state, metric averaging and
learning-rate schedules (warm-up)."""

import keras
import numpy as np
import tensorflow as tf

from ..._basics import Average, global_process_set, rank, size
from ..functions import allreduce, broadcast_variables


def _optimizer_variables(optimizer):
    if optimizer is None:
        return []
    return list(optimizer.variables)


class BroadcastGlobalVariablesCallback(keras.callbacks.Callback):
    """Broadcasts the model's weights (at the start of training, when the model is built) and
    the optimizer's state (after the first batch, once it exists) from root_rank, so every rank
    trains from the same state. `local_variables` (a variable or a list) are left out: each
    rank keeps its own."""

    def __init__(self, root_rank, device="", local_variables=None,
                 process_set=global_process_set):
        super().__init__()
        self.root_rank = root_rank
        self.device = device
        self.process_set = process_set
        if local_variables is None:
            local_variables = []
        elif not isinstance(local_variables, (list, tuple)):
            local_variables = [local_variables]
        # Keyed by identity: Keras 3 variables have no .ref().
        self._local_ids = {id(v) for v in local_variables}
        self._local_variables = list(local_variables)
        self.broadcast_done = False

    def _broadcast(self, variables):
        broadcast_variables([v for v in variables if id(v) not in self._local_ids],
                            self.root_rank, process_set=self.process_set)

    def on_train_begin(self, logs=None):
        if self.model.built:
            self._broadcast(self.model.variables)

    def on_train_batch_end(self, batch, logs=None):
        if self.broadcast_done:
            return
        self._broadcast(self.model.variables)
        self._broadcast(_optimizer_variables(self.model.optimizer))
        self.broadcast_done = True


class MetricAverageCallback(keras.callbacks.Callback):
    """At the end of every epoch replaces each metric in `logs` by its average over the ranks
    (put it before callbacks that read the metrics)."""

    def __init__(self, device="", process_set=global_process_set):
        super().__init__()
        self.process_set = process_set

    def on_epoch_end(self, epoch, logs=None):
        if not logs:
            return
        for key in sorted(logs):
            value = logs[key]
            if isinstance(value, (int, float, np.floating, np.integer)) or (
                    hasattr(value, "shape") and tuple(value.shape) == ()):
                avg = allreduce(tf.constant(float(value), dtype=tf.float64), op=Average,
                                name=f"MetricAverageCallback.{key}",
                                process_set=self.process_set)
                logs[key] = float(avg.numpy())


def _set_lr(optimizer, lr):
    optimizer.learning_rate.assign(lr) if hasattr(optimizer.learning_rate, "assign") else \
        setattr(optimizer, "learning_rate", lr)


class LearningRateScheduleCallback(keras.callbacks.Callback):
    """Sets the learning rate to initial_lr * multiplier(epoch) for epochs in
    [start_epoch, end_epoch). staircase=True: once per epoch; otherwise every batch with a
    fractional epoch (needs steps_per_epoch, or fit's steps). multiplier: a function of the
    epoch or a constant. momentum_correction is accepted for compatibility (Keras 3 optimizers
    keep momentum as a constant hyper-parameter, so no correction is applied)."""

    def __init__(self, initial_lr, multiplier, start_epoch=0, end_epoch=None, staircase=True,
                 momentum_correction=True, steps_per_epoch=None):
        super().__init__()
        self.initial_lr = initial_lr
        self.start_epoch = start_epoch
        self.end_epoch = end_epoch
        self.staircase = staircase
        self.momentum_correction = momentum_correction
        self.steps_per_epoch = steps_per_epoch
        self.current_epoch = None
        self.multiplier = multiplier if callable(multiplier) else (lambda epoch: multiplier)

    def _active(self, epoch):
        return epoch >= self.start_epoch and (self.end_epoch is None or epoch < self.end_epoch)

    def _adjust(self, epoch):
        _set_lr(self.model.optimizer, self.initial_lr * self.multiplier(epoch))

    def on_train_begin(self, logs=None):
        if self.steps_per_epoch is None:
            self.steps_per_epoch = self.params.get("steps") if self.params else None
        if not self.staircase and not self.steps_per_epoch:
            raise ValueError("LearningRateScheduleCallback(staircase=False) needs "
                             "steps_per_epoch (fit could not tell it)")

    def on_epoch_begin(self, epoch, logs=None):
        self.current_epoch = epoch
        if self.staircase and self._active(epoch):
            self._adjust(epoch)

    def on_train_batch_begin(self, batch, logs=None):
        if (not self.staircase and self.current_epoch is not None
                and self._active(self.current_epoch)):
            self._adjust(self.current_epoch + float(batch) / self.steps_per_epoch)

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs["lr"] = float(np.asarray(self.model.optimizer.learning_rate))


class LearningRateWarmupCallback(LearningRateScheduleCallback):
    """Goes from initial_lr / size() to initial_lr over warmup_epochs epochs, per batch (the
    'gradual warm-up' for a learning rate scaled by the number of ranks)."""

    def __init__(self, initial_lr, warmup_epochs=5, momentum_correction=True,
                 steps_per_epoch=None, verbose=0):
        def multiplier(epoch):
            # One batch into the epoch counts, so the last warm-up batch reaches initial_lr.
            epoch += 1.0 / self.steps_per_epoch
            return 1.0 / size() * (epoch * (size() - 1) / warmup_epochs + 1)

        super().__init__(initial_lr, multiplier, start_epoch=0, end_epoch=warmup_epochs,
                         staircase=False, momentum_correction=momentum_correction,
                         steps_per_epoch=steps_per_epoch)
        self.verbose = verbose
        self.warmup_epochs = warmup_epochs

    def on_epoch_end(self, epoch, logs=None):
        super().on_epoch_end(epoch, logs)
        if epoch == self.warmup_epochs - 1 and self.verbose > 0 and rank() == 0:
            print(f"\nEpoch {epoch + 1}: finished gradual learning rate warmup to "
                  f"{float(np.asarray(self.model.optimizer.learning_rate)):g}.")
