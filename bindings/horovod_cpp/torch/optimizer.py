"""DistributedOptimizer: averages gradients across ranks while backward runs.

A hook on each parameter's gradient accumulator counts its gradient; with the default options
the parameters are cut once into buckets (_buckets.py) and a bucket's grouped allreduce starts
when its last gradient is computed, so communication overlaps the rest of the backward pass;
otherwise (groups, compression, bucket_cap_mb=0) each gradient's allreduce starts as soon as
it is computed. step() (or synchronize()) waits for them, then runs the wrapped optimizer.
op=Adasum (on more than one rank) returns Horovod's delta-based Adasum optimizer instead
(adasum_optimizer.py).
"""

import contextlib
import os
import warnings

import torch

from .._basics import Adasum, Average, _set_id, global_process_set, size
from .._gradients import (ReduceOptions, check_groups, check_reduce_options, checked_names,
                          fold_num_groups)
from ._buckets import resolve_cap_mb
from ._grad_sync import GradientSync
# _DistributedAdasumOptimizer is also reachable here, where Horovod defines it.
from .adasum_optimizer import _DistributedAdasumOptimizer, make_adasum_optimizer  # noqa: F401
from .compression import Compression
from .semisync import make_semisync_optimizer


class _DistributedOptimizer:
    """Mixed into a subclass of the wrapped optimizer's class (see DistributedOptimizer).
    The gradient engine (.._gradients) decides what is reduced when and how; GradientSync
    (_grad_sync.py) keeps the autograd hooks and writes the results into p.grad."""

    _hvd_base_class = None  # the wrapped optimizer's class, set on the generated subclass

    def _hvd_setup(self, named_parameters, options, backward_passes_per_step, cap_mb):
        self._compression = options.compression
        self.op = options.op
        self.gradient_predivide_factor = options.gradient_predivide_factor
        self.sparse_as_dense = options.sparse_as_dense
        self.process_set = options.process_set

        all_params = [p for group in self.param_groups for p in group["params"]]
        named = checked_names(all_params, named_parameters)
        name_of = {p: f"DistributedOptimizer.allreduce.{name}" for name, p in named}
        # The engine's slots: the parameters that get gradients, in param_group order.
        params = [p for p in all_params if p.requires_grad]
        self._sync = GradientSync(params, [name_of[p] for p in params], options,
                                  backward_passes_per_step, cap_mb)
        self._synchronized = False
        self._should_synchronize = True

    @property
    def backward_passes_per_step(self):
        return self._sync.engine.backward_passes_per_step

    # ---- public API ------------------------------------------------------------------------
    def synchronize(self):
        """Waits for every gradient's allreduce (starting those not started yet) and writes
        the averaged gradients into p.grad. On a rank outside the optimizer's process set
        there is nothing to wait for (its gradients stay local), as in Horovod."""
        self._sync.synchronize()
        self._synchronized = True

    @contextlib.contextmanager
    def skip_synchronize(self):
        """Inside this context step() does not synchronize (call synchronize() first)."""
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def step(self, closure=None):
        if self._should_synchronize:
            if self._synchronized:
                warnings.warn("optimizer.step() called without optimizer.skip_synchronize() "
                              "context after optimizer.synchronize(). This can cause training "
                              "slowdown. You may want to consider using "
                              "optimizer.skip_synchronize() context if you use "
                              "optimizer.synchronize() in your code.")
            self.synchronize()
        self._synchronized = False
        return self._hvd_base_class.step(self, closure)

    def set_backward_passes_per_step(self, passes):
        """Changes how many backward passes accumulate locally before gradients are reduced
        (and restarts the count), as Horovod's optimizer does."""
        self._sync.set_passes(passes)

    def load_state_dict(self, *args, **kwargs):
        """Loads the wrapped optimizer's state; pending gradient reductions are forgotten and
        the backward-pass count restarts, as in Horovod."""
        self._sync.reset()
        self._synchronized = False
        self._should_synchronize = True
        return self._hvd_base_class.load_state_dict(self, *args, **kwargs)

    def zero_grad(self, *args, **kwargs):
        if self._sync.pending:
            raise AssertionError("optimizer.zero_grad() was called after loss.backward() but "
                                 "before optimizer.step() or optimizer.synchronize(). This is "
                                 "prohibited as it can cause a race condition.")
        return self._hvd_base_class.zero_grad(self, *args, **kwargs)


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none,
                         backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0,
                         num_groups=0, groups=None, sparse_as_dense=False,
                         process_set=global_process_set, staleness=0, local_sgd_period=0,
                         local_sgd_warmup_steps=0, local_sgd_average_state=False,
                         local_sgd_overlap=False, bucket_cap_mb=None):
    """Wraps a torch.optim optimizer so that gradients are averaged across ranks.

    Returns an instance of a subclass of the optimizer's class, over the same param_groups.
    Each gradient's allreduce starts during backward; step() waits for them. Gradients
    accumulate locally for backward_passes_per_step passes before being reduced.

    Semi-synchronous modes (semisync.py): staleness=s > 0 applies at each step the averaged
    gradients of s steps earlier (communication overlaps s steps; no rank more than s steps
    ahead); local_sgd_period=k > 0 steps on local gradients and averages the parameters (and,
    with local_sgd_average_state, the optimizer state) every k steps, after
    local_sgd_warmup_steps synchronous steps. Both have flush().

    bucket_cap_mb (not in Horovod; None: HOROVOD_BUCKET_CAP_MB, else 25): the synchronous
    optimizer reduces its gradients in buckets of up to this many MiB (the first one 1 MiB),
    cut once in reverse parameter order, each one grouped allreduce started when its last
    gradient is computed; 0 starts one allreduce per gradient instead.

    op=Adasum, as in Horovod, returns a different optimizer (adasum_optimizer.py) when there is
    more than one rank: each parameter's update of a local step of the wrapped optimizer (not
    its gradient) is combined by Adasum across the ranks. It takes named_parameters,
    compression and backward_passes_per_step; groups, num_groups, sparse_as_dense and
    bucket_cap_mb have no effect (each delta is reduced on its own, dense); a process set other
    than the global one raises NotImplementedError, staleness / local SGD ValueError. Do not
    scale the learning rate by the number of ranks (docs/training.md, "Adasum").
    """
    check_reduce_options(op, gradient_predivide_factor)
    cap_mb = resolve_cap_mb(bucket_cap_mb)
    groups = check_groups(fold_num_groups(groups, num_groups),
                          lambda t: isinstance(t, torch.Tensor), "torch.Tensor")
    if not isinstance(backward_passes_per_step, int) or backward_passes_per_step < 1:
        raise ValueError("backward_passes_per_step must be a positive integer")
    _set_id(process_set)  # a registered ProcessSet (ValueError otherwise)
    options = ReduceOptions(op=op, gradient_predivide_factor=gradient_predivide_factor,
                            compression=compression, sparse_as_dense=sparse_as_dense,
                            groups=groups, process_set=process_set)
    if op == Adasum and (staleness or local_sgd_period):
        raise ValueError("op=Adasum combines the updates of synchronous local steps; "
                         "staleness / local SGD are not supported with it")
    if op == Adasum and (size() > 1 or os.environ.get("HOROVOD_ELASTIC") == "1"):
        return make_adasum_optimizer(optimizer, named_parameters, compression,
                                     backward_passes_per_step, process_set)
    if staleness or local_sgd_period:
        if groups is not None or backward_passes_per_step != 1:
            raise ValueError("staleness / local SGD do not support groups or "
                             "backward_passes_per_step > 1")
        params = [p for g in optimizer.param_groups for p in g["params"]]
        names = {p: f"DistributedOptimizer.semisync.{name}"
                 for name, p in checked_names(params, named_parameters)}
        return make_semisync_optimizer(optimizer, names, options, staleness, local_sgd_period,
                                       local_sgd_warmup_steps, local_sgd_average_state,
                                       local_sgd_overlap)

    base = optimizer.__class__
    cls = type(base.__name__, (_DistributedOptimizer, base), {"_hvd_base_class": base})
    dist = cls.__new__(cls)
    base.__init__(dist, optimizer.param_groups)
    dist._hvd_setup(named_parameters, options, backward_passes_per_step, cap_mb)
    return dist
