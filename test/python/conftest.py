"""Every rank runs the same tests in the same order under mpirun; collectives pair up by
name or call order. horovod_cpp is initialised once per process."""

import faulthandler
import os

import numpy as np
import pytest

import horovod_cpp as hvd


@pytest.fixture(scope="session", autouse=True)
def horovod():
    hvd.init()
    yield hvd


@pytest.fixture(autouse=True)
def per_test_timeout():
    """A test that runs past HVD_TEST_TIMEOUT_S (default 180 s) dumps every thread's stack
    and ends this rank's process (exit code 1), so mpirun ends the run: a regression that
    hangs a collective fails instead of waiting for the whole run's timeout. The watchdog is a
    C thread, so it fires even while the main thread waits inside the library."""
    faulthandler.dump_traceback_later(float(os.environ.get("HVD_TEST_TIMEOUT_S", "180")),
                                      exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


@pytest.fixture
def rank():
    return hvd.rank()


@pytest.fixture
def size():
    return hvd.size()


def rank_data(r, shape, dtype, seed=0):
    """Values rank r contributes: reproducible on every rank, different per rank."""
    rng = np.random.default_rng(1000 * seed + r)
    if np.dtype(dtype) == np.bool_:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if np.issubdtype(np.dtype(dtype), np.integer):
        lo, hi = (0, 4) if np.dtype(dtype).kind == "u" else (-5, 6)
        return rng.integers(lo, hi, size=shape).astype(dtype)
    return rng.uniform(-2, 2, size=shape).astype(dtype)
