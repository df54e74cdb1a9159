"""Every rank runs the same tests in the same order under mpirun; collectives pair up by
name or call order. horovod_cpp is initialised once per process."""

import numpy as np
import pytest

import horovod_cpp as hvd


@pytest.fixture(scope="session", autouse=True)
def horovod():
    hvd.init()
    yield hvd


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
        lo, hi = (0, 4) if np.dtype(dtype) == np.uint8 else (-5, 6)
        return rng.integers(lo, hi, size=shape).astype(dtype)
    return rng.uniform(-2, 2, size=shape).astype(dtype)
