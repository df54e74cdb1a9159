"""torch.distributed's backend "horovod_cpp" (horovod_cpp/torch/process_group.py).

The default group is made by hvd.init_process_group() (the mpirun route); every collective
of torch.distributed is checked element by element against what each rank computes on its
own from data seeded by rank, and torch's own DistributedDataParallel trains on it with the
same gradients as a single process over every rank's shard.
"""

import re
import time
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

import horovod_cpp.torch as hvd
from horovod_cpp.torch import mpi_ops, process_group


@pytest.fixture(scope="module", autouse=True)
def group():
    hvd.init_process_group()
    yield
    dist.destroy_process_group()


def seeded(rank, n=7, dtype=torch.float64, salt=0):
    g = torch.Generator().manual_seed(100 * salt + rank)
    return (torch.randn(n, generator=g) * 10).to(dtype)


def test_the_default_group_is_horovod_cpps(rank, size):
    assert dist.get_backend() == "horovod_cpp"
    assert (dist.get_rank(), dist.get_world_size()) == (rank, size)


@pytest.mark.parametrize("op, dtype", [
    (op, dtype) for op in ("SUM", "AVG", "MIN", "MAX", "PRODUCT")
    for dtype in (torch.float32, torch.float64, torch.int32)
    if op != "AVG" or dtype.is_floating_point])
def test_all_reduce(rank, size, op, dtype):
    t = seeded(rank, dtype=dtype)
    everyone = torch.stack([seeded(r, dtype=dtype) for r in range(size)])
    want = {"SUM": lambda: everyone.sum(0), "AVG": lambda: everyone.sum(0) / size,
            "MIN": lambda: everyone.min(0).values, "MAX": lambda: everyone.max(0).values,
            "PRODUCT": lambda: everyone.prod(0)}[op]().to(dtype)
    dist.all_reduce(t, op=getattr(dist.ReduceOp, op))
    torch.testing.assert_close(t, want)


def test_all_reduce_async_and_non_contiguous(rank, size):
    base = torch.stack([seeded(rank, 6, salt=s) for s in range(4)])
    t = base.t()  # not contiguous: the result must land in the view
    work = dist.all_reduce(t, async_op=True)
    deadline = time.monotonic() + 60
    while not work.is_completed():  # polls the library's handle
        assert time.monotonic() < deadline, "is_completed() never became true"
        time.sleep(0.001)
    work.wait()
    want = sum(torch.stack([seeded(r, 6, salt=s) for s in range(4)]) for r in range(size)).t()
    torch.testing.assert_close(t, want)
    assert work.is_completed() and work.is_success()


def test_all_reduce_coalesced(rank, size):
    ts = [seeded(rank, n, salt=n) for n in (1, 5, 9)]
    dist.all_reduce_coalesced(ts)
    for n, t in zip((1, 5, 9), ts):
        torch.testing.assert_close(t, sum(seeded(r, n, salt=n) for r in range(size)))


def test_broadcast_from_each_root(rank, size):
    for root in range(size):
        t = seeded(rank, 5, salt=root)
        dist.broadcast(t, src=root)
        torch.testing.assert_close(t, seeded(root, 5, salt=root))


def test_all_gather_and_into_tensor(rank, size):
    outs = [torch.empty(2, 3) for _ in range(size)]
    mine = seeded(rank, 6, torch.float32).view(2, 3)
    dist.all_gather(outs, mine)
    for r in range(size):
        torch.testing.assert_close(outs[r], seeded(r, 6, torch.float32).view(2, 3))
    flat = torch.empty(size * 6)
    dist._all_gather_base(flat, seeded(rank, 6, torch.float32))
    torch.testing.assert_close(flat, torch.cat([seeded(r, 6, torch.float32)
                                                for r in range(size)]))


def test_reduce_leaves_other_ranks_unchanged(rank, size):
    for root in range(size):
        t = seeded(rank, 4, salt=root)
        dist.reduce(t, dst=root, op=dist.ReduceOp.MAX)
        everyone = torch.stack([seeded(r, 4, salt=root) for r in range(size)])
        want = everyone.max(0).values if rank == root else seeded(rank, 4, salt=root)
        torch.testing.assert_close(t, want)


