"""TensorFlow tests: every rank runs the same tests in the same order under mpirun (see
test/python/run_mpi_pytests.sh; run from the TensorFlow virtual environment)."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402

import horovod_cpp.tensorflow as hvd  # noqa: E402


@pytest.fixture(scope="session", autouse=True)
def horovod():
    hvd.init()
    yield hvd


def rank_data(r, shape, dtype, seed=0):
    """The numpy values rank r contributes: the same on every rank, different per rank."""
    rng = np.random.default_rng(1000 * seed + r)
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if np.issubdtype(dtype, np.integer):
        lo, hi = (0, 4) if dtype == np.uint8 else (-5, 6)
        return rng.integers(lo, hi, size=shape).astype(dtype)
    return rng.uniform(-2, 2, size=shape).astype(dtype)


def run_mode(mode, fn, *args):
    """fn(*args) eagerly or inside a tf.function."""
    if mode == "eager":
        return fn(*args)
    return tf.function(fn)(*args)
