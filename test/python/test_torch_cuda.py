"""horovod_cpp.torch on CUDA tensors (issue 12): every collective, stream ordering, outputs on
the input's device, DistributedOptimizer, broadcasts of parameters and optimizer state,
sparse gradients, join, errors. Each rank computes the expected values itself (data seeded by
rank) and checks every element.

Skipped where torch sees no CUDA device or horovod_cpp was built without NCCL (every rank
decides alike: the same build on the same kind of host). On one GPU shared by several ranks,
run with NCCL >= 2.30 and NCCL_MULTI_RANK_GPU_ENABLE=1 (docs/gpu.md).
"""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import horovod_cpp.torch as hvd

pytestmark = pytest.mark.skipif(
    not (torch.cuda.is_available() and hvd.nccl_built()),
    reason="needs a CUDA device and a horovod_cpp build with NCCL")


@pytest.fixture(scope="module")
def dev():
    # Horovod's recipe: one GPU per process by local rank (several ranks share a GPU here only
    # under NCCL_MULTI_RANK_GPU_ENABLE=1; the library picks the same device).
    d = torch.device("cuda", hvd.local_rank() % torch.cuda.device_count())
    torch.cuda.set_device(d)
    return d


def rank_values(r, shape, dtype, dev, seed=0):
    """Small integers (exact in every dtype, sums of up to 4 ranks too), different per rank."""
    g = torch.Generator().manual_seed(1000 * seed + r)
    lo, hi = (0, 4) if dtype == torch.uint8 else (-8, 9)
    return torch.randint(lo, hi, shape, generator=g).to(dtype).to(dev)


DTYPES = [torch.uint8, torch.int8, torch.int32, torch.int64, torch.float16, torch.bfloat16,
          torch.float32, torch.float64]


@pytest.mark.parametrize("dtype", DTYPES)
def test_allreduce_sum_average_min_max(rank, size, dev, dtype):
    x = rank_values(rank, (5, 7), dtype, dev, seed=1)
    stack = torch.stack([rank_values(r, (5, 7), dtype, "cpu", seed=1).double()
                         for r in range(size)])
    s = hvd.allreduce(x, op=hvd.Sum, name=f"cuda.sum.{dtype}")
    assert s.device == dev and s.dtype == dtype and s.shape == x.shape
    assert torch.equal(s.cpu().double(), stack.sum(0))
    assert torch.equal(hvd.allreduce(x, op=hvd.Min, name=f"cuda.min.{dtype}").cpu().double(),
                       stack.min(0).values)
    assert torch.equal(hvd.allreduce(x, op=hvd.Max, name=f"cuda.max.{dtype}").cpu().double(),
                       stack.max(0).values)
    if dtype.is_floating_point:
        a = hvd.allreduce(x, name=f"cuda.avg.{dtype}")
        tol = 1e-2 if dtype in (torch.float16, torch.bfloat16) else 1e-6
        torch.testing.assert_close(a.cpu().double(), stack.mean(0), rtol=tol, atol=tol)
    # The input is untouched by the out-of-place form.
    assert torch.equal(x, rank_values(rank, (5, 7), dtype, dev, seed=1))


def test_allreduce_in_place_scaled_and_large(rank, size, dev):
    n = (1 << 20) + 3  # several MiB, an odd count
    x = torch.arange(n, device=dev, dtype=torch.float32) % 97 + rank
    handle = hvd.allreduce_async_(x, op=hvd.Sum, prescale_factor=0.5, postscale_factor=4.0,
                                  name="cuda.inplace")
    assert hvd.synchronize(handle) is x
    base = torch.arange(n, dtype=torch.float64) % 97
    want = 2.0 * (size * base + sum(range(size)))
    assert torch.equal(x.cpu().double(), want)


def test_ordered_after_the_current_stream(rank, size, dev):
    """The collective runs after the work queued on torch's current stream: here a long chain
    of kernels on a side stream that only then writes the final values."""
    side = torch.cuda.Stream(device=dev)
    side.wait_stream(torch.cuda.current_stream(dev))
    with torch.cuda.stream(side):
        x = torch.zeros(1 << 22, device=dev)
        for _ in range(200):  # slow enough to still be running when the allreduce is submitted
            x.add_(1.0)
        x.sub_(200.0 - (rank + 1))
        out = hvd.allreduce(x, op=hvd.Sum, name="cuda.ordered")
        torch.cuda.current_stream(dev).synchronize()
    assert torch.all(out == size * (size + 1) / 2).item()


def test_grouped_allreduce(rank, size, dev):
    xs = [rank_values(rank, (3 + i, 2), torch.float32, dev, seed=10 + i) for i in range(5)]
    outs = hvd.grouped_allreduce(xs, op=hvd.Sum, name="cuda.grouped")
    for i, out in enumerate(outs):
        want = sum(rank_values(r, (3 + i, 2), torch.float32, "cpu", seed=10 + i)
                   for r in range(size))
        assert out.device == dev and torch.equal(out.cpu(), want)
    ys = [x.clone() for x in xs]
    hvd.grouped_allreduce_(ys, op=hvd.Sum, name="cuda.grouped_")
    for y, out in zip(ys, outs):
        assert torch.equal(y, out)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.uint8])
