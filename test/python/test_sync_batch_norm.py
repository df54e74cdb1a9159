"""horovod_cpp.torch.SyncBatchNorm against one process's torch BatchNorm over the batch of
every rank concatenated: outputs, running statistics, input/weight/bias gradients, eval mode,
uneven and empty per-rank batches. Every rank builds every rank's batch from seeds."""

import copy

import pytest
import torch

import horovod_cpp.torch as hvd

REFERENCE = {2: torch.nn.BatchNorm1d, 3: torch.nn.BatchNorm1d, 4: torch.nn.BatchNorm2d,
             5: torch.nn.BatchNorm3d}
SPATIAL = {2: (), 3: (5,), 4: (3, 4), 5: (2, 3, 2)}
CHANNELS = 3


def batch_sizes(size, empty_rank=None):
    """Uneven per-rank batch sizes (rank r: 2 + r, or 0 for empty_rank)."""
    return [0 if r == empty_rank else 2 + r for r in range(size)]


def rank_batch(r, n, dims, dtype, seed):
    g = torch.Generator().manual_seed(100 * seed + r)
    shape = (n, CHANNELS) + SPATIAL[dims]
    return (torch.randn(shape, generator=g, dtype=torch.float64) * (1 + r) + r).to(dtype)


def upstream(r, n, dims, dtype, seed):
    """The gradient rank r's output receives (a fixed random weighting of its elements)."""
    return rank_batch(r, n, dims, dtype, seed + 50)


def make_pair(dtype, affine=True, momentum=0.1, track=True):
    """(SyncBatchNorm, reference BatchNorm) with equal seeded parameters."""
    layer = hvd.SyncBatchNorm(CHANNELS, momentum=momentum, affine=affine,
                              track_running_stats=track).to(dtype)
    ref = torch.nn.BatchNorm1d(CHANNELS, momentum=momentum, affine=affine,
                               track_running_stats=track).to(dtype)
    if affine:
        g = torch.Generator().manual_seed(7)
        with torch.no_grad():
            w = torch.rand(CHANNELS, generator=g, dtype=torch.float64) + 0.5
            b = torch.randn(CHANNELS, generator=g, dtype=torch.float64)
            for m in (layer, ref):
                m.weight.copy_(w)
                m.bias.copy_(b)
    return layer, ref


def reference_forward(ref, x):
    """BatchNorm1d accepts (N, C) and (N, C, L); 4D/5D inputs are folded into (N, C, L),
    which normalizes over the same elements as BatchNorm2d/3d."""
    return ref(x.reshape(x.shape[0], CHANNELS, -1)).reshape(x.shape)


def step(layer, ref, rank, sizes, dims, dtype, seed, device="cpu"):
    """One training step of both layers on the batches of `sizes`; checks the output and the
    input, weight and bias gradients of this rank."""
    tol = dict(rtol=1e-9, atol=1e-9) if dtype == torch.float64 else dict(rtol=2e-4, atol=2e-4)
    xs = [rank_batch(r, n, dims, dtype, seed) for r, n in enumerate(sizes)]
    gs = [upstream(r, n, dims, dtype, seed) for r, n in enumerate(sizes)]
    start = sum(sizes[:rank])
    full = torch.cat(xs).requires_grad_()
    want = reference_forward(ref, full)
    (want * torch.cat(gs)).sum().backward()

    x = xs[rank].to(device).requires_grad_()
    y = layer(x)
    assert y.shape == x.shape and y.dtype == dtype and y.device == x.device
    torch.testing.assert_close(y.cpu(), want.detach()[start:start + sizes[rank]], **tol)
    (y * gs[rank].to(device)).sum().backward()
    torch.testing.assert_close(x.grad.cpu(), full.grad[start:start + sizes[rank]], **tol)
    if layer.affine:
        # Each rank holds its share of the parameter gradients; their sum is the whole's.
        for what, p, q in (("weight", layer.weight, ref.weight), ("bias", layer.bias, ref.bias)):
            total = hvd.allreduce(p.grad, op=hvd.Sum, name=f"sbn.grad.{what}",
                                  process_set=layer.process_set)
            torch.testing.assert_close(total.cpu(), q.grad, **tol)
            p.grad = None
            q.grad = None


