"""DistributedOptimizer: averages gradients across ranks while backward runs.

A hook on each parameter's gradient accumulator starts that gradient's allreduce as soon as
it is computed, so communication overlaps the rest of the backward pass; step() (or
synchronize()) waits for them, then runs the wrapped optimizer.
"""

import contextlib
import os
import warnings

import torch

from .._basics import Adasum, Average, _set_id, global_process_set, size
from .compression import Compression
from .semisync import checked_names as _checked_names, make_semisync_optimizer
from .mpi_ops import (allreduce_async_, grouped_allreduce_async_, sparse_allreduce_async,
                      synchronize, synchronize_all)


def _split_evenly(items, n):
    """`items` cut into n contiguous chunks whose lengths differ by at most one."""
    n = max(1, min(n, len(items))) if items else 1
    q, r = divmod(len(items), n)
    out, start = [], 0
    for i in range(n):
        end = start + q + (1 if i < r else 0)
        out.append(items[start:end])
        start = end
    return [c for c in out if c]


class _DistributedOptimizer:
    """Mixed into a subclass of the wrapped optimizer's class (see DistributedOptimizer)."""

    _hvd_base_class = None  # the wrapped optimizer's class, set on the generated subclass

    def _hvd_setup(self, named_parameters, compression, backward_passes_per_step, op,
                   gradient_predivide_factor, groups, sparse_as_dense, process_set):
        self._compression = compression
        self.backward_passes_per_step = backward_passes_per_step
        self.op = op
        self.gradient_predivide_factor = gradient_predivide_factor
        self.sparse_as_dense = sparse_as_dense
        self.process_set = process_set

        all_params = [p for group in self.param_groups for p in group["params"]]
        if named_parameters is not None:
            named_parameters = list(named_parameters)
            if any(not isinstance(p, tuple) for p in named_parameters):
                raise ValueError("named_parameters should be a sequence of tuples (name, "
                                 "parameter), usually produced by model.named_parameters().")
            seen, dups = set(), []
            for name, _ in named_parameters:
                if name in seen and name not in dups:
                    dups.append(name)
                seen.add(name)
            if dups:
                raise ValueError("Parameter names in named_parameters must be unique. Found "
                                 "duplicates: %s" % ", ".join(dups))
            named_ids = {id(p) for _, p in named_parameters}
            unnamed = [id(p) for p in all_params if id(p) not in named_ids]
            if unnamed:
                raise ValueError("named_parameters was specified, but one or more model "
                                 "parameters were not named. Python object ids: %s"
                                 % ", ".join(str(i) for i in unnamed))
        else:
            named_parameters = [(f"noname.{i}", p) for i, p in enumerate(all_params)]
        self._parameter_names = {p: f"DistributedOptimizer.allreduce.{name}"
                                 for name, p in named_parameters}
        self._allreduce_delay = {p: backward_passes_per_step for p in all_params}
        self._handles = {}      # param -> (handle or None, compression ctx)
        self._grad_accs = []
        self._requires_update = set()
        self._synchronized = False
        self._should_synchronize = True

        # Explicit groups: lists of params reduced together by one grouped allreduce.
        self._groups = None
        self._p_to_group = {}
        self._group_ready = {}
        if groups is not None:
            trainable = [p for p in all_params if p.requires_grad]
            if isinstance(groups, int):
                group_lists = _split_evenly(trainable, groups)
            else:
                group_lists = [list(g) for g in groups]
                listed = {id(p) for g in group_lists for p in g}
                group_lists += [[p] for p in trainable if id(p) not in listed]
            self._groups = [tuple(g) for g in group_lists]
            for g in self._groups:
                for p in g:
                    self._p_to_group[p] = g
                self._group_ready[g] = set()

        self._sparse_params = set()  # parameters seen with a sparse gradient
        self._dense_of_sparse = {}   # param -> sparse_dim of its gradient reduced dense
        # A rank outside the process set steps on its own gradients, without communicating.
        self._included = process_set is None or bool(process_set.included())
        if self._included and (size() > 1 or os.environ.get("HOROVOD_ELASTIC") == "1"):
            self._register_hooks()

    # ---- hooks ---------------------------------------------------------------------------
    def _register_hooks(self):
        for group in self.param_groups:
            for p in group["params"]:
                if p.requires_grad:
                    self._requires_update.add(p)
                    # The AccumulateGrad node of p: its hooks run after p.grad is updated.
                    acc = p.expand_as(p).grad_fn.next_functions[0][0]
                    acc.register_hook(self._make_hook(p))
                    self._grad_accs.append(acc)

    def _make_hook(self, p):
        def hook(*_):
            if p in self._handles and self._handles[p][0] is not None:
                if self._allreduce_delay[p] <= 0:
                    raise AssertionError(
                        "Gradients were computed more than backward_passes_per_step times "
                        "before call to step(). Increase backward_passes_per_step to "
                        "accumulate gradients locally.")
            assert not p.grad.requires_grad
            assert self._allreduce_delay[p] > 0
            handle, ctx = None, None
            self._allreduce_delay[p] -= 1
            if self._allreduce_delay[p] == 0:
                if self._groups is not None:
                    self._group_gradient_ready(p)
                    return
                handle, ctx = self._allreduce_grad_async(p)
            self._handles[p] = (handle, ctx)

        return hook

    # ---- allreduce of gradients ------------------------------------------------------------
    def _scale_factors(self):
        if self.op == Average:
            # The core divides by size() for Average; predivide splits the division.
            return 1.0 / self.gradient_predivide_factor, self.gradient_predivide_factor
        return 1.0, 1.0

    def _prepare_grad(self, p):
        if p.grad is None:
            # Not computed here (unused in this forward pass) but maybe on other ranks: zeros,
            # sparse for a parameter that had sparse gradients before (so that the ranks agree
            # on allgather versus allreduce).
            if p in self._sparse_params:
                p.grad = _empty_sparse_like(p)
            else:
                p.grad = torch.zeros_like(p)
        if p.grad.is_sparse:
            self._sparse_params.add(p)
            if self.sparse_as_dense:
                # Reduced dense, handed back sparse (in the same layout), as Horovod does.
                self._dense_of_sparse[p] = p.grad.sparse_dim()
                p.grad = p.grad.to_dense()
        return p.grad

    def _allreduce_grad_async(self, p):
        grad = self._prepare_grad(p)
        name = self._parameter_names.get(p)
        if grad.is_sparse:
            return sparse_allreduce_async(grad, name=name, op=self.op,
                                          process_set=self.process_set), "sparse"
        compressed, ctx = self._compression.compress(grad)
        pre, post = self._scale_factors()
        handle = allreduce_async_(compressed, name=name, op=self.op, prescale_factor=pre,
                                  postscale_factor=post, process_set=self.process_set)
        return handle, ctx

    def _group_gradient_ready(self, p):
        group = self._p_to_group[p]
        ready = self._group_ready[group]
        ready.add(p)
        self._handles[p] = (None, None)
        if len(ready) == len(group):
            self._start_group(group)

    def _start_group(self, group):
        grads = [self._prepare_grad(p) for p in group]
        if any(g.is_sparse for g in grads):
            raise ValueError("groups cannot hold parameters with sparse gradients; use "
                             "sparse_as_dense=True")
        compressed = [self._compression.compress(g) for g in grads]
        pre, post = self._scale_factors()
        handle = grouped_allreduce_async_(
            [c for c, _ in compressed], name=self._parameter_names[group[0]] + ".group",
            op=self.op, prescale_factor=pre, postscale_factor=post,
            process_set=self.process_set)
        shared = _GroupHandle(handle)
        for i, (p, (_, ctx)) in enumerate(zip(group, compressed)):
            self._handles[p] = ((shared, i), ctx)
        self._group_ready[group] = set()

    def _wait_plain_handles(self):
        """param -> output of its own allreduce, for every gradient reduced on its own (not
        in a group, not sparse): all waited for at once, the GIL released once."""
        params = [p for p, (handle, ctx) in self._handles.items()
                  if not isinstance(handle, tuple) and ctx != "sparse"]
        outputs = synchronize_all([self._handles[p][0] for p in params])
        return dict(zip(params, outputs))

    # ---- public API ------------------------------------------------------------------------
    def synchronize(self):
        """Waits for every gradient's allreduce (starting those not started yet) and writes
        the averaged gradients into p.grad. On a rank outside the optimizer's process set
        there is nothing to wait for (its gradients stay local), as in Horovod."""
        if not self._included:
            self._synchronized = True
            return
        if self._groups is None:
            for p in self._requires_update - set(self._handles):
                self._handles[p] = self._allreduce_grad_async(p)
            for p, (handle, _) in list(self._handles.items()):
                if handle is None:
                    self._handles[p] = self._allreduce_grad_async(p)
        else:
            for group in self._groups:
                if any(p in self._requires_update for p in group) and any(
                        p not in self._handles or self._handles[p][0] is None for p in group):
                    self._start_group(group)

        outputs = self._wait_plain_handles()
        for p, (handle, ctx) in self._handles.items():
            if isinstance(handle, tuple):  # member of a group
                output = handle[0].outputs()[handle[1]]
            elif ctx == "sparse":
                p.grad = handle()
                self._allreduce_delay[p] = self.backward_passes_per_step
                continue
            else:
                output = outputs[p]
            self._allreduce_delay[p] = self.backward_passes_per_step
            result = self._compression.decompress(output, ctx)
            if result is not p.grad:
                with torch.no_grad():
                    p.grad.set_(result)
            if p in self._dense_of_sparse:
                p.grad = p.grad.to_sparse(self._dense_of_sparse.pop(p))
        self._handles.clear()
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
        if not isinstance(passes, int) or passes < 1:
            raise ValueError("backward_passes_per_step must be a positive integer")
        self.backward_passes_per_step = passes
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = passes

    def load_state_dict(self, *args, **kwargs):
        """Loads the wrapped optimizer's state; pending gradient reductions are forgotten and
        the backward-pass count restarts, as in Horovod."""
        self._handles = {}
        self._synchronized = False
        self._should_synchronize = True
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = self.backward_passes_per_step
        for g in self._group_ready:
            self._group_ready[g] = set()
        return self._hvd_base_class.load_state_dict(self, *args, **kwargs)

    def zero_grad(self, *args, **kwargs):
        if self._handles:
            raise AssertionError("optimizer.zero_grad() was called after loss.backward() but "
                                 "before optimizer.step() or optimizer.synchronize(). This is "
                                 "prohibited as it can cause a race condition.")
        return self._hvd_base_class.zero_grad(self, *args, **kwargs)