def test_allgather_variable_first_dim(rank, size, dev, dtype):
    x = torch.full((rank + 1, 3), rank + 1, dtype=dtype, device=dev)
    out = hvd.allgather(x, name=f"cuda.allgather.{dtype}")
    assert out.device == dev and out.dtype == dtype
    want = torch.cat([torch.full((r + 1, 3), r + 1, dtype=dtype) for r in range(size)])
    assert torch.equal(out.cpu(), want)


def test_allgather_empty_on_every_rank(rank, size, dev):
    out = hvd.allgather(torch.zeros((0, 4), device=dev), name="cuda.allgather.empty")
    assert out.shape == (0, 4) and out.device == dev


def test_grouped_allgather_and_autograd(rank, size, dev):
    a = torch.full((2, 2), float(rank), device=dev, requires_grad=True)
    b = torch.full((1,), 10.0 + rank, device=dev)
    ga, gb = hvd.grouped_allgather([a, b], name="cuda.gallgather")
    assert torch.equal(ga.detach().cpu(), torch.cat([torch.full((2, 2), float(r))
                                                      for r in range(size)]))
    assert torch.equal(gb.cpu(), torch.tensor([10.0 + r for r in range(size)]))
    g = hvd.allgather(a, name="cuda.allgather.grad")
    (g * 3.0).sum().backward()
    assert a.grad.device == dev and torch.all(a.grad == 3.0).item()


def test_broadcast(rank, size, dev):
    for root in range(size):
        x = rank_values(rank, (4, 4), torch.float32, dev, seed=20)
        out = hvd.broadcast(x, root, name=f"cuda.bcast.{root}")
        assert out.device == dev
        assert torch.equal(out.cpu(), rank_values(root, (4, 4), torch.float32, "cpu", seed=20))
        hvd.broadcast_(x, root, name=f"cuda.bcast_.{root}")
        assert torch.equal(x, out)


def test_alltoall_with_splits(rank, size, dev):
    # Rank r sends (r + d + 1) rows of value 100*r + d to rank d.
    splits = torch.tensor([rank + d + 1 for d in range(size)], dtype=torch.int32)
    x = torch.cat([torch.full((rank + d + 1, 2), 100.0 * rank + d) for d in range(size)]).to(dev)
    out, received = hvd.alltoall(x, splits, name="cuda.alltoall")
    assert out.device == dev
    assert received.tolist() == [r + rank + 1 for r in range(size)]
    want = torch.cat([torch.full((r + rank + 1, 2), 100.0 * r + rank) for r in range(size)])
    assert torch.equal(out.cpu(), want)


def test_reducescatter(rank, size, dev):
    rows = 2 * size + 1  # uneven: the first ranks get one row more
    x = rank_values(rank, (rows, 3), torch.float32, dev, seed=30)
    out = hvd.reducescatter(x, op=hvd.Sum, name="cuda.rs")
    total = sum(rank_values(r, (rows, 3), torch.float32, "cpu", seed=30) for r in range(size))
    counts = [rows // size + (1 if r < rows % size else 0) for r in range(size)]
    start = sum(counts[:rank])
    assert out.device == dev
    assert torch.equal(out.cpu(), total[start:start + counts[rank]])
    avg = hvd.reducescatter(x, name="cuda.rs.avg")
    torch.testing.assert_close(avg.cpu(), total[start:start + counts[rank]] / size)


def test_sparse_allreduce(rank, size, dev):
    idx = torch.tensor([[rank, rank + 1]], device=dev)
    val = torch.full((2, 3), float(rank + 1), device=dev)
    t = torch.sparse_coo_tensor(idx, val, (size + 1, 3))
    out = hvd.sparse_allreduce_async(t, name="cuda.sparse", op=hvd.Sum)()
    assert out.device == dev
    want = torch.zeros(size + 1, 3)
    for r in range(size):
        want[r] += r + 1
        want[r + 1] += r + 1
    assert torch.equal(out.to_dense().cpu(), want)


# ---- training --------------------------------------------------------------------------
def make_model(dev, seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 3)).double().to(dev)


def batch(step, size, shard=4):
    g = torch.Generator().manual_seed(100 + step)
    return (torch.randn(size * shard, 8, generator=g, dtype=torch.float64),
            torch.randint(0, 3, (size * shard,), generator=g))


