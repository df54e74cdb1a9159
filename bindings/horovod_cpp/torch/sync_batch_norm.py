"""horovod.torch's SyncBatchNorm: batch normalization whose training-mode statistics are those
of the batch of every rank of a process set together.

Forward: each rank computes its element count, mean and sum of squared deviations per channel;
one allgather hands every rank all of them and each rank combines them (the pairwise update of
Chan et al., exact for uneven batch sizes and free of the cancellation of sum-of-squares).
Backward: the two per-channel sums the input gradient needs (sum of dy, sum of dy * (x - mean))
are allreduced, so the input gradient is that of one BatchNorm over the concatenated batch;
the weight and bias gradients stay this rank's share (a DistributedOptimizer averages them, as
it does every parameter's gradient).
"""

import torch
import torch.nn.functional as F
from torch.nn.modules.batchnorm import _BatchNorm

from .._basics import MismatchError, Sum, _set_size, global_process_set
from ._group_sets import process_set_of
from .mpi_ops import allgather_async, allreduce_async, synchronize


def _stat_dtype(dtype):
    """float64 inputs keep float64; every other float type is accumulated in float32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def _channel_shape(x):
    """The shape a per-channel vector is viewed as to broadcast against x (N, C, ...)."""
    return [1, x.shape[1]] + [1] * (x.dim() - 2)


def _reduce_dims(x):
    return [0] + list(range(2, x.dim()))


def _global_moments(xs, process_set):
    """(mean, biased variance, total element count per channel) over every rank's batch."""
    channels = xs.shape[1]
    count = xs.numel() // channels if channels else 0
    if count > 0:
        var, mean = torch.var_mean(xs, dim=_reduce_dims(xs), unbiased=False)
    else:
        # A rank with an empty batch contributes nothing (var_mean would give NaN).
        mean = xs.new_zeros(channels)
        var = xs.new_zeros(channels)
    local = torch.cat([xs.new_tensor([float(count)]), mean, var * count]).unsqueeze(0)
    try:
        rows = synchronize(allgather_async(local, process_set=process_set))
    except MismatchError as e:
        # The library names the row widths (2 * channels + 1); say what they mean.
        raise MismatchError(f"horovod_cpp.torch.SyncBatchNorm: the ranks' inputs differ in "
                            f"channel count or dtype (this rank: {channels} channels, "
                            f"{xs.dtype} statistics): {e}") from e
    counts, means, sq_devs = rows[:, :1], rows[:, 1:1 + channels], rows[:, 1 + channels:]
    total = float(counts.sum().item())
    if total <= 1:
        raise ValueError("horovod_cpp.torch.SyncBatchNorm: expected more than 1 value per "
                         f"channel across the process set when training, got input of size "
                         f"{list(xs.shape)} on this rank and {int(total)} in all")
    mean_all = (counts * means).sum(0) / total
    # Each rank's squared deviations around its own mean, moved to the global mean.
    var_all = (sq_devs + counts * (means - mean_all) ** 2).sum(0) / total
    return mean_all, var_all, total


class _SyncBatchNormFunction(torch.autograd.Function):
    """Normalization by the process set's moments, with the matching cross-rank backward."""

    @staticmethod
    def forward(ctx, x, weight, bias, running_mean, running_var, eps, momentum, process_set):
        xs = x.to(_stat_dtype(x.dtype))
        mean, var, total = _global_moments(xs, process_set)
        if running_mean is not None:
            with torch.no_grad():
                running_mean.mul_(1.0 - momentum).add_(mean.to(running_mean.dtype),
                                                       alpha=momentum)
                unbiased = var * (total / (total - 1.0))
                running_var.mul_(1.0 - momentum).add_(unbiased.to(running_var.dtype),
                                                      alpha=momentum)
        invstd = torch.rsqrt(var + eps)
        shape = _channel_shape(x)
        y = (xs - mean.view(shape)) * invstd.view(shape)
        if weight is not None:
            y = y * weight.to(xs.dtype).view(shape) + bias.to(xs.dtype).view(shape)
        ctx.save_for_backward(x, weight, mean, invstd)
        ctx.total, ctx.process_set = total, process_set
        return y.to(x.dtype)

    @staticmethod
    def backward(ctx, grad_output):
        x, weight, mean, invstd = ctx.saved_tensors
        xs = x.to(mean.dtype)
        dy = grad_output.to(mean.dtype)
        shape, dims = _channel_shape(x), _reduce_dims(x)
        xmu = xs - mean.view(shape)
        sum_dy = dy.sum(dims)
        sum_dy_xmu = (dy * xmu).sum(dims)
        grad_x = grad_weight = grad_bias = None
        if ctx.needs_input_grad[0]:
            sums = torch.cat([sum_dy, sum_dy_xmu])
            sums = synchronize(allreduce_async(sums, op=Sum, process_set=ctx.process_set))
            channels = sum_dy.numel()
            mean_dy = (sums[:channels] / ctx.total).view(shape)
            mean_dy_xmu = (sums[channels:] / ctx.total).view(shape)
            scale = invstd if weight is None else invstd * weight.to(invstd.dtype)
            grad_x = (dy - mean_dy - xmu * (invstd ** 2).view(shape) * mean_dy_xmu)
            grad_x = (grad_x * scale.view(shape)).to(x.dtype)
        if weight is not None and ctx.needs_input_grad[1]:
            grad_weight = (sum_dy_xmu * invstd).to(weight.dtype)
        if weight is not None and ctx.needs_input_grad[2]:
            grad_bias = sum_dy.to(weight.dtype)
        return grad_x, grad_weight, grad_bias, None, None, None, None, None


