"""The elastic API of horovod_cpp.tensorflow / horovod_cpp.keras under mpirun (MPI
controller, 2-3 ranks): save / restore / sync of TensorFlowKerasState and TensorFlowState, the
Keras callbacks' counters and commits, and model.fit inside the run loop with a failure
injected by a callback (restore, one reset, the job finishes with equal weights)."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import horovod_cpp.keras as hvdk
import horovod_cpp.tensorflow as hvd
from horovod_cpp import elastic as common

PER_RANK = 4


def _model(seed, optimizer=None):
    keras.utils.set_random_seed(seed)
    m = keras.Sequential([keras.Input((5,)), keras.layers.Dense(3, activation="tanh"),
                          keras.layers.Dense(1)])
    m.compile(optimizer=optimizer or keras.optimizers.SGD(0.05, momentum=0.9), loss="mse")
    return m


def _data(seed, rows):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, 5)).astype(np.float32)
    return x, (x.sum(axis=1, keepdims=True) * 0.3).astype(np.float32)


def _values(state):
    return [v.numpy().copy() for v in state._variables()]


def _assert_values(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_keras_state_sync_save_restore():
    r = hvd.rank()
    model = _model(seed=10 + r)
    model.fit(*_data(r, 8), batch_size=PER_RANK, epochs=1, verbose=0)  # rank-specific slots
    state = hvdk.elastic.KerasState(model, epoch=r, batch=3 * r)
    assert state.optimizer is model.optimizer and len(model.optimizer.variables) > 1
    state.sync()

    ref = _model(seed=10)
    ref.fit(*_data(0, 8), batch_size=PER_RANK, epochs=1, verbose=0)
    ref_values = [v.numpy() for v in ref.variables] + [v.numpy() for v in ref.optimizer.variables]
    _assert_values(_values(state), ref_values)
    assert (state.epoch, state.batch) == (0, 0)

    model.fit(*_data(50, 8), batch_size=PER_RANK, epochs=1, verbose=0)
    state.epoch = 1
    state.save()
    saved = _values(state)
    model.fit(*_data(51 + r, 8), batch_size=PER_RANK, epochs=1, verbose=0)
    state.epoch = 2
    state.restore()
    _assert_values(_values(state), saved)
    assert state.epoch == 1


def test_keras_state_builds_a_fresh_optimizer_so_every_commit_holds_its_variables():
    model = _model(seed=3)
    assert not model.optimizer.built
    state = hvd.elastic.TensorFlowKerasState(model)
    assert model.optimizer.built
    saved = _values(state)
    model.fit(*_data(hvd.rank(), 8), batch_size=PER_RANK, epochs=1, verbose=0)
    state.restore()
    _assert_values(_values(state), saved)


def test_tensorflow_state_variables():
    r = hvd.rank()
    a = tf.Variable(np.arange(6, dtype=np.float32).reshape(2, 3) + r)
    b = tf.Variable(np.int64(10 * r))
    state = hvd.elastic.TensorFlowState([a, b], step=r)
    state.sync()
    np.testing.assert_array_equal(a.numpy(), np.arange(6, dtype=np.float32).reshape(2, 3))
    assert b.numpy() == 0 and state.step == 0
    a.assign_add(tf.ones((2, 3)))
    state.commit()
    a.assign(tf.zeros((2, 3)))
    b.assign(7)
    state.restore()
    np.testing.assert_array_equal(a.numpy(), np.arange(6, dtype=np.float32).reshape(2, 3) + 1)
    assert b.numpy() == 0
    with pytest.raises(ValueError, match="sessions"):
        hvd.elastic.TensorFlowState([a], session=object())


class LoggingState(hvdk.elastic.KerasState):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.commits = []

    def commit(self):
        self.commits.append((self.epoch, self.batch))
        super().commit()


def _callbacks(state, per_commit):
    return [hvdk.elastic.UpdateEpochStateCallback(state),
            hvdk.elastic.UpdateBatchStateCallback(state),
            hvdk.elastic.CommitStateCallback(state, batches_per_commit=per_commit)]


class StopAtEpochEnd(keras.callbacks.Callback):
    """Stops fit at the end of its first epoch, as EarlyStopping does."""

    def on_epoch_end(self, epoch, logs=None):
        self.model.stop_training = True


@pytest.mark.parametrize("resume", ["epochs_left", "initial_epoch"])
def test_callbacks_count_and_commit(resume):
    model = _model(seed=1)
    state = LoggingState(model, epoch=0, batch=0)
    x, y = _data(hvd.rank(), 5 * PER_RANK)
    model.fit(x, y, batch_size=PER_RANK, epochs=2, verbose=0, shuffle=False,
              callbacks=_callbacks(state, per_commit=2))
    assert state.commits == [(0, 2), (0, 4), (1, 0), (1, 2), (1, 4), (2, 0)]
    assert (state.epoch, state.batch) == (2, 0)
    assert int(model.optimizer.iterations.numpy()) == 10
    # Resumed after batch 3 of epoch 2 (of 4): the counters go on from there, and epoch 2
    # ends after its 2 batches left (Keras 3 ignores a shortened params['steps']).
    state.commits.clear()
    state.batch = 3
    kwargs = ({"epochs": 4 - state.epoch} if resume == "epochs_left"
              else {"initial_epoch": state.epoch, "epochs": 4})
    model.fit(x, y, batch_size=PER_RANK, verbose=0, shuffle=False,
              callbacks=_callbacks(state, per_commit=5), **kwargs)
    assert state.commits == [(3, 0), (3, 5), (4, 0)]
    assert int(model.optimizer.iterations.numpy()) == 10 + 2 + 5
    # A stop asked for by another callback in that epoch still ends fit.
    state.epoch, state.batch = 1, 4
    model.fit(x, y, batch_size=PER_RANK, verbose=0, shuffle=False, epochs=3,
              callbacks=_callbacks(state, per_commit=5) + [StopAtEpochEnd()])
    assert (state.epoch, state.batch) == (2, 0)
    assert int(model.optimizer.iterations.numpy()) == 10 + 2 + 5 + 1
    with pytest.raises(ValueError):
        hvdk.elastic.CommitStateCallback(state, batches_per_commit=0)


def _lost_peer_error(kind):
    """What a lost peer raises: HorovodInternalError from horovod_cpp's Python calls, or
    TensorFlow's UnavailableError from its ops (inside model.fit)."""
    if kind == "python":
        return hvd.HorovodInternalError("injected: a peer was lost")
    cls = tf.errors.UnavailableError if kind == "eager_op" else tf.errors.InternalError
    return cls(None, None, "horovod_cpp stopped: coordination failed: injected: a peer was lost")