@pytest.mark.parametrize("dims", [2, 3, 4, 5])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_training_matches_concatenated_batch(rank, size, dims, dtype):
    layer, ref = make_pair(dtype)
    sizes = batch_sizes(size)
    for seed in range(3):
        step(layer, ref, rank, sizes, dims, dtype, seed)
        torch.testing.assert_close(layer.running_mean, ref.running_mean, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(layer.running_var, ref.running_var, rtol=1e-5, atol=1e-6)
    assert int(layer.num_batches_tracked) == 3

    # Eval mode: running statistics, no communication (ranks call it different numbers of
    # times; a collective here would pair with nothing and the test would time out).
    layer.eval()
    ref.eval()
    x = rank_batch(rank, 4, dims, dtype, seed=9)
    for _ in range(rank + 1):
        y = layer(x)
    torch.testing.assert_close(y, reference_forward(ref, x), rtol=1e-5, atol=1e-5)
    check = hvd.allreduce(torch.ones(1), op=hvd.Sum, name=f"sbn.after_eval.{dims}.{dtype}")
    assert check.item() == size


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_inputs_accumulate_in_float32(rank, size, dtype):
    """float16/bfloat16 inputs (float32 parameters, as under autocast): output and input
    gradient in the input's dtype, equal to a float64 BatchNorm over the same rounded values
    within the dtype's precision."""
    if size < 2:
        pytest.skip("one rank runs torch's own batch_norm (no CPU float16 kernel in torch 1.13)")
    layer, ref = make_pair(torch.float32)
    ref.double()
    sizes = batch_sizes(size)
    xs = [rank_batch(r, n, 4, dtype, seed=60) for r, n in enumerate(sizes)]
    gs = [upstream(r, n, 4, torch.float64, seed=60) for r, n in enumerate(sizes)]
    full = torch.cat(xs).double().requires_grad_()
    want = reference_forward(ref, full)
    (want * torch.cat(gs)).sum().backward()
    mine = slice(sum(sizes[:rank]), sum(sizes[:rank + 1]))
    x = xs[rank].requires_grad_()
    y = layer(x)
    (y * gs[rank].to(dtype)).sum().backward()
    assert y.dtype == dtype and x.grad.dtype == dtype
    tol = dict(rtol=2e-2, atol=3e-2) if dtype == torch.float16 else dict(rtol=4e-2, atol=8e-2)
    torch.testing.assert_close(y.double(), want.detach()[mine], **tol)
    torch.testing.assert_close(x.grad.double(), full.grad[mine], **tol)
    torch.testing.assert_close(layer.running_var.double(), ref.running_var, rtol=1e-5,
                               atol=1e-5)


@pytest.mark.parametrize("variant", ["empty_rank", "no_affine", "cumulative", "no_tracking"])
def test_variants(rank, size, variant):
    dtype = torch.float64
    layer, ref = make_pair(dtype, affine=variant != "no_affine",
                           momentum=None if variant == "cumulative" else 0.1,
                           track=variant != "no_tracking")
    sizes = batch_sizes(size, empty_rank=1 if variant == "empty_rank" else None)
    for seed in range(2):
        step(layer, ref, rank, sizes, 3, dtype, seed + 20)
    if variant == "no_tracking":
        assert layer.running_mean is None and layer.running_var is None
    else:
        torch.testing.assert_close(layer.running_mean, ref.running_mean)
        torch.testing.assert_close(layer.running_var, ref.running_var)


def test_too_few_values_fail_on_every_rank(rank, size):
    layer = hvd.SyncBatchNorm(CHANNELS)
    x = torch.randn(1 if rank == 0 else 0, CHANNELS)
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        layer(x)
    check = hvd.allreduce(torch.ones(1), op=hvd.Sum, name="sbn.after_error")
    assert check.item() == size


def test_channel_mismatch_fails_on_every_rank(rank, size):
    if size < 2:
        pytest.skip("needs two ranks")
    layer = hvd.SyncBatchNorm(CHANNELS)
    x = torch.randn(4, CHANNELS + 1 if rank == 0 else CHANNELS)
    with pytest.raises(hvd.MismatchError, match=r"SyncBatchNorm: the ranks' inputs differ in "
                       r"channel count.*rank 0"):
        layer(x)
    check = hvd.allreduce(torch.ones(1), op=hvd.Sum, name="sbn.after_mismatch")
    assert check.item() == size


def test_rejects_1d_input():
    with pytest.raises(ValueError, match="at least 2D"):
        hvd.SyncBatchNorm(CHANNELS)(torch.randn(CHANNELS))


def test_process_sets(rank, size):
    """A set of ranks {0, 1} synchronizes only them; a set of one rank is a local BatchNorm."""
    if size < 2:
        pytest.skip("needs two ranks")
    pair = hvd.add_process_set([0, 1])
    solo = hvd.add_process_set([0])
    try:
        if rank < 2:
            layer, ref = make_pair(torch.float64)
            layer.process_set = pair
            step(layer, ref, rank, batch_sizes(2), 4, torch.float64, seed=30)
            torch.testing.assert_close(layer.running_var, ref.running_var)
        if rank == 0:
            layer, ref = make_pair(torch.float64)
            layer.process_set = solo
            x = rank_batch(0, 5, 4, torch.float64, seed=31)
            torch.testing.assert_close(layer(x), reference_forward(ref, x))
            torch.testing.assert_close(layer.running_mean, ref.running_mean)
    finally:
        hvd.remove_process_set(solo)
        hvd.remove_process_set(pair)


def _net(norm):
    torch.manual_seed(5)
    return torch.nn.Sequential(torch.nn.Linear(5, 4), norm, torch.nn.Tanh(),
                               torch.nn.Linear(4, 1)).double()


def test_distributed_optimizer_training_equals_one_process(rank, size):
    """Training with DistributedOptimizer (op=Sum, summed loss) on uneven shards gives the
    weights and running statistics of one process training on the whole batch: the layer's
    own collectives interleave with the optimizer's gradient allreduces."""
    sizes = [3 + 2 * r for r in range(size)]
    g = torch.Generator().manual_seed(17)
    x = torch.randn(sum(sizes), 5, generator=g, dtype=torch.float64) * 2 + 1
    y = torch.randn(sum(sizes), 1, generator=g, dtype=torch.float64)
    mine = slice(sum(sizes[:rank]), sum(sizes[:rank + 1]))
    model = _net(hvd.SyncBatchNorm(4))
    ref = _net(torch.nn.BatchNorm1d(4))
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                                   named_parameters=model.named_parameters(), op=hvd.Sum)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.01)
    for _ in range(3):
        opt.zero_grad()
        ((model(x[mine]) - y[mine]) ** 2).sum().backward()
        opt.step()
        ref_opt.zero_grad()
        ((ref(x) - y) ** 2).sum().backward()
        ref_opt.step()
    for (name, got), want in zip(model.state_dict().items(), ref.state_dict().values()):
        torch.testing.assert_close(got, want, msg=name)


