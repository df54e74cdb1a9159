"""horovod_cpp.torch: alltoall, reducescatter, grouped allgather/reducescatter (values and
autograd), join, process sets on every collective and on DistributedOptimizer / broadcasts,
timeline."""

import json
import os
import tempfile

import pytest
import torch

import horovod_cpp.torch as hvd
from test_numpy_more_collectives import slices, uneven_splits
from test_torch import rank_tensor


# ---- alltoall ----------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.int32, torch.bfloat16, torch.float32, torch.float64])
def test_alltoall_even(rank, size, dtype):
    data = {r: rank_tensor(r, (2 * size, 3), dtype, seed=31) for r in range(size)}
    out = hvd.alltoall(data[rank], name=f"t.a2a.even.{dtype}")
    assert isinstance(out, torch.Tensor) and out.dtype == dtype
    want = torch.cat([data[src][2 * rank:2 * rank + 2] for src in range(size)])
    assert torch.equal(out, want)


def test_alltoall_uneven_splits(rank, size):
    splits = {r: uneven_splits(r, size) for r in range(size)}
    data = {r: rank_tensor(r, (sum(splits[r]), 2), torch.float32, seed=32) for r in range(size)}
    out, received = hvd.alltoall(data[rank], splits=splits[rank], name="t.a2a.uneven")
    want_recv = [splits[src][rank] for src in range(size)]
    want = torch.cat([data[src][sum(splits[src][:rank]):sum(splits[src][:rank + 1])]
                      for src in range(size)])
    assert received.dtype == torch.int32 and received.tolist() == want_recv
    assert torch.equal(out, want)
    # splits as an int32 tensor (other dtypes: ValueError, test_torch_compat.py); the async
    # handle gives a tuple
    h = hvd.alltoall_async(data[rank], splits=torch.tensor(splits[rank], dtype=torch.int32))
    out2, received2 = hvd.synchronize(h)
    assert torch.equal(out2, want) and received2.dtype == torch.int32
    assert received2.tolist() == want_recv


def test_alltoall_autograd(rank, size):
    splits = {r: uneven_splits(r, size) for r in range(size)}
    n_rows = {r: sum(splits[r]) + 1 for r in range(size)}  # last row never sent
    x = rank_tensor(rank, (n_rows[rank], 3), torch.float64, seed=33).requires_grad_()
    out, received = hvd.alltoall(x, splits=splits[rank], name="t.a2a.grad")
    # loss = sum(w * out) with w depending on the receiving rank and the source row
    w = torch.arange(out.numel(), dtype=torch.float64).reshape(out.shape) + 10 * rank
    (w * out).sum().backward()
    # analytic: row i of x sent to rank dst at offset j of dst's output gets dst's weight
    want = torch.zeros(n_rows[rank], 3, dtype=torch.float64)
    start = 0
    for dst in range(size):
        recv = [splits[src][dst] for src in range(size)]
        dst_rows = sum(recv)
        w_dst = torch.arange(dst_rows * 3, dtype=torch.float64).reshape(dst_rows, 3) + 10 * dst
        off = sum(recv[:rank])
        n = splits[rank][dst]
        want[start:start + n] = w_dst[off:off + n]
        start += n
    torch.testing.assert_close(x.grad, want)
    # even split, splits=None: returns a tensor only
    y = torch.full((size, 2), float(rank + 1), requires_grad=True)
    z = hvd.alltoall(y)
    assert isinstance(z, torch.Tensor)
    (z * (rank + 1)).sum().backward()
    torch.testing.assert_close(y.grad, torch.tensor([[float(d + 1)] * 2 for d in range(size)]))


