"""numpy API: alltoall, reducescatter, grouped allgather/reducescatter, join, process sets,
barrier on a set, timeline. Every rank computes the expected values itself from rank_data()."""

import json
import os
import tempfile

import numpy as np
import pytest

import horovod_cpp as hvd
from conftest import rank_data


def slices(n_rows, size):
    """Rows of dim 0 that each rank of `size` receives from reducescatter: the first
    n_rows % size ranks get one row more."""
    q, r = divmod(n_rows, size)
    out, start = [], 0
    for k in range(size):
        end = start + q + (1 if k < r else 0)
        out.append((start, end))
        start = end
    return out


def uneven_splits(sender, size):
    """Rows `sender` sends to each rank: some zero (rank sender+1 gets none), different per
    sender."""
    return [0 if dst == (sender + 1) % size else (sender + dst) % 3 + 1 for dst in range(size)]


# ---- alltoall ----------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.uint8, np.int32, np.int64, np.float16, np.float32,
                                   np.float64, np.bool_])
def test_alltoall_even(rank, size, dtype):
    data = {r: rank_data(r, (2 * size, 3), dtype, seed=11) for r in range(size)}
    out = hvd.alltoall(data[rank], name=f"np.a2a.even.{np.dtype(dtype).name}")
    assert out.dtype == np.dtype(dtype) and out.shape == (2 * size, 3)
    want = np.concatenate([data[src][2 * rank:2 * rank + 2] for src in range(size)])
    np.testing.assert_array_equal(out, want)


def test_alltoall_uneven_splits_with_zero_sends(rank, size):
    splits = {r: uneven_splits(r, size) for r in range(size)}
    # one extra row beyond sum(splits) that is never sent
    data = {r: rank_data(r, (sum(splits[r]) + 1, 2), np.float64, seed=12) for r in range(size)}
    out, received = hvd.alltoall(data[rank], splits=splits[rank], name="np.a2a.uneven")
    want_parts, want_recv = [], []
    for src in range(size):
        start = sum(splits[src][:rank])
        n = splits[src][rank]
        want_parts.append(data[src][start:start + n])
        want_recv.append(n)
    assert received.tolist() == want_recv and received.dtype == np.int32
    np.testing.assert_array_equal(out, np.concatenate(want_parts))
    # async form: (output, received_splits)
    h = hvd.alltoall_async(data[rank], splits=np.array(splits[rank], dtype=np.int64))
    out2, received2 = hvd.synchronize(h)
    np.testing.assert_array_equal(out2, out)
    assert received2.tolist() == want_recv


def test_alltoall_all_zero_to_me(rank, size):
    # nobody sends anything to rank 0
    splits = [0] + [1] * (size - 1)
    x = np.full((size - 1, 2), float(rank))
    out, received = hvd.alltoall(x, splits=splits, name="np.a2a.zero")
    if rank == 0:
        assert out.shape == (0, 2) and received.tolist() == [0] * size
    else:
        np.testing.assert_array_equal(out, np.repeat(np.arange(size, dtype=float), 2).reshape(size, 2))
        assert received.tolist() == [1] * size


def test_alltoall_errors(rank, size):
    with pytest.raises(ValueError):
        hvd.alltoall(np.zeros((2 * size, 1)), splits=[1] * (size + 1), name="np.a2a.e1")
    with pytest.raises(ValueError):
        hvd.alltoall(np.zeros((size, 1)), splits=[size + 1] + [0] * (size - 1), name="np.a2a.e2")
    if size > 1:
        with pytest.raises(ValueError):
            hvd.alltoall(np.zeros((size + 1, 1)), name="np.a2a.e3")  # not divisible


# ---- reducescatter -----------------------------------------------------------------------
@pytest.mark.parametrize("rows", [1, 4, 7])
@pytest.mark.parametrize("dtype", [np.int32, np.float32, np.float64])
def test_reducescatter_sum_average(rank, size, rows, dtype):
    data = [rank_data(r, (rows, 3), dtype, seed=13) for r in range(size)]
    total = sum(d.astype(np.float64) for d in data)
    lo, hi = slices(rows, size)[rank]
    s = hvd.reducescatter(data[rank], op=hvd.Sum, name=f"np.rs.sum.{rows}.{np.dtype(dtype).name}")
    assert s.shape == (hi - lo, 3) and s.dtype == np.dtype(dtype)
    np.testing.assert_allclose(s, total[lo:hi], rtol=1e-5, atol=1e-5)
    a = hvd.reducescatter(data[rank], name=f"np.rs.avg.{rows}.{np.dtype(dtype).name}")
    want = total[lo:hi] / size
    if np.issubdtype(np.dtype(dtype), np.integer):
        want = np.trunc(want)
    np.testing.assert_allclose(a, want, rtol=1e-5, atol=1e-5)


