"""torch's own distributed tools on the "horovod_cpp" backend of torch.distributed.

A program written for DDP keeps more of torch.distributed than DDP itself: the object
collectives (metrics, configs), ZeroRedundancyOptimizer (optimizer state sharded over the
ranks), and the Join context manager (uneven inputs: ranks run out of data at different
steps). Each is checked here against what every rank computes on its own: objects element
by element, training against a single process that applies the same mean gradients.
"""

from datetime import timedelta

import pytest
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.algorithms.join import Join
from torch.distributed.optim import ZeroRedundancyOptimizer

import horovod_cpp.torch as hvd


@pytest.fixture(scope="module", autouse=True)
def group():
    hvd.init_process_group(timeout=timedelta(seconds=120))
    yield
    dist.destroy_process_group()


def _payload(rank):
    """An object whose pickled size differs per rank (torch pads to the largest)."""
    return {"rank": rank, "name": "r" * (3 + 17 * rank), "values": list(range(rank + 2))}


def test_object_collectives(rank, size):
    got = [None] * size
    dist.all_gather_object(got, _payload(rank))
    assert got == [_payload(r) for r in range(size)]

    for root in range(size):
        objs = [_payload(root), ("root", root)] if rank == root else [None, None]
        dist.broadcast_object_list(objs, src=root)
        assert objs == [_payload(root), ("root", root)]

        gathered = [None] * size if rank == root else None
        dist.gather_object(_payload(rank), gathered, dst=root)
        if rank == root:
            assert gathered == [_payload(r) for r in range(size)]

        out = [None]
        pieces = [_payload(10 * root + r) for r in range(size)] if rank == root else None
        dist.scatter_object_list(out, pieces, src=root)
        assert out == [_payload(10 * root + rank)]


def _model():
    torch.manual_seed(11)
    return nn.Sequential(nn.Linear(6, 12), nn.Tanh(), nn.Linear(12, 4)).double()


def _shard(step, rank, n=5):
    g = torch.Generator().manual_seed(104729 * step + rank)
    return torch.randn(n, 6, generator=g, dtype=torch.float64), \
        torch.randint(0, 4, (n,), generator=g)


def _mean_grads(ref, step, ranks, divide_by):
    """Sets ref's gradients to the sum over `ranks` of each one's gradient on its shard of
    `step`, divided by `divide_by` (DDP's mean; under Join the initial world size)."""
    grads = []
    for r in ranks:
        ref.zero_grad()
        x, y = _shard(step, r)
        F.cross_entropy(ref(x), y).backward()
        grads.append([p.grad.clone() for p in ref.parameters()])
    for i, p in enumerate(ref.parameters()):
        p.grad = sum(g[i] for g in grads) / divide_by


def _assert_same(model, ref, what):
    for (name, a), b in zip(model.named_parameters(), ref.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12, msg=f"{what}: {name}")


def test_zero_redundancy_optimizer_with_ddp(rank, size):
    """ZeroRedundancyOptimizer: each rank steps Adam on its shard of the parameters and
    broadcasts them (roots: the owners); the weights equal one process's Adam over the mean
    gradients, and the consolidated optimizer state on rank 0 equals that process's."""
    model = _model()
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=torch.optim.Adam, lr=0.01)
    ref = _model()
    ref_opt = torch.optim.Adam(ref.parameters(), lr=0.01)
    for step in range(4):
        opt.zero_grad()
        x, y = _shard(step, rank)
        F.cross_entropy(ddp(x), y).backward()
        opt.step()
        _mean_grads(ref, step, range(size), size)
        ref_opt.step()
        _assert_same(model, ref, f"step {step}")

    opt.consolidate_state_dict(to=0)
    if rank == 0:
        got = opt.state_dict()["state"]
        want = ref_opt.state_dict()["state"]
        assert sorted(got) == sorted(want)
        for i in want:
            for key in ("exp_avg", "exp_avg_sq"):
                torch.testing.assert_close(got[i][key], want[i][key], rtol=1e-10, atol=1e-14,
                                           msg=f"parameter {i} {key}")
    else:
        with pytest.raises(RuntimeError):
            opt.state_dict()  # consolidated on rank 0 only, as torch says


def _uneven_run(rank, with_zero, group=None):
    """Rank r trains on 2 + r batches under torch's Join, with DDP (and ZeroRedundancyOptimizer)
    over `group`; returns the model."""
    model = _model()
    ddp = nn.parallel.DistributedDataParallel(model, process_group=group)
    if with_zero:
        opt = ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=torch.optim.SGD,
                                      process_group=group, lr=0.1)
        joinables = [ddp, opt]
    else:
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
        joinables = [ddp]
    with Join(joinables):
        for step in range(2 + rank):
            opt.zero_grad()
            x, y = _shard(step, rank)
            F.cross_entropy(ddp(x), y).backward()
            opt.step()
    return model