# ---- reducescatter -----------------------------------------------------------------------
@pytest.mark.parametrize("rows", [1, 5])
def test_reducescatter(rank, size, rows):
    data = [rank_tensor(r, (rows, 2), torch.float64, seed=34) for r in range(size)]
    total = sum(data)
    lo, hi = slices(rows, size)[rank]
    out = hvd.reducescatter(data[rank], op=hvd.Sum, name=f"t.rs.sum.{rows}")
    torch.testing.assert_close(out, total[lo:hi])
    avg = hvd.reducescatter(data[rank], name=f"t.rs.avg.{rows}")  # default Average
    torch.testing.assert_close(avg, total[lo:hi] / size)
    scaled = hvd.synchronize(hvd.reducescatter_async(data[rank], op=hvd.Sum, prescale_factor=3.0,
                                                     postscale_factor=0.5))
    torch.testing.assert_close(scaled, 1.5 * total[lo:hi])
    ints = hvd.reducescatter(torch.full((rows,), rank + 1, dtype=torch.int32), op=hvd.Sum)
    assert ints.tolist() == [size * (size + 1) // 2] * (hi - lo)


@pytest.mark.parametrize("op", ["sum", "avg"])
def test_reducescatter_autograd(rank, size, op):
    rows = 2 * size + 1
    x = rank_tensor(rank, (rows, 2), torch.float64, seed=35).requires_grad_()
    hop = hvd.Sum if op == "sum" else hvd.Average
    out = hvd.reducescatter(x, op=hop, prescale_factor=2.0, name=f"t.rs.grad.{op}")
    lo, hi = slices(rows, size)[rank]
    w = torch.arange(out.numel(), dtype=torch.float64).reshape(out.shape) + 100 * rank
    (w * out).sum().backward()
    # Horovod's gradient: the allgather of the output gradients, times size for Sum (the
    # scale factors do not enter it)
    scale = float(size) if op == "sum" else 1.0
    want = torch.zeros(rows, 2, dtype=torch.float64)
    for dst, (a, b) in enumerate(slices(rows, size)):
        want[a:b] = scale * (torch.arange((b - a) * 2, dtype=torch.float64).reshape(b - a, 2)
                             + 100 * dst)
    torch.testing.assert_close(x.grad, want)
    assert out.shape[0] == hi - lo


def test_grouped_reducescatter_and_allgather_autograd(rank, size):
    a = rank_tensor(rank, (size + 1, 2), torch.float64, seed=36).requires_grad_()
    b = rank_tensor(rank, (3,), torch.float64, seed=37).requires_grad_()
    ra, rb = hvd.grouped_reducescatter([a, b], op=hvd.Sum, name="t.grs")
    all_a = sum(rank_tensor(r, (size + 1, 2), torch.float64, seed=36) for r in range(size))
    all_b = sum(rank_tensor(r, (3,), torch.float64, seed=37) for r in range(size))
    (la, ha), (lb, hb) = slices(size + 1, size)[rank], slices(3, size)[rank]
    torch.testing.assert_close(ra, all_a[la:ha])
    torch.testing.assert_close(rb, all_b[lb:hb])
    (ra.sum() * (rank + 1) + rb.sum()).backward()
    want_a = torch.cat([torch.full((hi - lo, 2), float(size * (d + 1)), dtype=torch.float64)
                        for d, (lo, hi) in enumerate(slices(size + 1, size))])
    torch.testing.assert_close(a.grad, want_a)  # op=Sum: the allgather times size
    torch.testing.assert_close(b.grad, torch.full((3,), float(size), dtype=torch.float64))

    c = torch.full((rank + 1, 2), float(rank), requires_grad=True)
    d = torch.full((1,), float(rank), requires_grad=True)
    gc, gd = hvd.grouped_allgather([c, d], name="t.gag")
    assert torch.equal(gc, torch.cat([torch.full((r + 1, 2), float(r)) for r in range(size)]))
    assert torch.equal(gd, torch.arange(size, dtype=torch.float32))
    (gc.sum() * (rank + 1) + (gd * 2).sum()).backward()
    # averaged incoming gradient, this rank's rows
    torch.testing.assert_close(c.grad, torch.full((rank + 1, 2), (size + 1) / 2))
    torch.testing.assert_close(d.grad, torch.full((1,), 2.0))
    h = hvd.grouped_allgather_async([d.detach()])
    assert torch.equal(hvd.synchronize(h)[0], torch.arange(size, dtype=torch.float32))


# ---- join --------------------------------------------------------------------------------
def test_join_uneven_steps(rank, size):
    for step in range(rank + 1):
        x = rank_tensor(rank, (4,), torch.float32, seed=200 + step)
        total = sum(rank_tensor(r, (4,), torch.float32, seed=200 + step)
                    for r in range(size) if step <= r)
        torch.testing.assert_close(hvd.allreduce(x, op=hvd.Sum, name="t.join.sum"), total)
        torch.testing.assert_close(hvd.allreduce(x, name="t.join.avg"), total / size)
    assert hvd.join() == size - 1


def test_join_with_distributed_optimizer(rank, size):
    model = torch.nn.Linear(2, 1, bias=False)
    with torch.no_grad():
        model.weight.fill_(1.0)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=1.0),
                                   named_parameters=model.named_parameters())
    for step in range(rank + 1):
        opt.zero_grad()
        model(torch.ones(1, 2)).sum().backward()  # gradient: ones
        opt.step()
        # ranks still training at this step contribute ones, joined ranks zeros; / size
        contributing = size - step
        # every rank that ran this step sees the same weights
        expected = 1.0 - sum((size - s) / size for s in range(step + 1))
        torch.testing.assert_close(model.weight.detach(), torch.full((1, 2), expected))
        assert contributing >= 1
    assert hvd.join() == size - 1