def test_reducescatter_scale_factors(rank, size):
    data = [rank_data(r, (2 * size + 1,), np.float64, seed=14) for r in range(size)]
    lo, hi = slices(2 * size + 1, size)[rank]
    out = hvd.reducescatter(data[rank], op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.25)
    np.testing.assert_allclose(out, 0.5 * sum(data)[lo:hi])


def test_grouped_reducescatter(rank, size):
    a = [rank_data(r, (size + 2, 2), np.float32, seed=15) for r in range(size)]
    b = [rank_data(r, (3,), np.float64, seed=16) for r in range(size)]
    out = hvd.grouped_reducescatter([a[rank], b[rank]], op=hvd.Sum, name="np.grs")
    la, ha = slices(size + 2, size)[rank]
    lb, hb = slices(3, size)[rank]
    np.testing.assert_allclose(out[0], sum(x.astype(np.float64) for x in a)[la:ha], rtol=1e-5)
    np.testing.assert_allclose(out[1], sum(b)[lb:hb])


# ---- grouped allgather -------------------------------------------------------------------
def test_grouped_allgather(rank, size):
    a = [rank_data(r, (r + 1, 2), np.int64, seed=17) for r in range(size)]
    b = [rank_data(r, (1,), np.float32, seed=18) for r in range(size)]
    out = hvd.grouped_allgather([a[rank], b[rank]], name="np.gag")
    np.testing.assert_array_equal(out[0], np.concatenate(a))
    np.testing.assert_array_equal(out[1], np.concatenate(b))
    out2 = hvd.synchronize(hvd.grouped_allgather_async([b[rank]]))
    np.testing.assert_array_equal(out2[0], np.concatenate(b))


# ---- join --------------------------------------------------------------------------------
def test_join_uneven_steps(rank, size):
    steps = rank + 2  # the last rank runs the most steps, so it joins last
    for step in range(steps):
        x = rank_data(rank, (5,), np.float64, seed=100 + step)
        contributing = [r for r in range(size) if step < r + 2]
        total = sum(rank_data(r, (5,), np.float64, seed=100 + step) for r in contributing)
        np.testing.assert_allclose(hvd.allreduce(x, op=hvd.Sum, name="np.join.sum"), total)
        # Average divides by the full size: joined ranks count as zeros
        np.testing.assert_allclose(hvd.allreduce(x, name="np.join.avg"), total / size)
    assert hvd.join() == size - 1
    np.testing.assert_array_equal(hvd.allreduce(np.ones(2), op=hvd.Sum), [size, size])


def test_allgather_while_a_rank_joined_fails(rank, size):
    if rank == 0:
        assert hvd.join() == size - 1
    else:
        with pytest.raises(hvd.HorovodInternalError, match="joined"):
            hvd.allgather(np.ones((1, 2)), name="np.join.gather")
        # an allreduce still works, with rank 0's zeros
        np.testing.assert_array_equal(hvd.allreduce(np.ones(2), op=hvd.Sum, name="np.join.ar"),
                                      [size - 1] * 2)
        if rank == size - 1:
            import time
            time.sleep(0.05)
        assert hvd.join() == size - 1
    np.testing.assert_array_equal(hvd.allgather(np.full((1,), rank)), np.arange(size))


# ---- process sets ------------------------------------------------------------------------
@pytest.fixture
def even_odd(size):
    even = hvd.add_process_set([r for r in range(size) if r % 2 == 0])
    odd = hvd.add_process_set(hvd.ProcessSet([r for r in range(size) if r % 2 == 1])) \
        if size > 1 else None
    yield even, odd
    assert hvd.remove_process_set(even)
    if odd is not None:
        assert hvd.remove_process_set(odd)
    assert even.process_set_id is None


def test_process_set_queries(rank, size, even_odd):
    even, odd = even_odd
    mine, other = (even, odd) if rank % 2 == 0 else (odd, even)
    ranks = [r for r in range(size) if r % 2 == rank % 2]
    assert mine.ranks == ranks and mine.size() == len(ranks)
    assert mine.rank() == ranks.index(rank) and mine.included()
    if other is not None:
        assert other.included() is False and other.rank() == -1
    g = hvd.global_process_set
    assert g.ranks == list(range(size)) and g.size() == size and g.rank() == rank