@pytest.mark.skipif(not (torch.cuda.is_available() and hvd.nccl_built()),
                    reason="needs a CUDA device and a horovod_cpp build with NCCL")
def test_cuda_training_and_eval(rank, size):
    """CUDA tensors take the same path (statistics by torch ops on the device, collectives by
    the library): outputs, gradients and running statistics as on the CPU reference."""
    dev = torch.device("cuda", hvd.local_rank() % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    layer, ref = make_pair(torch.float32)
    layer.to(dev)
    for seed in range(2):
        step(layer, ref, rank, batch_sizes(size), 4, torch.float32, seed + 40, device=dev)
    torch.testing.assert_close(layer.running_mean.cpu(), ref.running_mean)
    torch.testing.assert_close(layer.running_var.cpu(), ref.running_var)
    layer.eval()
    ref.eval()
    x = rank_batch(rank, 3, 4, torch.float32, seed=49)
    torch.testing.assert_close(layer(x.to(dev)).cpu(), reference_forward(ref, x))


def test_convert_sync_batchnorm(rank, size):
    """Every BatchNorm of a model (nested, and the model itself) becomes a SyncBatchNorm with
    the same state; the converted model's training output over every rank's batch equals one
    process's over the concatenation."""
    torch.manual_seed(5)
    model = torch.nn.Sequential(torch.nn.Conv2d(2, 3, 1), torch.nn.BatchNorm2d(3),
                                torch.nn.Sequential(torch.nn.Flatten(), torch.nn.BatchNorm1d(12)))
    model[1].running_mean.fill_(0.5)
    model[1].num_batches_tracked.fill_(3)
    model[2][1].eval()
    reference = copy.deepcopy(model)
    converted = hvd.SyncBatchNorm.convert_sync_batchnorm(model)
    assert isinstance(converted[1], hvd.SyncBatchNorm)
    assert isinstance(converted[2][1], hvd.SyncBatchNorm)
    assert not converted[2][1].training
    assert torch.equal(converted[1].weight,
                       reference[1].weight)
    assert torch.equal(converted[1].running_mean, torch.full((3,), 0.5))
    assert int(converted[1].num_batches_tracked) == 3
    assert isinstance(hvd.SyncBatchNorm.convert_sync_batchnorm(torch.nn.BatchNorm1d(2)),
                      hvd.SyncBatchNorm)

    def batch(r):
        g = torch.Generator().manual_seed(40 + r)
        return torch.randn(2 + r, 2, 2, 2, generator=g) + r

    out = converted(batch(rank))
    whole = reference(torch.cat([batch(r) for r in range(size)]))
    start = sum(2 + r for r in range(rank))
    torch.testing.assert_close(out, whole[start:start + 2 + rank], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(converted[1].running_mean, reference[1].running_mean,
                               rtol=1e-5, atol=1e-6)