def test_allgather_while_joined_fails(rank, size):
    if rank == 0:
        assert hvd.join() == size - 1
    else:
        with pytest.raises(hvd.HorovodInternalError, match="joined"):
            hvd.allgather(torch.ones(1, 2), name="t.join.gather")
        with pytest.raises(hvd.HorovodInternalError):
            hvd.reducescatter(torch.ones(size, 2), name="t.join.rs")
        if rank == size - 1:
            import time
            time.sleep(0.05)
        assert hvd.join() == size - 1


# ---- process sets ------------------------------------------------------------------------
@pytest.fixture
def sets(size):
    even = hvd.ProcessSet([r for r in range(size) if r % 2 == 0])
    odd = hvd.ProcessSet([r for r in range(size) if r % 2 == 1]) if size > 1 else None
    hvd.add_process_set(even)
    if odd is not None:
        hvd.add_process_set(odd)
    yield even, odd
    hvd.remove_process_set(even)
    if odd is not None:
        hvd.remove_process_set(odd)


def test_process_set_torch_collectives(rank, size, sets):
    even, odd = sets
    mine, other = (even, odd) if rank % 2 == 0 else (odd, even)
    members = mine.ranks
    k, me = len(members), members.index(rank)
    assert mine.size() == k and mine.rank() == me and mine.included()
    data = {r: rank_tensor(r, (3,), torch.float64, seed=38) for r in members}
    total = sum(data.values())
    torch.testing.assert_close(hvd.allreduce(data[rank], op=hvd.Sum, process_set=mine), total)
    torch.testing.assert_close(hvd.allreduce(data[rank], process_set=mine), total / k)
    g = hvd.grouped_allreduce([data[rank], 2 * data[rank]], op=hvd.Sum, process_set=mine)
    torch.testing.assert_close(g[1], 2 * total)
    assert torch.equal(hvd.allgather(data[rank].view(1, 3), process_set=mine),
                       torch.stack([data[r] for r in members]))
    assert torch.equal(hvd.broadcast(data[rank], members[0], process_set=mine), data[members[0]])
    out, recv = hvd.alltoall(torch.full((k,), float(rank)), splits=[1] * k, process_set=mine)
    assert out.tolist() == [float(r) for r in members] and recv.tolist() == [1] * k
    lo, hi = slices(k + 1, k)[me]
    rs = hvd.reducescatter(torch.arange(k + 1, dtype=torch.float64), op=hvd.Sum, process_set=mine)
    torch.testing.assert_close(rs, k * torch.arange(k + 1, dtype=torch.float64)[lo:hi])
    hvd.barrier(process_set=mine)
    assert hvd.allgather_object(rank, process_set=mine) == members
    assert hvd.broadcast_object(rank, root_rank=members[-1], process_set=mine) == members[-1]
    # autograd of allgather in a set: this rank's slice uses its rank within the set
    x = torch.full((1, 2), float(rank), requires_grad=True)
    (hvd.allgather(x, process_set=mine).sum() * (me + 1)).backward()
    torch.testing.assert_close(x.grad, torch.full((1, 2), (k + 1) / 2))
    if other is not None:
        with pytest.raises(ValueError, match="not a member"):
            hvd.allreduce(torch.ones(1), process_set=other)
        with pytest.raises(ValueError):
            hvd.alltoall(torch.ones(2), process_set=other)
        with pytest.raises(ValueError):
            hvd.reducescatter(torch.ones(2), process_set=other)
    hvd.barrier()


