"""Runs last (file order): shutdown, use after shutdown, and init again."""

import numpy as np
import pytest
import torch

import horovod_cpp as hvd
import horovod_cpp.torch as thvd


def test_shutdown_then_reinit(rank, size):
    hvd.shutdown()
    assert not hvd.is_initialized()
    with pytest.raises(ValueError):
        hvd.rank()
    with pytest.raises(hvd.NotInitializedError):
        hvd.allreduce(np.ones(2))
    with pytest.raises(ValueError):
        thvd.allreduce(torch.ones(2))
    hvd.shutdown()  # idempotent
    hvd.init()
    assert hvd.is_initialized() and hvd.rank() == rank and hvd.size() == size
    np.testing.assert_array_equal(hvd.allreduce(np.full(2, rank), op=hvd.Sum), [sum(range(size))] * 2)