@pytest.mark.parametrize("with_zero", [False, True])
def test_join_with_uneven_inputs(rank, size, with_zero):
    """torch's Join: rank r has 2 + r batches. While some ranks are done, DDP's join hook
    shadows their all_reduces with zeros, so each step averages the gradients of the ranks
    still training over the initial world size (checked against that schedule run in one
    process); ZeroRedundancyOptimizer's join hook shadows its broadcasts too (checked against
    the same program on torch's gloo backend)."""
    model = _uneven_run(rank, with_zero)
    if with_zero:
        gloo = dist.new_group(backend="gloo")
        want = _uneven_run(rank, with_zero, gloo)
        dist.destroy_process_group(gloo)
        _assert_same(model, want, f"against gloo, after Join (rank {rank} ran {2 + rank} "
                     "steps)")
    else:
        ref = _model()
        ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
        for step in range(2 + size - 1):
            ref_opt.zero_grad()
            _mean_grads(ref, step, [r for r in range(size) if step < 2 + r], size)
            ref_opt.step()
        _assert_same(model, ref, f"after Join (rank {rank} ran {2 + rank} steps)")

    # The group pairs as before: a plain collective after the joined loop.
    t = torch.tensor([float(rank)])
    dist.all_reduce(t)
    assert t.item() == sum(range(size))