def test_process_set_optimizer_and_broadcasts(rank, size, sets):
    even, odd = sets
    mine = even if rank % 2 == 0 else odd
    members = mine.ranks
    torch.manual_seed(rank)
    model = torch.nn.Linear(3, 2)
    hvd.broadcast_parameters(model.state_dict(), root_rank=members[0], process_set=mine)
    torch.manual_seed(members[0])
    ref = torch.nn.Linear(3, 2)
    for p, q in zip(model.parameters(), ref.parameters()):
        assert torch.equal(p.detach(), q.detach())
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                                   named_parameters=model.named_parameters(), process_set=mine)
    hvd.broadcast_optimizer_state(opt, root_rank=members[0], process_set=mine)
    x = torch.full((1, 3), float(rank + 1))
    opt.zero_grad()
    model(x).sum().backward()
    opt.step()
    # gradient of weight row j: x, averaged over the set's members
    mean_x = sum(r + 1 for r in members) / len(members)
    torch.testing.assert_close(model.weight.detach(), ref.weight.detach() - 0.1 * mean_x)
    torch.testing.assert_close(model.bias.detach(), ref.bias.detach() - 0.1)
    hvd.barrier()


def test_unregistered_process_set_rejected(rank, size):
    assert hvd.global_process_set.ranks == list(range(size))
    with pytest.raises(ValueError, match="not registered"):
        hvd.DistributedOptimizer(torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1),
                                 process_set=hvd.ProcessSet([0]))
    with pytest.raises(ValueError, match="not registered"):
        hvd.broadcast_parameters([torch.zeros(1)], root_rank=0, process_set=hvd.ProcessSet([0]))


# ---- timeline ----------------------------------------------------------------------------
def test_timeline(rank, size):
    path = hvd.broadcast_object(os.path.join(tempfile.mkdtemp(), "tl.json")
                                if rank == 0 else None, root_rank=0)
    hvd.start_timeline(path)
    hvd.allreduce(torch.ones(2), name="t.timeline.allreduce")
    hvd.alltoall(torch.ones(size), name="t.timeline.alltoall")
    hvd.stop_timeline()
    if rank == 0:
        with open(path) as f:
            text = json.dumps(json.load(f))
        assert "t.timeline.allreduce" in text and "t.timeline.alltoall" in text
        os.remove(path)


def test_non_cpu_tensors_not_implemented():
    t = torch.empty(2, device="meta")
    for call in (lambda: hvd.allreduce(t), lambda: hvd.alltoall(t), lambda: hvd.reducescatter(t),
                 lambda: hvd.grouped_allgather([t])):
        with pytest.raises(NotImplementedError):
            call()