def _empty_sparse_like(p):
    """A sparse COO gradient of p's shape with no entries, in the (rows) layout of
    nn.Embedding's gradients: one sparse dimension, dense rows."""
    return torch.sparse_coo_tensor(torch.zeros((1, 0), dtype=torch.int64, device=p.device),
                                   torch.zeros((0,) + tuple(p.shape[1:]), dtype=p.dtype,
                                               device=p.device),
                                   p.shape)


class _GroupHandle:
    """One grouped allreduce shared by the parameters of a group; waited on once."""

    def __init__(self, handle):
        self._handle = handle
        self._outputs = None

    def outputs(self):
        if self._outputs is None:
            self._outputs = synchronize(self._handle)
        return self._outputs


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none,
                         backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0,
                         num_groups=0, groups=None, sparse_as_dense=False,
                         process_set=global_process_set, staleness=0, local_sgd_period=0,
                         local_sgd_warmup_steps=0, local_sgd_average_state=False,
                         local_sgd_overlap=False):
    """Wraps a torch.optim optimizer so that gradients are averaged across ranks.

    Returns an instance of a subclass of the optimizer's class, over the same param_groups.
    Each gradient's allreduce starts during backward; step() waits for them. Gradients
    accumulate locally for backward_passes_per_step passes before being reduced.

    Semi-synchronous modes (semisync.py): staleness=s > 0 applies at each step the averaged
    gradients of s steps earlier (communication overlaps s steps; no rank more than s steps
    ahead); local_sgd_period=k > 0 steps on local gradients and averages the parameters (and,
    with local_sgd_average_state, the optimizer state) every k steps, after
    local_sgd_warmup_steps synchronous steps. Both have flush().
    """
    if op == Adasum:
        raise NotImplementedError("horovod_cpp: DistributedOptimizer(op=Adasum) is not "
                                  "supported (the core library has no Adasum)")
    if gradient_predivide_factor != 1.0 and op != Average:
        raise ValueError("gradient_predivide_factor not supported with op != Average")
    if num_groups != 0:
        warnings.warn("Parameter `num_groups` has been replaced by `groups` and will be "
                      "removed in v0.23.0.", DeprecationWarning)
        if groups is None:
            groups = num_groups
    if groups is not None:
        if isinstance(groups, bool) or not (isinstance(groups, list) or
                                            (isinstance(groups, int) and groups >= 0)):
            raise ValueError("groups should be a non-negative integer or a list of list of "
                             "torch.Tensor.")
        if isinstance(groups, list):
            seen = set()
            for g in groups:
                for p in g:
                    if not isinstance(p, torch.Tensor):
                        raise ValueError("groups must consist of torch.Tensor.")
                    if id(p) in seen:
                        raise ValueError("A parameter can only appear once in groups.")
                    seen.add(id(p))
        elif groups == 0:
            groups = None
    if not isinstance(backward_passes_per_step, int) or backward_passes_per_step < 1:
        raise ValueError("backward_passes_per_step must be a positive integer")
    _set_id(process_set)  # a registered ProcessSet (ValueError otherwise)
    if staleness or local_sgd_period:
        if groups is not None or backward_passes_per_step != 1:
            raise ValueError("staleness / local SGD do not support groups or "
                             "backward_passes_per_step > 1")
        names = {p: f"DistributedOptimizer.semisync.{name}"
                 for name, p in _checked_names(optimizer, named_parameters)}
        return make_semisync_optimizer(optimizer, names, compression, op,
                                       gradient_predivide_factor, staleness, local_sgd_period,
                                       local_sgd_warmup_steps, local_sgd_average_state,
                                       local_sgd_overlap, process_set)

    base = optimizer.__class__
    cls = type(base.__name__, (_DistributedOptimizer, base), {"_hvd_base_class": base})
    dist = cls.__new__(cls)
    base.__init__(dist, optimizer.param_groups)
    dist._hvd_setup(named_parameters, compression, backward_passes_per_step, op,
                    gradient_predivide_factor, groups, sparse_as_dense, process_set)
    return dist