class FailOnce(keras.callbacks.Callback):
    """Raises `error` once, at the end of batch `at` (after the callbacks before it in the
    list ran), the way a collective raises it when a peer is lost."""

    def __init__(self, at, error):
        super().__init__()
        self.at, self.error, self.fired = at, error, False

    def on_train_batch_end(self, batch, logs=None):
        if not self.fired and batch == self.at:
            self.fired = True
            raise self.error


@pytest.mark.parametrize("kind", ["python", "eager_op", "graph_op"])
def test_fit_inside_the_run_loop_recovers_from_an_injected_failure(kind):
    r, n = hvd.rank(), hvd.size()
    model = _model(seed=20 + r, optimizer=hvdk.DistributedOptimizer(keras.optimizers.SGD(0.05)))
    state = LoggingState(model, epoch=0, batch=0)
    resets = []
    state.register_reset_callbacks(lambda: resets.append(hvd.size()))
    x, y = _data(100 + r, 6 * PER_RANK)  # 6 batches an epoch
    fail = FailOnce(at=3, error=_lost_peer_error(kind))
    committed = {}

    def train(state):
        committed.setdefault("first", _values(state))
        state.model.fit(x, y, batch_size=PER_RANK, epochs=3 - state.epoch, verbose=0,
                        shuffle=False, callbacks=_callbacks(state, per_commit=2) + [fail])
        return state.epoch

    assert hvdk.elastic.run(train)(state) == 3
    assert fail.fired and resets == [n]
    # The failure came after the commit of batch 4 (the 4th batch): restored there, fit again
    # for 3 epochs; the resumed epoch ends after its 2 batches left.
    assert state.commits == [(0, 2), (0, 4), (0, 6), (1, 0), (1, 2), (1, 4),
                             (1, 6), (2, 0), (2, 2), (2, 4), (2, 6), (3, 0)]
    assert int(model.optimizer.iterations.numpy()) == 3 * 6
    # The first sync gave every rank rank 0's initial weights; training kept them equal.
    flat = np.concatenate([w.ravel() for w in model.get_weights()])
    for other in hvd.allgather_object(flat):
        np.testing.assert_array_equal(other, flat)
    first = np.concatenate([v.ravel() for v in committed["first"][:len(model.variables)]])
    for other in hvd.allgather_object(first):
        np.testing.assert_array_equal(other, first)


@pytest.mark.parametrize("error", [
    tf.errors.UnavailableError(None, None, "injected: not from our library's ops"),
    tf.errors.InternalError(None, None, "injected: not from our library's ops"),
    tf.errors.FailedPreconditionError(None, None, "horovod_cpp: injected mismatch"),
], ids=["unavailable_elsewhere", "internal_elsewhere", "mismatch"])
def test_run_lets_other_tensorflow_errors_out(error):
    resets = []
    state = hvd.elastic.TensorFlowState([], step=0)
    state.register_reset_callbacks(lambda: resets.append(1))

    @hvd.elastic.run
    def train(state):
        raise error

    with pytest.raises(type(error), match="injected"):
        train(state)
    assert resets == []


def test_frontends_share_the_exception_and_loop():
    import horovod_cpp.tensorflow.keras as tk
    assert hvd.HostsUpdatedInterrupt is common.HostsUpdatedInterrupt
    assert hvd.elastic.HostsUpdatedInterrupt is hvdk.elastic.HostsUpdatedInterrupt
    assert tk.elastic.KerasState is hvdk.elastic.KerasState
    assert hvdk.elastic.run is hvd.elastic.run and hvd.elastic.run_fn is common.run_fn