def test_gather_and_scatter(rank, size):
    root = size - 1
    mine = seeded(rank, 3)
    gathered = [torch.empty(3, dtype=torch.float64) for _ in range(size)] \
        if rank == root else None
    dist.gather(mine, gather_list=gathered, dst=root)
    if rank == root:
        for r in range(size):
            torch.testing.assert_close(gathered[r], seeded(r, 3))
    out = torch.empty(2, 2, dtype=torch.float64)
    pieces = [seeded(100 + r, 4).view(2, 2) for r in range(size)] if rank == 0 else None
    dist.scatter(out, scatter_list=pieces, src=0)
    torch.testing.assert_close(out, seeded(100 + rank, 4).view(2, 2))


def test_reduce_scatter(rank, size):
    inputs = [seeded(rank, 3, salt=k) for k in range(size)]
    out = torch.empty(3, dtype=torch.float64)
    dist.reduce_scatter(out, inputs)
    torch.testing.assert_close(out, sum(seeded(r, 3, salt=rank) for r in range(size)))
    whole = seeded(rank, 4 * size, salt=9)
    piece = torch.empty(4, dtype=torch.float64)
    dist._reduce_scatter_base(piece, whole)
    total = sum(seeded(r, 4 * size, salt=9) for r in range(size))
    torch.testing.assert_close(piece, total[4 * rank:4 * rank + 4])


def test_all_to_all_single_uneven_and_all_to_all(rank, size):
    # Rank r sends r + d + 1 rows of width 2 to rank d, each row holding (r, d, k).
    send_splits = [rank + d + 1 for d in range(size)]
    rows = [torch.tensor([[rank, d, k]], dtype=torch.float32)
            for d in range(size) for k in range(rank + d + 1)]
    recv_splits = [s + rank + 1 for s in range(size)]
    out = torch.empty(sum(recv_splits), 3)
    dist.all_to_all_single(out, torch.cat(rows), recv_splits, send_splits)
    want = torch.cat([torch.tensor([[s, rank, k]], dtype=torch.float32)
                      for s in range(size) for k in range(s + rank + 1)])
    torch.testing.assert_close(out, want)
    outs = [torch.empty(d + 1) for d in range(size)]
    dist.all_to_all(outs, [torch.full((rank + 1,), float(10 * rank + d)) for d in range(size)])
    for s in range(size):
        torch.testing.assert_close(outs[s], torch.full((s + 1,), float(10 * s + rank)))