class SyncBatchNorm(_BatchNorm):
    """Drop-in for torch.nn.BatchNorm1d/2d/3d (any input of shape (N, C, ...)) whose
    training-mode statistics cover the batches of every rank of `process_set` (per-rank batch
    sizes may differ, even be empty). Running statistics are updated with the unbiased variance
    of that whole batch, as BatchNorm does for its own. Eval mode (with running statistics)
    and a set of one rank do not communicate. Every rank of the set must run the layer the
    same number of times in the same order, as with any collective."""

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True, device=None, dtype=None,
                 process_set=global_process_set, process_group=None):
        super().__init__(num_features, eps, momentum, affine, track_running_stats,
                         device=device, dtype=dtype)
        self.process_set = process_set_of("SyncBatchNorm", process_group, process_set)

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError(f"expected at least 2D input (got {input.dim()}D input)")

    def _average_factor(self):
        """The running statistics' update weight, counting the batch as _BatchNorm does."""
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:
                factor = 1.0 / float(self.num_batches_tracked)
        return factor

    def forward(self, input):
        self._check_input_dim(input)
        factor = self._average_factor()
        batch_stats = self.training or (self.running_mean is None and self.running_var is None)
        use_running = not self.training or self.track_running_stats
        running_mean = self.running_mean if use_running else None
        running_var = self.running_var if use_running else None
        if not (self.training and batch_stats) or _set_size(self.process_set) == 1:
            return F.batch_norm(input, running_mean, running_var, self.weight, self.bias,
                                batch_stats, factor, self.eps)
        return _SyncBatchNormFunction.apply(input, self.weight, self.bias, running_mean,
                                            running_var, self.eps, factor, self.process_set)

    @classmethod
    def convert_sync_batchnorm(cls, module, process_set=global_process_set,
                               process_group=None):
        """torch.nn.SyncBatchNorm.convert_sync_batchnorm's counterpart: returns `module` with
        every BatchNorm1d/2d/3d in it (itself included) replaced by a SyncBatchNorm over
        `process_set` that holds the same parameters, running statistics, batch count, mode
        and requires_grad. A SyncBatchNorm already there is kept. As in torch, a group of the
        "horovod_cpp" torch.distributed backend may be given instead (process_group=, or in
        process_set's place): its process set is used."""
        process_set = process_set_of("SyncBatchNorm.convert_sync_batchnorm", process_group,
                                     process_set)
        out = module
        if isinstance(module, _BatchNorm) and not isinstance(module, SyncBatchNorm):
            out = cls(module.num_features, module.eps, module.momentum, module.affine,
                      module.track_running_stats, process_set=process_set)
            if module.affine:
                with torch.no_grad():
                    out.weight = module.weight
                    out.bias = module.bias
            out.running_mean = module.running_mean
            out.running_var = module.running_var
            out.num_batches_tracked = module.num_batches_tracked
            out.training = module.training
            if hasattr(module, "qconfig"):
                out.qconfig = module.qconfig
        for name, child in module.named_children():
            out.add_module(name, cls.convert_sync_batchnorm(child, process_set))
        return out
