"""The autograd side of the gradient engine, shared by DistributedOptimizer and
DistributedDataParallel: hooks on the parameters' gradient accumulators that hand each gradient
to the engine (.._gradients) or to its bucket (_buckets.py), and the write-back of the reduced
gradients into p.grad.
"""

import os

import torch

from .._basics import size
from .._gradients import GradientEngine, plan_groups
from ._buckets import Buckets, use_buckets
from ._grad_ops import TorchGradOps


class GradientSync:
    """Reduces the gradients of `params` (those with requires_grad, in order) across the
    options' process set. `names[i]` names params[i]'s reductions. `wrap(slot, hook)`, when
    given, returns the hook to register for a slot in place of `hook` (DistributedDataParallel
    gates its hooks and finishes the reduction at the end of backward)."""

    def __init__(self, params, names, options, backward_passes_per_step, cap_mb, wrap=None):
        self.params = params
        self._slot = {p: i for i, p in enumerate(params)}
        self.engine = GradientEngine(TorchGradOps, options, len(params), names=names,
                                     groups=plan_groups(options.groups, params),
                                     backward_passes_per_step=backward_passes_per_step)
        self.buckets = None
        self._grad_accs = []
        self.registered = False
        self._sparse_params = set()  # parameters seen with a sparse gradient
        # A rank outside the process set keeps its own gradients, without communicating.
        self.included = options.process_set is None or bool(options.process_set.included())
        if self.included and (size() > 1 or os.environ.get("HOROVOD_ELASTIC") == "1"):
            if use_buckets(options, cap_mb):
                self.buckets = Buckets(params, names, options, cap_mb, backward_passes_per_step,
                                       self.engine, self.grad_of)
            self._register_hooks(wrap)

    @property
    def pending(self):
        """Whether reductions were started and not yet waited for."""
        return self.engine.pending or (self.buckets is not None and self.buckets.pending)

    def _register_hooks(self, wrap):
        self.registered = True
        for p in self.params:
            # The AccumulateGrad node of p: its hooks run after p.grad is updated.
            acc = p.expand_as(p).grad_fn.next_functions[0][0]
            slot = self._slot[p]
            hook = self._make_hook(p)
            acc.register_hook(wrap(slot, hook) if wrap is not None else hook)
            self._grad_accs.append(acc)

    def _make_hook(self, p):
        slot = self._slot[p]
        engine = self.engine

        def hook(*_):
            grad = p.grad
            assert not grad.requires_grad
            # Without buckets, the common case (a dense gradient, the engine's plain options)
            # with no more Python than the count and the native call.
            if engine.plain and not grad.is_sparse:
                engine.start_plain(slot, grad)
            else:
                engine.passed(slot, self.grad_of)

        return hook if self.buckets is None else self.buckets.hook(slot, hook)

    def grad_of(self, slot):
        """The gradient of a slot to reduce. One not computed here (unused in this forward
        pass) may be computed on other ranks: zeros, sparse for a parameter that had sparse
        gradients before (so that the ranks agree on allgather versus allreduce)."""
        p = self.params[slot]
        if p.grad is None:
            p.grad = _empty_sparse_like(p) if p in self._sparse_params else torch.zeros_like(p)
        elif p.grad.is_sparse:
            self._sparse_params.add(p)
        return p.grad

    def synchronize(self):
        """Starts the reductions not started yet, waits for all of them and writes the results
        into p.grad. Nothing to do on a rank outside the process set."""
        if not self.included:
            return
        buckets = self.buckets
        if buckets is None:
            required = range(len(self.params)) if self.registered else ()
        else:
            buckets.start_rest(self.grad_of)
            required = buckets.engine_slots()
        self.engine.start(required, self.grad_of)
        try:
            if buckets is not None:
                buckets.wait()  # in place in p.grad
        finally:  # the engine's reductions are waited for also when a bucket's failed
            results = self.engine.wait()
        with torch.no_grad():
            for slot, result in results.items():
                p = self.params[slot]
                if result is p.grad:
                    continue
                if result.is_sparse or p.grad.is_sparse:
                    p.grad = result
                else:
                    p.grad.set_(result)

    def set_passes(self, passes):
        """Changes how many backward passes accumulate locally before a reduction."""
        self.engine.set_passes(passes)
        if self.buckets is not None:
            self.buckets.set_passes(passes)

    def reset(self):
        """Forgets pending reductions and restarts the backward-pass count."""
        self.engine.reset()
        if self.buckets is not None:
            self.buckets.reset()


def _empty_sparse_like(p):
    """A sparse COO gradient of p's shape with no entries, in the (rows) layout of
    nn.Embedding's gradients: one sparse dimension, dense rows."""
    return torch.sparse_coo_tensor(torch.zeros((1, 0), dtype=torch.int64, device=p.device),
                                   torch.zeros((0,) + tuple(p.shape[1:]), dtype=p.dtype,
                                               device=p.device),
                                   p.shape)
