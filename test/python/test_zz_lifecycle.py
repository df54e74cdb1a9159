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


def test_init_with_process_sets(rank, size):
    stale = hvd.add_process_set([0])
    hvd.shutdown()
    assert stale.process_set_id is None  # invalidated by shutdown()
    even = hvd.ProcessSet(range(0, size, 2))
    odd = hvd.ProcessSet(range(1, size, 2))
    sets = [even, odd] if size > 1 else [even]
    thvd.init(process_sets=sets)
    assert [ps.process_set_id for ps in sets] == list(range(1, len(sets) + 1))
    mine = even if rank % 2 == 0 else odd
    assert mine.included() and mine.rank() == mine.ranks.index(rank)
    got = thvd.allreduce(torch.full((2,), float(rank)), op=thvd.Sum, process_set=mine)
    assert got.tolist() == [float(sum(mine.ranks))] * 2
    if size > 1:
        other = odd if mine is even else even
        assert other.included() is False
        with pytest.raises(ValueError):
            thvd.allreduce(torch.ones(1), process_set=other)
    for ps in sets:  # collective: same order on every rank
        assert thvd.remove_process_set(ps) is True
    thvd.barrier()
