"""DistributedOptimizer's buckets (torch/_buckets.py): gradients reduced in grouped
allreduces cut once from the parameter list.

Each parameter's gradient is a known tensor per rank (loss = sum of (p * c).sum(), so
p.grad = c), and every element of every averaged gradient is checked against the average
each rank computes itself. The cap is made small so that the parameters fall into several
buckets.
"""

import pytest
import torch
import torch.nn as nn

import horovod_cpp.torch as hvd


@pytest.fixture(autouse=True)
def several_ranks(size):
    if size < 2:
        pytest.skip("the hooks (and buckets) are registered with more than one rank")


SHAPES = [(5,), (3, 4), (17,), (2, 3, 2), (40,), (1,), (6, 6), (9,)]
TINY_CAP_MB = 200 / (1 << 20)  # 200 bytes: a few parameters per bucket


def coeff(r, i, step, shape, dtype=torch.float64):
    """Rank r's gradient of parameter i at pass `step`: reproducible on every rank."""
    g = torch.Generator().manual_seed(10007 * r + 101 * i + step)
    return torch.randint(-50, 50, shape, generator=g).to(dtype) / 8


def make_params(dtypes=None):
    dtypes = dtypes or [torch.float64] * len(SHAPES)
    return [nn.Parameter(torch.zeros(s, dtype=d)) for s, d in zip(SHAPES, dtypes)]


def make_opt(params, **kw):
    named = [(f"p{i}", p) for i, p in enumerate(params)]
    return hvd.DistributedOptimizer(torch.optim.SGD(params, lr=1.0), named_parameters=named,
                                    **kw)


def backward(params, r, step, order=None, skip=()):
    """One backward pass whose gradient of parameter i is coeff(r, i, step); the terms are
    built in `order` (autograd runs the gradient hooks in reverse creation order)."""
    order = range(len(params)) if order is None else order
    loss = 0
    for i in order:
        if i not in skip:
            p = params[i]
            loss = loss + (p * coeff(r, i, step, p.shape, p.dtype)).sum()
    loss.backward()


def expected(i, shape, size, steps=(0,), used_on=None, dtype=torch.float64):
    """The average over ranks of the summed passes' gradients (a rank not in used_on
    contributes zeros)."""
    total = torch.zeros(shape, dtype=torch.float64)
    for r in range(size):
        if used_on is None or r in used_on:
            for s in steps:
                total += coeff(r, i, s, shape, dtype).double()
    return (total / size).to(dtype)


def check_grads(params, size, steps):
    for i, p in enumerate(params):
        want = expected(i, p.shape, size, steps=steps, dtype=p.dtype)
        torch.testing.assert_close(p.grad, want, rtol=0, atol=1e-12, msg=f"parameter {i}")


def synchronized_step(opt, params, rank, size, step, **kw):
    """zero_grad, one backward pass (backward()'s keywords), synchronize, every element of
    every gradient checked, the wrapped optimizer's step."""
    opt.zero_grad()
    backward(params, rank, step, **kw)
    opt.synchronize()
    check_grads(params, size, steps=(step,))
    with opt.skip_synchronize():
        opt.step()


def test_several_buckets_every_element(rank, size):
    params = make_params()
    opt = make_opt(params, bucket_cap_mb=TINY_CAP_MB)
    buckets = opt._sync.buckets
    assert buckets is not None and len(buckets._members) >= 4
    # Reverse parameter order, every slot exactly once.
    assert [s for m in buckets._members for s in m] == list(reversed(range(len(params))))
    for step in range(3):
        synchronized_step(opt, params, rank, size, step)


def test_parameter_unused_on_one_rank_only(rank, size):
    params = make_params()
    opt = make_opt(params, bucket_cap_mb=TINY_CAP_MB)
    unused = 4  # no gradient on rank 0 (p.grad None at the first step, zeros after)
    for step in range(2):
        opt.zero_grad()
        backward(params, rank, step, skip=(unused,) if rank == 0 else ())
        opt.step()
        for i, p in enumerate(params):
            used_on = range(1, size) if i == unused else None
            want = expected(i, p.shape, size, steps=(step,), used_on=used_on)
            torch.testing.assert_close(p.grad, want, rtol=0, atol=1e-12, msg=f"parameter {i}")


def test_hook_order_differs_across_ranks(rank, size):
    params = make_params()
    opt = make_opt(params, bucket_cap_mb=TINY_CAP_MB)
    n = len(params)
    order = list(range(n))
    g = torch.Generator().manual_seed(rank)
    order = [order[j] for j in torch.randperm(n, generator=g).tolist()]
    seen = []
    for i, p in enumerate(params):
        p.register_hook(lambda grad, i=i: seen.append(i))
    for step in range(2):
        seen.clear()
        synchronized_step(opt, params, rank, size, step, order=order)
        assert seen == list(reversed(order))  # the order this rank's hooks ran in


def test_backward_passes_per_step_two(rank, size):
    params = make_params()
    opt = make_opt(params, bucket_cap_mb=TINY_CAP_MB, backward_passes_per_step=2)
    for step in range(2):
        opt.zero_grad()
        backward(params, rank, 2 * step)
        backward(params, rank, 2 * step + 1)
        opt.synchronize()
        check_grads(params, size, steps=(2 * step, 2 * step + 1))
        with opt.skip_synchronize():
            opt.step()
    opt.zero_grad()
    backward(params, rank, 9)
    backward(params, rank, 10)
    with pytest.raises(AssertionError, match="backward_passes_per_step"):
        backward(params, rank, 11)
    with pytest.raises(AssertionError, match="zero_grad"):
        opt.zero_grad()
    opt.synchronize()  # completes the started buckets on every rank
    opt.zero_grad()
    backward(params, rank, 12)
    backward(params, rank, 13)
    opt.synchronize()  # the counts restarted: the next step is whole again
    check_grads(params, size, steps=(12, 13))


def test_mixed_dtypes_and_non_contiguous_gradient(rank, size):
    dtypes = [torch.float64, torch.float32] * (len(SHAPES) // 2)
    params = make_params(dtypes)
    # A channels_last parameter gets a channels_last (not contiguous) gradient: it goes
    # through the general grouped path (a contiguous copy, copied back).
    cl = nn.Parameter(torch.zeros(2, 3, 2, 2, dtype=torch.float64)
                      .to(memory_format=torch.channels_last))
    params.append(cl)
    shapes = SHAPES + [tuple(cl.shape)]
    opt = make_opt(params, bucket_cap_mb=1.0)
    for m in opt._sync.buckets._members:
        assert len({params[s].dtype for s in m}) == 1
    opt.zero_grad()
    backward(params, rank, 0)
    assert not cl.grad.is_contiguous()
    opt.synchronize()
    for i, p in enumerate(params):
        want = expected(i, shapes[i], size, dtype=p.dtype)
        tol = 1e-12 if p.dtype == torch.float64 else 1e-6
        torch.testing.assert_close(p.grad, want, rtol=0, atol=tol, msg=f"parameter {i}")


def test_cap_zero_is_the_per_parameter_path_with_the_same_results(rank, size):
    params = make_params()
    opt = make_opt(params, bucket_cap_mb=0)
    assert opt._sync.buckets is None
    backward(params, rank, 3)
    opt.synchronize()
    check_grads(params, size, steps=(3,))


def test_bad_cap_is_a_value_error():
    with pytest.raises(ValueError, match="bucket_cap_mb"):
        make_opt(make_params(), bucket_cap_mb=-1)
    with pytest.raises(ValueError, match="bucket_cap_mb"):
        make_opt(make_params(), bucket_cap_mb="big")