@pytest.mark.parametrize("kind", ["sgd", "adam"])
@pytest.mark.parametrize("compression", ["none", "fp16"])
def test_distributed_optimizer_matches_one_process(rank, size, dev, kind, compression):
    """N ranks on their shards end with the weights of one model trained on the whole batch."""
    model, ref = make_model(dev), make_model(dev)

    def make(params):
        return (torch.optim.SGD(params, lr=0.1, momentum=0.9) if kind == "sgd"
                else torch.optim.Adam(params, lr=0.01))

    comp = hvd.Compression.fp16 if compression == "fp16" else hvd.Compression.none
    opt = hvd.DistributedOptimizer(make(model.parameters()),
                                   named_parameters=model.named_parameters(), compression=comp)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    ref_opt = make(ref.parameters())
    for step in range(3):
        x, y = batch(step, size)
        x, y = x.to(dev), y.to(dev)
        opt.zero_grad()
        F.cross_entropy(model(x[rank * 4:(rank + 1) * 4]), y[rank * 4:(rank + 1) * 4]).backward()
        opt.step()
        ref_opt.zero_grad()
        F.cross_entropy(ref(x), y).backward()
        ref_opt.step()
    tol = 2e-3 if compression == "fp16" else (1e-9 if kind == "sgd" else 1e-7)
    for (n, a), (_, b) in zip(model.named_parameters(), ref.named_parameters()):
        assert a.device == dev
        torch.testing.assert_close(a, b, rtol=tol, atol=tol, msg=n)
    # Every rank holds the same weights.
    for n, p in model.named_parameters():
        gathered = hvd.allgather(p.detach().reshape(1, -1), name=f"cuda.same.{kind}.{compression}.{n}")
        assert torch.equal(gathered, gathered[:1].expand_as(gathered)), n


def test_sparse_embedding_gradients(rank, size, dev):
    torch.manual_seed(3)
    emb = nn.Embedding(10, 4, sparse=True).to(dev)
    hvd.broadcast_parameters(emb.state_dict(), root_rank=0)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(emb.parameters(), lr=1.0),
                                   named_parameters=emb.named_parameters())
    before = emb.weight.detach().clone()
    opt.zero_grad()
    emb(torch.tensor([rank, rank + 1], device=dev)).sum().backward()
    opt.step()
    want = before.cpu().clone()
    for r in range(size):  # average of every rank's gradient (ones on rows r and r + 1)
        want[r] -= 1.0 / size
        want[r + 1] -= 1.0 / size
    torch.testing.assert_close(emb.weight.detach().cpu(), want)


def test_broadcast_optimizer_state_keeps_devices(rank, size, dev):
    model = make_model(dev, seed=rank)  # different on every rank
    opt = torch.optim.Adam(model.parameters(), lr=0.01 * (rank + 1))
    if rank == 0:  # root has taken a step: moments and a step count exist there only
        F.cross_entropy(model(torch.randn(4, 8, device=dev, dtype=torch.float64)),
                        torch.tensor([0, 1, 2, 0], device=dev)).backward()
        opt.step()
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    assert opt.param_groups[0]["lr"] == pytest.approx(0.01)
    for i, p in enumerate(model.parameters()):
        st = opt.state[p]
        assert st["exp_avg"].device == dev
        flat = torch.cat([st["exp_avg"].reshape(-1), st["exp_avg_sq"].reshape(-1),
                          p.detach().reshape(-1)]).reshape(1, -1)
        g = hvd.allgather(flat, name=f"cuda.optstate.{i}")
        assert torch.equal(g, g[:1].expand_as(g)), i
        steps = hvd.allgather(torch.as_tensor(st["step"], dtype=torch.float32).reshape(1).cpu(),
                              name=f"cuda.optstep.{i}")
        assert torch.all(steps == 1.0).item()


def test_join_with_cuda_allreduce(rank, size, dev):
    """The last rank joins at once; the others allreduce CUDA tensors, to which it contributes
    zeros; Average still divides by the full size."""
    last = size - 1
    if rank == last:
        assert hvd.join(hvd.local_rank()) in range(size)
        return
    x = torch.full((6,), float(rank + 1), device=dev)
    s = hvd.allreduce(x, op=hvd.Sum, name="cuda.join.sum")
    assert torch.all(s == sum(r + 1 for r in range(last))).item()
    a = hvd.allreduce(x, name="cuda.join.avg")
    torch.testing.assert_close(a, torch.full((6,), sum(r + 1 for r in range(last)) / size,
                                             device=dev))
    hvd.join(hvd.local_rank())


# ---- errors ----------------------------------------------------------------------------
def test_mismatched_dtype_fails_on_every_rank_then_next_works(rank, size, dev):
    if size < 2:
        pytest.skip("a mismatch needs two ranks")
    dtype = torch.float32 if rank == 0 else torch.float64
    with pytest.raises((RuntimeError, ValueError)) as e:
        hvd.allreduce(torch.ones(3, device=dev, dtype=dtype), name="cuda.bad.dtype")
    assert "cuda.bad.dtype" in str(e.value)
    out = hvd.allreduce(torch.ones(3, device=dev), op=hvd.Sum, name="cuda.after.bad")
    assert torch.all(out == size).item()


def test_mixed_cpu_and_cuda_fails_on_every_rank(rank, size, dev):
    if size < 2:
        pytest.skip("a mismatch needs two ranks")
    where = "cpu" if rank == 0 else dev
    with pytest.raises((RuntimeError, ValueError)) as e:
        hvd.allreduce(torch.ones(3, device=where), name="cuda.bad.device")
    assert "cuda.bad.device" in str(e.value)
    out = hvd.allreduce(torch.ones(2, device=dev), op=hvd.Sum, name="cuda.after.device")
    assert torch.all(out == size).item()