class _Branchy(nn.Module):
    """A model whose second head is used on odd steps only (DDP's unused parameters)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(5)
        self.body = nn.Linear(6, 12).double()
        self.head = nn.Linear(12, 4).double()
        self.odd = nn.Linear(12, 4).double()

    def forward(self, x, step):
        h = torch.tanh(self.body(x))
        return self.head(h) + (self.odd(h) if step % 2 else 0)


def _ddp_run(rank, group, options, steps=4):
    """DDP with `options` over `group`; on accumulate steps no_sync() gathers the gradient of
    a first micro-batch locally; the second head is used on odd steps, or never with a static
    graph (whose unused parameters may not change). Returns the model."""
    accumulate = options.pop("accumulate", False)
    odd_steps = not options.get("static_graph", False)
    model = _Branchy()
    if rank != 0:  # DDP starts from rank 0's weights
        with torch.no_grad():
            for p in model.parameters():
                p.mul_(1.5)
    ddp = nn.parallel.DistributedDataParallel(model, process_group=group, **options)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
    for step in range(steps):
        opt.zero_grad()
        x, y = _shard(step, rank)
        if accumulate:
            with ddp.no_sync():
                F.cross_entropy(ddp(x[:2], step * odd_steps), y[:2]).backward()
            x, y = x[2:], y[2:]
        F.cross_entropy(ddp(x, step * odd_steps), y).backward()
        opt.step()
    return model


@pytest.mark.parametrize("options", [
    {"find_unused_parameters": True},
    {"find_unused_parameters": True, "gradient_as_bucket_view": True, "bucket_cap_mb": 0.0005},
    {"static_graph": True},
    {"accumulate": True, "find_unused_parameters": True},
], ids=["unused", "bucket_view_small_buckets", "static_graph", "no_sync"])
def test_ddp_options_match_gloo(rank, size, options):
    """torch's DDP with its options for unused parameters, bucket views, a static graph and
    gradient accumulation (no_sync) ends with the same weights on this backend as on torch's
    gloo backend (the same program over a gloo group)."""
    ours = _ddp_run(rank, None, dict(options))
    gloo = dist.new_group(backend="gloo")
    want = _ddp_run(rank, gloo, dict(options))
    dist.destroy_process_group(gloo)
    _assert_same(ours, want, f"DDP {options} against gloo")
    start = _Branchy()  # rank 0's start: trained, not left as it was
    assert not torch.equal(ours.body.weight, start.body.weight)
    if not options.get("static_graph"):
        assert not torch.equal(ours.odd.weight, start.odd.weight)


# ---- point-to-point: send/recv through the group's torch store ----------------------------

def _message(src, dst, k, dtype=torch.float64, shape=(3, 2)):
    g = torch.Generator().manual_seed(1000 * src + 10 * dst + k)
    values = torch.randn(shape, generator=g) * 10
    return values > 0 if dtype == torch.bool else values.to(dtype)


@pytest.mark.parametrize("dtype, shape", [
    (torch.float64, (3, 2)), (torch.int32, (5,)), (torch.bfloat16, (2, 2)),
    (torch.bool, (4,)), (torch.float32, (0,)), (torch.int64, ())])
def test_send_recv_ring(rank, size, dtype, shape):
    """Each rank sends to the next and receives from the one before (blocking calls: a send
    returns once the store holds the message); every element checked."""
    dist.send(_message(rank, (rank + 1) % size, 0, dtype, shape), dst=(rank + 1) % size)
    got = torch.empty(shape, dtype=dtype)
    src = (rank - 1) % size
    dist.recv(got, src=src)
    assert torch.equal(got, _message(src, rank, 0, dtype, shape))


def test_isend_irecv_keep_the_order_of_each_sender_and_tag(rank, size):
    """Messages from one sender with one tag arrive in the order sent, whatever the order of
    the waits; tags are matched apart; the future of a receive holds its tensor."""
    if rank == 0:
        works = [dist.isend(_message(0, d, k), dst=d, tag=7) for d in range(1, size)
                 for k in range(3)]
        works += [dist.isend(_message(0, d, 9), dst=d, tag=9) for d in range(1, size)]
        for w in works:
            w.wait()
    else:
        tagged = torch.empty(3, 2, dtype=torch.float64)
        nine = dist.irecv(tagged, src=0, tag=9)  # posted first, sent last
        outs = [torch.empty(3, 2, dtype=torch.float64) for _ in range(3)]
        works = [dist.irecv(o, src=0, tag=7) for o in outs]
        for w in reversed(works):
            w.wait()
        for k, o in enumerate(outs):
            assert torch.equal(o, _message(0, rank, k))
        (value,) = nine.get_future().wait()
        assert torch.equal(value, _message(0, rank, 9)) and torch.equal(tagged, value)
        assert nine.is_completed()
    dist.barrier()


def test_batch_isend_irecv_and_a_large_message(rank, size):
    right, left = (rank + 1) % size, (rank - 1) % size
    got = torch.empty(4, dtype=torch.float64)
    ops = [dist.P2POp(dist.isend, _message(rank, right, 1, shape=(4,)), right),
           dist.P2POp(dist.irecv, got, left)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    assert torch.equal(got, _message(left, rank, 1, shape=(4,)))

    big = (512, 512)  # 1 MiB of float32
    if rank == 0:
        dist.send(_message(0, size - 1, 2, torch.float32, big), dst=size - 1)
    elif rank == size - 1:
        got = torch.empty(big)
        dist.recv(got, src=0)
        assert torch.equal(got, _message(0, size - 1, 2, torch.float32, big))
    dist.barrier()


def test_a_receive_of_the_wrong_size_fails_and_the_next_pairs(rank, size):
    """A message of another shape fails the receive on the receiver, naming both; the message
    is consumed, so the next receive gets the next message."""
    if rank == 0:
        dist.send(torch.ones(3), dst=1)
        dist.send(torch.full((2,), 5.0), dst=1)
    elif rank == 1:
        with pytest.raises(ValueError, match=r"message is float32\[3\], the receiving tensor "
                                             r"float32\[2\]"):
            dist.recv(torch.empty(2), src=0)
        got = torch.empty(2)
        dist.recv(got, src=0)
        assert torch.equal(got, torch.full((2,), 5.0))
    with pytest.raises(ValueError, match="not another rank"):
        dist.send(torch.ones(1), dst=rank)
    dist.barrier()


def test_send_recv_in_a_group_of_some_ranks_and_timeout(rank, size):
    """In a group of the last two ranks, torch gives group ranks: the members exchange.
    A receive that no rank answers ends with the group's timeout."""
    pair = [size - 2, size - 1]
    sub = dist.new_group(pair, timeout=timedelta(seconds=1))
    if rank in pair:
        other = pair[1 - pair.index(rank)]
        dist.send(torch.full((2,), float(rank)), dst=other, group=sub)
        got = torch.empty(2)
        dist.recv(got, src=other, group=sub)
        assert torch.equal(got, torch.full((2,), float(other)))
        with pytest.raises(RuntimeError, match=f"within 1 s.*rank {1 - pair.index(rank)} of "
                                               "the group has not sent"):
            dist.recv(got, src=other, group=sub, tag=3)
    dist.barrier()
    dist.destroy_process_group(sub)
    if size > 2:  # at np 2 the pair is every rank: the global set, nothing to remove
        from horovod_cpp.torch import process_group
        assert hvd.remove_process_set(process_group._registered_set(pair))
    dist.barrier()