def test_barrier_and_refusals(rank, size):
    dist.barrier()
    with pytest.raises(ValueError, match="BAND"):
        dist.all_reduce(torch.ones(2, dtype=torch.int32), op=dist.ReduceOp.BAND)
    with pytest.raises(RuntimeError, match="without a source"):
        dist.recv(torch.ones(1))
    # A group of some ranks made by torch's own new_group, which horovod_cpp does not see (as
    # when bound before horovod_cpp.torch was imported): refused at its first collective, on
    # its members only.
    some = list(range(size - 1))
    sub = dist.new_group._horovod_cpp_torch_new_group(some)
    if rank in some:
        with pytest.raises(RuntimeError, match=re.escape(f"ranks {some}") + ".*imported"):
            dist.all_reduce(torch.ones(1), group=sub)
    # A group of every rank runs as the default group does.
    everyone = dist.new_group(list(range(size)))
    t = torch.full((2,), float(rank + 1))
    dist.all_reduce(t, group=everyone)
    torch.testing.assert_close(t, torch.full((2,), float(size * (size + 1) // 2)))
    # The next collective of the default group works.
    t = torch.full((3,), float(rank))
    dist.all_reduce(t)
    torch.testing.assert_close(t, torch.full((3,), float(sum(range(size)))))


def test_a_mismatch_fails_on_every_rank_and_the_next_collective_works(rank, size):
    t = torch.ones(2 + (rank == 1))
    with pytest.raises(RuntimeError, match=r"rank 1 sent float32\[3\]"):
        dist.all_reduce(t)
    t = torch.ones(4)
    dist.all_reduce(t)
    torch.testing.assert_close(t, torch.full((4,), float(size)))


def test_a_mistake_on_one_rank_never_leaves_the_others_waiting(rank, size):
    """Output lists only one rank gets wrong fail on that rank, after the collective, so the
    others get their results; what the ranks must agree on fails on every rank."""
    outs = [torch.empty(2) for _ in range(size + (rank == 1))]
    if rank == 1:
        with pytest.raises(ValueError, match=f"{size + 1} output tensors for {size} ranks"):
            dist.all_gather(outs, torch.full((2,), float(rank)))
    else:
        dist.all_gather(outs, torch.full((2,), float(rank)))
        for r in range(size):
            torch.testing.assert_close(outs[r], torch.full((2,), float(r)))
    flat = torch.empty(size * 3 + (rank == 1))
    if rank == 1:
        with pytest.raises(ValueError, match="all_gather_into_tensor"):
            dist.all_gather_into_tensor(flat, torch.ones(3))
    else:
        dist.all_gather_into_tensor(flat, torch.ones(3))
        torch.testing.assert_close(flat, torch.ones(size * 3))
    pieces = [torch.ones(2) for _ in range(size + 1)] if rank == 0 else None
    with pytest.raises(ValueError, match="scatter"):  # the root's list is wrong: everyone
        dist.scatter(torch.empty(2), scatter_list=pieces, src=0)
    # Rows that do not split evenly over the ranks: the library fails it on every rank.
    with pytest.raises(ValueError, match="not divisible"):
        dist.all_to_all_single(torch.empty(size + 1), torch.ones(size + 1))
    # Splits past the rows on rank 1 only: rank 1's library refuses them and still sends the
    # tensor marked failed, so the others fail too instead of waiting.
    splits = [1] * size
    splits[0] += rank == 1
    with pytest.raises((ValueError, RuntimeError)):
        dist.all_to_all_single(torch.empty(size), torch.ones(size), input_split_sizes=splits)
    t = torch.full((3,), float(rank))
    dist.all_reduce(t)
    torch.testing.assert_close(t, torch.full((3,), float(sum(range(size)))))


def test_a_collective_past_its_timeout_raises_and_the_ranks_still_pair(rank, size):
    """torch's timeouts: wait(timeout) and the group's own (new_group(timeout=...), through a
    future as DDP waits) raise a RuntimeError on the rank that waits; a rank that comes late
    still pairs with the pending collective."""
    slow = dist.new_group(list(range(size)), timeout=timedelta(seconds=1))
    a, b = torch.full((2,), float(rank)), torch.full((3,), float(rank + 1))
    dist.barrier()
    if rank == 0:
        start = time.monotonic()
        work_a = dist.all_reduce(a, async_op=True)  # the default group: 30 minutes
        work_b = dist.all_reduce(b, group=slow, async_op=True)
        with pytest.raises(RuntimeError, match=r"all_reduce on the horovod_cpp backend did "
                           r"not complete within 1 s"):
            work_a.wait(timeout=timedelta(seconds=1))
        with pytest.raises(RuntimeError, match="did not complete within 1 s"):
            work_b.get_future().wait()
        assert time.monotonic() - start < 4.5, "the timeouts came too late"
        # The operations went on: the others' late calls complete them.
        mpi_ops.synchronize(work_a._handles[0])
        mpi_ops.synchronize(work_b._handles[0])
    else:
        time.sleep(5)  # past rank 0's timeouts
        dist.all_reduce(a)
        dist.all_reduce(b, group=slow)
    torch.testing.assert_close(a, torch.full((2,), float(sum(range(size)))))
    torch.testing.assert_close(b, torch.full((3,), float(sum(range(1, size + 1)))))
    dist.barrier(group=slow)


def _model():
    torch.manual_seed(3)
    return nn.Sequential(nn.Linear(5, 16), nn.BatchNorm1d(16), nn.Tanh(),
                         nn.Linear(16, 3)).double()


def _shard(step, rank, n=4):
    g = torch.Generator().manual_seed(7919 * step + rank)
    return torch.randn(n, 5, generator=g, dtype=torch.float64), \
        torch.randint(0, 3, (n,), generator=g)


def _ddp_matches_one_process(rank, members, group=None, bucket_cap_mb=25,
                             wrapper=nn.parallel.DistributedDataParallel):
    """`wrapper` (torch's DistributedDataParallel, or horovod_cpp's) over `group` (the
    default group: every rank): after each step the weights equal a single process's SGD over
    the mean of the members' gradients."""
    model = _model()
    if rank != members[0]:  # DDP starts every member from the first member's weights
        with torch.no_grad():
            for p in model.parameters():
                p.add_(1.0)
    ddp = wrapper(model, bucket_cap_mb=bucket_cap_mb, process_group=group)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    ref = _model()
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for step in range(3):
        opt.zero_grad()
        x, y = _shard(step, rank)
        F.cross_entropy(ddp(x), y).backward()
        opt.step()
        # The reference: each member's gradient on its own shard (BatchNorm in training mode
        # normalises by the shard's statistics, as under DDP), averaged.
        grads = []
        for r in members:
            ref.zero_grad()
            xr, yr = _shard(step, r)
            F.cross_entropy(ref(xr), yr).backward()
            grads.append([p.grad.clone() for p in ref.parameters()])
        for i, p in enumerate(ref.parameters()):
            p.grad = sum(g[i] for g in grads) / len(members)
        ref_opt.step()
        for (name, a), b in zip(ddp.module.named_parameters(), ref.parameters()):
            torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12,
                                       msg=f"step {step} {name}")


@pytest.mark.parametrize("bucket_cap_mb", [25, 0.0001])
def test_torchs_own_ddp_matches_one_process(rank, size, bucket_cap_mb):
    _ddp_matches_one_process(rank, list(range(size)), bucket_cap_mb=bucket_cap_mb)


@pytest.mark.parametrize("hook", ["fp16", "powersgd"])
def test_torchs_ddp_comm_hooks(rank, size, hook):
    """torch's own DDP communication hooks run on the backend: fp16 compression (within
    float16's precision) and PowerSGD (its callbacks wait on further all_reduces; a rank-32
    approximation of these rank-1 gradients is exact up to float32 rounding)."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powersgd
    torch.manual_seed(0)
    model = nn.Linear(64, 32, bias=False)
    ddp = nn.parallel.DistributedDataParallel(model)
    if hook == "fp16":
        ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
        rtol, atol = 1e-3, 0.0
    else:
        state = powersgd.PowerSGDState(process_group=None, matrix_approximation_rank=32,
                                       start_powerSGD_iter=2, min_compression_rate=0.5)
        ddp.register_comm_hook(state, powersgd.powerSGD_hook)
        rtol, atol = 0.0, 1e-4
    for step in range(4):  # PowerSGD compresses from the third step on
        model.zero_grad()
        ddp(torch.full((1, 64), float(rank + 1 + step))).sum().backward()
        # d(sum(W x))/dW = x in every row: the mean over the ranks of rank + 1 + step.
        want = torch.full((32, 64), (size + 1) / 2 + step)
        torch.testing.assert_close(model.weight.grad, want, rtol=rtol, atol=atol,
                                   msg=f"{hook} step {step}")


def test_a_failed_collective_fails_ddps_backward(rank, size):
    """A collective that fails reaches torch's C++ side as a failed future: DDP's backward
    raises the library's error (a future completed with the error as its value crashed the
    process in DDP's reducer), and the job goes on. With a comm hook, the hook's future: one
    element less on rank 1 is refused on every rank. Without one, DDP's own path: the group's
    timeout ends rank 0's wait while rank 1 is late; rank 1's late call still completes."""
    torch.manual_seed(0)
    ddp = nn.parallel.DistributedDataParallel(nn.Linear(8, 4, bias=False))
    ddp.register_comm_hook(None, lambda _, bucket: dist.all_reduce(
        bucket.buffer()[:32 - (rank == 1)], async_op=True).get_future())
    with pytest.raises(RuntimeError, match=r"rank 1 sent float32\[31\]"):
        ddp(torch.ones(1, 8)).sum().backward()

    quick = dist.new_group(list(range(size)), timeout=timedelta(seconds=1))
    model = nn.Linear(8, 4, bias=False)
    ddp = nn.parallel.DistributedDataParallel(model, process_group=quick)
    loss = ddp(torch.full((1, 8), float(rank))).sum()
    if rank == 0:
        with pytest.raises(RuntimeError, match="did not complete within 1 s"):
            loss.backward()
    else:
        time.sleep(2.5)
        loss.backward()
        torch.testing.assert_close(model.weight.grad,
                                   torch.full((4, 8), sum(range(size)) / size))
    dist.destroy_process_group(quick)
    t = torch.full((3,), float(rank))
    dist.all_reduce(t)
    torch.testing.assert_close(t, torch.full((3,), float(sum(range(size)))))


# ---- groups of some ranks: horovod_cpp process sets ---------------------------------------

def _subsets(size):
    """Groups of some ranks to try: all but the last, all but the first, and the two ends
    (at np 2: one rank each)."""
    subsets = [list(range(size - 1)), list(range(1, size))]
    if size > 2:
        subsets.append([0, size - 1])
    return subsets


def _drop(group, ranks):
    """Removes the torch group and its process set (collective, every rank), so that later
    tests of the suite may register sets of the same ranks."""
    if group is not None and group != dist.GroupMember.NON_GROUP_MEMBER:
        dist.destroy_process_group(group)
    found = process_group._registered_set(sorted(ranks))
    assert found is not None
    assert hvd.remove_process_set(found)
    dist.barrier()  # a non-member's removal returns at once: no rank runs ahead of the others


@pytest.mark.parametrize("which", [0, 1, 2])
def test_a_group_of_some_ranks_runs_every_collective(rank, size, which):
    if which >= len(_subsets(size)):
        pytest.skip("no such group at this size")
    members = _subsets(size)[which]
    sub = dist.new_group(members)
    try:
        if rank not in members:
            assert sub == dist.GroupMember.NON_GROUP_MEMBER
        else:
            _check_group_collectives(rank, members, sub)
    finally:
        _drop(sub, members)
    t = torch.full((2,), float(rank))  # the default group goes on
    dist.all_reduce(t)
    torch.testing.assert_close(t, torch.full((2,), float(sum(range(size)))))


def _check_group_collectives(rank, members, sub):
    g, me = len(members), members.index(rank)
    assert (dist.get_rank(sub), dist.get_world_size(sub)) == (me, g)
    assert sub.process_set.ranks == members
    t = seeded(rank)
    dist.all_reduce(t, group=sub)
    torch.testing.assert_close(t, sum(seeded(r) for r in members))
    t = seeded(rank, dtype=torch.int32, salt=1)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=sub, async_op=True).wait()
    torch.testing.assert_close(
        t, torch.stack([seeded(r, dtype=torch.int32, salt=1) for r in members]).max(0).values)
    src = members[-1]  # torch's roots are global ranks; the group's last member here
    t = seeded(rank, 5, salt=2)
    dist.broadcast(t, src=src, group=sub)
    torch.testing.assert_close(t, seeded(src, 5, salt=2))
    outs = [torch.empty(3, dtype=torch.float64) for _ in range(g)]
    dist.all_gather(outs, seeded(rank, 3, salt=3), group=sub)
    for r, out in zip(members, outs):
        torch.testing.assert_close(out, seeded(r, 3, salt=3))
    flat = torch.empty(3 * g, dtype=torch.float64)
    dist.all_gather_into_tensor(flat, seeded(rank, 3, salt=3), group=sub)
    torch.testing.assert_close(flat, torch.cat([seeded(r, 3, salt=3) for r in members]))
    out = torch.empty(2, dtype=torch.float64)
    dist.reduce_scatter_tensor(out, seeded(rank, 2 * g, salt=4), group=sub)
    torch.testing.assert_close(out, sum(seeded(r, 2 * g, salt=4) for r in members)[2 * me:
                                                                                   2 * me + 2])
    # Uneven: member i sends j + 1 rows of 100 * i + j to member j.
    sent = torch.cat([torch.full((j + 1,), float(100 * me + j)) for j in range(g)])
    got = torch.empty(g * (me + 1))
    dist.all_to_all_single(got, sent, output_split_sizes=[me + 1] * g,
                           input_split_sizes=[j + 1 for j in range(g)], group=sub)
    torch.testing.assert_close(got, torch.cat([torch.full((me + 1,), float(100 * i + me))
                                               for i in range(g)]))
    dst = members[0]
    t = seeded(rank, 4, salt=5)
    dist.reduce(t, dst=dst, op=dist.ReduceOp.MIN, group=sub)
    want = torch.stack([seeded(r, 4, salt=5) for r in members]).min(0).values
    torch.testing.assert_close(t, want if rank == dst else seeded(rank, 4, salt=5))
    rows = [torch.empty(4, dtype=torch.float64) for _ in range(g)] if rank == dst else None
    dist.gather(seeded(rank, 4, salt=6), rows, dst=dst, group=sub)
    if rank == dst:
        for r, row in zip(members, rows):
            torch.testing.assert_close(row, seeded(r, 4, salt=6))
    got = torch.empty(2)
    dist.scatter(got, [torch.full((2,), float(i)) for i in range(g)] if rank == src else None,
                 src=src, group=sub)
    torch.testing.assert_close(got, torch.full((2,), float(me)))
    objs = [None] * g
    dist.all_gather_object(objs, {"rank": rank}, group=sub)
    assert objs == [{"rank": r} for r in members]
    dist.barrier(group=sub)


def test_a_mismatch_in_a_group_fails_on_every_member_and_the_group_goes_on(rank, size):
    if size < 3:
        pytest.skip("needs a group of two ranks beside another rank")
    members = list(range(1, size))
    sub = dist.new_group(members)
    try:
        if rank in members:
            first = members[0]
            with pytest.raises(RuntimeError, match=rf"rank {first} sent float32\[3\]"):
                dist.all_reduce(torch.ones(2 + (rank == first)), group=sub)
            t = torch.ones(4)
            dist.all_reduce(t, group=sub)
            torch.testing.assert_close(t, torch.full((4,), float(len(members))))
    finally:
        _drop(sub, members)


@pytest.mark.parametrize("wrapper", ["torch", "horovod_cpp"])
def test_ddp_on_a_group_of_some_ranks(rank, size, wrapper):
    """torch's DDP, and horovod_cpp's (process_group= a group of this backend), made on the
    group's members only; a wrapper of every rank made after it still pairs up."""
    members = list(range(size - 1))
    sub = dist.new_group(members)
    wrap = nn.parallel.DistributedDataParallel if wrapper == "torch" else \
        hvd.DistributedDataParallel
    try:
        if rank in members:
            _ddp_matches_one_process(rank, members, group=sub, wrapper=wrap)
    finally:
        _drop(sub, members)
    _ddp_matches_one_process(rank, list(range(size)), wrapper=wrap)


def test_disjoint_groups_and_hvds_own_set(rank, size):
    """Even and odd ranks in two groups, as torch's new_subgroups_by_enumeration makes them
    (which torch 1.13 refuses without CUDA): one set each. A set the program registered
    itself is reused by a group of the same ranks, and horovod_cpp's and torch's collectives
    on it interleave; registered after the group, the program's set takes the group's over."""
    evens, odds = list(range(0, size, 2)), list(range(1, size, 2))
    groups = [dist.new_group(evens), dist.new_group(odds)]
    try:
        parity, mine = (evens, groups[0]) if rank % 2 == 0 else (odds, groups[1])
        t = torch.full((3,), float(rank))
        dist.all_reduce(t, group=mine)
        torch.testing.assert_close(t, torch.full((3,), float(sum(parity))))
        assert mine.process_set.ranks == parity
    finally:
        for group, ranks in zip(groups, (evens, odds)):
            _drop(group, ranks)
    others = list(range(1, size))
    ps = hvd.add_process_set(others)
    try:
        sub = dist.new_group(others)
        if rank in others:
            assert sub.process_set is ps
            a = hvd.allreduce(torch.full((2,), float(rank)), op=hvd.Sum, process_set=ps)
            b = torch.full((2,), float(2 * rank))
            dist.all_reduce(b, group=sub)
            torch.testing.assert_close(a, torch.full((2,), float(sum(others))))
            torch.testing.assert_close(b, torch.full((2,), float(2 * sum(others))))
            dist.destroy_process_group(sub)
    finally:
        assert hvd.remove_process_set(ps)
        dist.barrier()
    # The other way round: the program registers the ranks of a torch group it made before,
    # and takes the group's set over (no "already exists").
    sub = dist.new_group(others)
    ps = hvd.add_process_set(others)
    try:
        assert ps.process_set_id is not None and ps.ranks == others
        if rank in others:
            assert sub.process_set.process_set_id == ps.process_set_id
            a = hvd.allreduce(torch.full((2,), float(rank)), op=hvd.Max, process_set=ps)
            torch.testing.assert_close(a, torch.full((2,), float(others[-1])))
            dist.destroy_process_group(sub)
        with pytest.raises(ValueError, match="already exists"):  # once only
            hvd.add_process_set(others)
    finally:
        assert hvd.remove_process_set(ps)
        dist.barrier()


def test_sync_batch_norm_over_a_group(rank, size):
    """horovod_cpp's SyncBatchNorm given a group of this backend, as torch's is given a
    process_group (convert_sync_batchnorm's second argument, or process_group=): batch
    statistics over the group's members only, equal to BatchNorm over their whole batch."""
    members = list(range(size - 1)) if size > 2 else [0, 1]
    sub = dist.new_group(members)

    def batch(r):
        return seeded(r, 4 * 3 * (r + 1), salt=7).reshape(4 * (r + 1), 3)

    try:
        if rank in members:
            whole = torch.cat([batch(r) for r in members])
            ref = nn.BatchNorm1d(3).double()
            want = ref(whole)
            start = sum(4 * (r + 1) for r in members if r < rank)
            for how in ("positional", "keyword"):
                bn = nn.Sequential(nn.BatchNorm1d(3).double())
                bn = hvd.SyncBatchNorm.convert_sync_batchnorm(bn, sub) if how == "positional" \
                    else hvd.SyncBatchNorm.convert_sync_batchnorm(bn, process_group=sub)
                assert bn[0].process_set is sub.process_set
                out = bn(batch(rank))
                torch.testing.assert_close(out, want[start:start + len(out)], msg=how)
                torch.testing.assert_close(bn[0].running_mean, ref.running_mean, msg=how)
            layer = hvd.SyncBatchNorm(3, process_group=sub).double()
            torch.testing.assert_close(layer(batch(rank)), want[start:start + 4 * (rank + 1)])
        with pytest.raises(ValueError, match="'horovod_cpp' backend"):
            hvd.SyncBatchNorm(3, process_group=object())
    finally:
        if members != list(range(size)):
            _drop(sub, members)


def test_post_local_sgd_with_subgroups(rank, size):
    """torch's post-local SGD: DDP's post_localSGD_hook (all ranks for 2 steps, then each pair
    of ranks' group) and PeriodicModelAverager (all ranks, every 2 steps after 2): every step's
    weights equal a simulation of the same schedule, for every rank."""
    from torch.distributed.algorithms.ddp_comm_hooks import post_localSGD_hook as pls
    from torch.distributed.algorithms.model_averaging import averagers
    pairs = [list(range(i, min(i + 2, size))) for i in range(0, size, 2)]
    groups = [dist.new_group(p) for p in pairs]
    lr = 0.1
    try:
        model = nn.Linear(4, 2, bias=False).double()
        with torch.no_grad():
            model.weight.fill_(1.0)
        ddp = nn.parallel.DistributedDataParallel(model)
        state = pls.PostLocalSGDState(process_group=None, subgroup=groups[rank // 2],
                                      start_localSGD_iter=2)
        ddp.register_comm_hook(state, pls.post_localSGD_hook)
        averager = averagers.PeriodicModelAverager(period=2, warmup_steps=2)
        opt = torch.optim.SGD(ddp.parameters(), lr=lr)
        w = [1.0] * size  # every rank's weight (all elements alike), simulated
        for step in range(7):
            opt.zero_grad()
            ddp(torch.full((1, 4), float(rank + step), dtype=torch.float64)).sum().backward()
            opt.step()
            averager.average_parameters(ddp.parameters())
            # d(sum(W x))/dW = x in every row; x = rank + step.
            for pair in (pairs if step >= 2 else [list(range(size))]):
                g = sum(r + step for r in pair) / len(pair)
                for r in pair:
                    w[r] -= lr * g
            if step >= 2 and (step - 2) % 2 == 0:
                w = [sum(w) / size] * size
            torch.testing.assert_close(model.weight, torch.full((2, 4), w[rank],
                                                                dtype=torch.float64),
                                       msg=f"step {step}")
    finally:
        for group, pair in zip(groups, pairs):
            if pair != list(range(size)):
                _drop(group if rank in pair else None, pair)