def test_process_set_collectives(rank, size, even_odd):
    even, odd = even_odd
    mine, other = (even, odd) if rank % 2 == 0 else (odd, even)
    members = mine.ranks
    data = {r: rank_data(r, (4, 2), np.float64, seed=19) for r in members}
    np.testing.assert_allclose(hvd.allreduce(data[rank], op=hvd.Sum, process_set=mine,
                                             name="np.ps.sum"), sum(data.values()))
    np.testing.assert_allclose(hvd.allreduce(data[rank], process_set=mine, name="np.ps.avg"),
                               sum(data.values()) / len(members))
    out = hvd.grouped_allreduce([data[rank], data[rank] * 2], op=hvd.Sum, process_set=mine)
    np.testing.assert_allclose(out[1], 2 * sum(data.values()))
    np.testing.assert_array_equal(hvd.allgather(data[rank], process_set=mine),
                                  np.concatenate([data[r] for r in members]))
    root = members[-1]  # a global rank
    np.testing.assert_array_equal(hvd.broadcast(data[rank], root, process_set=mine), data[root])
    k = len(members)
    a2a_in = {r: rank_data(r, (2 * k, 1), np.int32, seed=20) for r in members}
    me = members.index(rank)
    np.testing.assert_array_equal(
        hvd.alltoall(a2a_in[rank], process_set=mine),
        np.concatenate([a2a_in[r][2 * me:2 * me + 2] for r in members]))
    lo, hi = slices(5, k)[me]
    rs_in = {r: rank_data(r, (5,), np.float64, seed=21) for r in members}
    np.testing.assert_allclose(hvd.reducescatter(rs_in[rank], op=hvd.Sum, process_set=mine),
                               sum(rs_in.values())[lo:hi])
    hvd.barrier(process_set=mine)
    assert hvd.broadcast_object({"from": root}, root_rank=root, process_set=mine) == {"from": root}
    assert hvd.allgather_object(rank, process_set=mine) == members
    # a set this rank is not in: ValueError, locally
    if other is not None:
        with pytest.raises(ValueError, match="not a member"):
            hvd.allreduce(np.ones(2), process_set=other)
        with pytest.raises(ValueError):
            hvd.allgather(np.ones(2), process_set=other)
        with pytest.raises(ValueError):
            hvd.barrier(process_set=other)
    hvd.barrier()


def test_process_set_errors(rank, size):
    with pytest.raises(ValueError):
        hvd.add_process_set([size])  # out of range, on every rank
    with pytest.raises(ValueError):
        hvd.add_process_set([])
    ps = hvd.add_process_set([0])
    with pytest.raises(ValueError, match="already"):
        hvd.add_process_set([0])
    with pytest.raises(ValueError, match="already registered"):
        hvd.add_process_set(ps)
    assert hvd.remove_process_set(ps) and not hvd.remove_process_set(ps)
    with pytest.raises(ValueError, match="not registered"):
        hvd.allreduce(np.ones(1), process_set=ps)
    if size > 1:
        ps0 = hvd.add_process_set([0])
        # rank 0: the root is not in the set; the others: not members. Named, because a call
        # rejected after naming would shift the unnamed-call counter on some ranks only.
        with pytest.raises(ValueError):
            hvd.broadcast(np.ones(1), root_rank=1, process_set=ps0, name="np.ps.badroot")
        assert hvd.remove_process_set(ps0)
    hvd.barrier()


def test_mpi_threads_supported():
    assert isinstance(hvd.mpi_threads_supported(), bool)


# ---- timeline ----------------------------------------------------------------------------
def test_timeline_is_valid_json_with_tensor_names(rank, size):
    path = hvd.broadcast_object(os.path.join(tempfile.mkdtemp(), "timeline.json")
                                if rank == 0 else None, root_rank=0)
    hvd.start_timeline(path, mark_cycles=True)
    hvd.allreduce(np.ones(3), name="np.timeline.allreduce")
    hvd.allgather(np.ones((1, 2)), name="np.timeline.allgather")
    hvd.stop_timeline()
    hvd.allreduce(np.ones(1), name="np.timeline.after_stop")
    if rank == 0:
        with open(path) as f:
            events = json.load(f)
        text = json.dumps(events)
        assert "np.timeline.allreduce" in text and "np.timeline.allgather" in text
        assert "np.timeline.after_stop" not in text
        os.remove(path)
