"""horovod_cpp.keras on Keras 3: DistributedOptimizer with model.fit equals one process on the
whole batch, the callbacks' effects, load_model, backward_passes_per_step, and the XLA
refusal."""

import os
import tempfile

import keras
import numpy as np
import pytest
import tensorflow as tf

import horovod_cpp.keras as hvdk
import horovod_cpp.tensorflow as hvd
from conftest import rank_data

PER_RANK = 8


def _model(seed):
    keras.utils.set_random_seed(seed)
    m = keras.Sequential([keras.Input((5,)), keras.layers.Dense(4, activation="tanh"),
                          keras.layers.Dense(1)])
    return m


def _data(rows, seed=40):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, 5)).astype(np.float32)
    y = (x @ rng.normal(size=(5, 1)) + 0.1).astype(np.float32)
    return x, y


def _weights_equal_everywhere(model):
    flat = np.concatenate([w.ravel() for w in model.get_weights()]).astype(np.float64)
    everyone = hvd.allgather_object(flat)
    for other in everyone:
        np.testing.assert_array_equal(other, flat)


@pytest.mark.parametrize("bpps", [1, 2])
def test_fit_on_shards_equals_one_process_on_whole_batch(bpps):
    n, r = hvd.size(), hvd.rank()
    steps = 4
    x, y = _data(PER_RANK * n * steps)
    # Rank r's shard of every global batch: rows [b*n*P + r*P, ... + P).
    idx = np.concatenate([np.arange(b * n * PER_RANK + r * PER_RANK,
                                    b * n * PER_RANK + (r + 1) * PER_RANK) for b in range(steps)])
    model = _model(7)
    opt = hvdk.DistributedOptimizer(keras.optimizers.SGD(0.1), backward_passes_per_step=bpps,
                                    average_aggregated_gradients=True)
    model.compile(optimizer=opt, loss="mse")
    model.fit(x[idx], y[idx], batch_size=PER_RANK, epochs=2, shuffle=False, verbose=0)

    ref = _model(7)
    ref_opt = (keras.optimizers.SGD(0.1) if bpps == 1 else
               keras.optimizers.SGD(0.1, gradient_accumulation_steps=bpps))
    ref.compile(optimizer=ref_opt, loss="mse")
    ref.fit(x, y, batch_size=PER_RANK * n, epochs=2, shuffle=False, verbose=0)
    for got, want in zip(model.get_weights(), ref.get_weights()):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    _weights_equal_everywhere(model)


def test_broadcast_callback_makes_weights_equal():
    r = hvd.rank()
    model = _model(100 + r)  # different initial weights on every rank
    root_initial = hvd.broadcast_object(model.get_weights(), root_rank=0)
    model.compile(optimizer=hvdk.DistributedOptimizer(keras.optimizers.SGD(0.0)), loss="mse")
    x, y = _data(16, seed=41 + r)
    model.fit(x, y, batch_size=8, epochs=1, verbose=0,
              callbacks=[hvdk.callbacks.BroadcastGlobalVariablesCallback(0)])
    for got, want in zip(model.get_weights(), root_initial):
        np.testing.assert_array_equal(got, want)


class _Record(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.epoch_logs, self.lrs = [], []

    def on_train_batch_begin(self, batch, logs=None):
        self.lrs.append(float(np.asarray(self.model.optimizer.learning_rate)))

    def on_epoch_end(self, epoch, logs=None):
        self.epoch_logs.append(dict(logs))


def test_metric_average_callback():
    r, n = hvd.rank(), hvd.size()
    model = _model(5)
    model.compile(optimizer=hvdk.DistributedOptimizer(keras.optimizers.SGD(0.0)), loss="mse",
                  metrics=["mae"])
    x, y = _data(16, seed=50 + r)  # a different loss on every rank
    before, after = _Record(), _Record()
    model.fit(x, y, batch_size=8, epochs=2, verbose=0,
              callbacks=[before, hvdk.callbacks.MetricAverageCallback(), after])
    for epoch in range(2):
        for key in ("loss", "mae"):
            raw = hvd.allgather_object(float(before.epoch_logs[epoch][key]))
            assert raw[0] != raw[1]
            assert after.epoch_logs[epoch][key] == pytest.approx(np.mean(raw), rel=1e-6)


def test_learning_rate_warmup_callback():
    n = hvd.size()
    model = _model(6)
    base = 0.1 * n
    model.compile(optimizer=hvdk.DistributedOptimizer(keras.optimizers.SGD(base)), loss="mse")
    rec = _Record()
    x, y = _data(4 * 8)
    warm = hvdk.callbacks.LearningRateWarmupCallback(base, warmup_epochs=2)
    model.fit(x, y, batch_size=8, epochs=3, verbose=0, callbacks=[warm, rec], shuffle=False)
    spe = 4
    want = []
    for epoch in range(3):
        for b in range(spe):
            if epoch < 2:
                e = epoch + b / spe + 1.0 / spe
                want.append(base / n * (e * (n - 1) / 2 + 1))
            else:
                want.append(want[-1])
    np.testing.assert_allclose(rec.lrs, want, rtol=1e-6)
    assert rec.lrs[2 * spe - 1] == pytest.approx(base, rel=1e-6)


def test_learning_rate_schedule_callback_staircase():
    model = _model(8)
    model.compile(optimizer=hvdk.DistributedOptimizer(keras.optimizers.SGD(1.0)), loss="mse")
    rec = _Record()
    x, y = _data(16)
    sched = hvdk.callbacks.LearningRateScheduleCallback(0.5, lambda e: 0.1 ** e, start_epoch=1,
                                                        end_epoch=3)
    model.fit(x, y, batch_size=8, epochs=4, verbose=0, callbacks=[sched, rec])
    np.testing.assert_allclose(rec.lrs, [1.0, 1.0, 0.05, 0.05, 0.005, 0.005, 0.005, 0.005],
                               rtol=1e-6)


def test_load_model_rewraps_optimizer():
    r = hvd.rank()
    path = os.path.join(tempfile.gettempdir(), f"hvd_tf_model_{os.getppid()}.keras")
    model = _model(9)
    model.compile(optimizer=hvdk.DistributedOptimizer(keras.optimizers.Adam(0.01)), loss="mse")
    x, y = _data(16, seed=60)
    model.fit(x, y, batch_size=8, epochs=1, verbose=0)
    if r == 0:
        model.save(path)
    hvd.barrier()
    loaded = hvdk.load_model(path)
    hvd.barrier()
    assert loaded.optimizer._hvd_wrapped
    assert isinstance(loaded.optimizer, keras.optimizers.Adam)
    assert int(loaded.optimizer.iterations.numpy()) == 2
    xr, yr = _data(16, seed=70 + r)
    loaded.fit(xr, yr, batch_size=8, epochs=1, verbose=0)
    _weights_equal_everywhere(loaded)
    if r == 0:
        os.remove(path)


def test_xla_compiled_step_fails_with_what_to_set():
    model = _model(10)
    model.compile(optimizer=hvdk.DistributedOptimizer(keras.optimizers.SGD(0.1)), loss="mse",
                  jit_compile=True)
    x, y = _data(8)
    with pytest.raises(ValueError, match="jit_compile=False"):
        model.fit(x, y, batch_size=8, epochs=1, verbose=0)
    hvd.barrier()


def test_importable_as_tensorflow_keras():
    import horovod_cpp.tensorflow.keras as tk
    assert tk.DistributedOptimizer is hvdk.DistributedOptimizer
    assert hvd.DistributedOptimizer(keras.optimizers.SGD(0.1))._hvd_wrapped
