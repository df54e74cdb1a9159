"""DistributedOptimizer(op=Adasum): Horovod's delta-based Adasum optimizer for torch.

Adasum (docs/training.md, "Adasum") combines what each rank's optimizer would do on its own,
not the gradients: per parameter, once its gradient is complete (the last of
backward_passes_per_step backward passes), the gradient hook runs the wrapped optimizer's step
for that parameter alone, on this rank's gradient and this rank's optimizer state, takes the
update it made (delta = new value - old value), puts the parameter back to its old value and
starts the delta's Adasum across the ranks. step() starts the parameters whose hook did not
run, waits for every reduction and sets each parameter to old value + combined delta.

For plain SGD this is Adasum of the gradients times -lr (Adasum is homogeneous); for stateful
optimizers (momentum, Adam) it differs: each rank's state follows its own gradients.
"""

import contextlib

import torch

from .._basics import Adasum, global_process_set
from .._gradients import _TOO_MANY_PASSES, checked_names
from .mpi_ops import allreduce_async_, synchronize_all


class _DistributedAdasumOptimizer:
    """Mixed into a subclass of the wrapped optimizer's class (see make_adasum_optimizer).
    Slots number the parameters that get gradients, in param_group order."""

    _hvd_base_class = None  # the wrapped optimizer's class, set on the generated subclass

    def _hvd_adasum_setup(self, named_parameters, compression, backward_passes_per_step):
        self._compression = compression
        self.op = Adasum
        self.gradient_predivide_factor = 1.0
        self.process_set = global_process_set
        self._passes = backward_passes_per_step
        all_params = [p for group in self.param_groups for p in group["params"]]
        name_of = {p: name for name, p in checked_names(all_params, named_parameters)}
        self._params = [p for p in all_params if p.requires_grad]
        n = len(self._params)
        self._names = [f"DistributedOptimizer.adasum.{name_of[p]}" for p in self._params]
        # The param_group of each slot: its local step runs the wrapped step on it alone.
        group_of = {p: i for i, group in enumerate(self.param_groups) for p in group["params"]}
        self._group_index = [group_of[p] for p in self._params]
        self._delay = [backward_passes_per_step] * n
        self._touched = False  # a pass counted since the last step()
        # Per slot, allocated at its first step: the value before the local step (restored
        # after it) and the delta (contiguous: it is reduced in place).
        self._old = [None] * n
        self._delta = [None] * n
        self._started = {}  # slot -> (handle, compression ctx), in start order
        self._grad_accs = []
        for slot, p in enumerate(self._params):
            # The AccumulateGrad node of p: its hooks run after p.grad is updated, when every
            # use of p in this backward pass is done (so p may change).
            acc = p.expand_as(p).grad_fn.next_functions[0][0]
            acc.register_hook(self._make_hook(slot))
            self._grad_accs.append(acc)

    @property
    def backward_passes_per_step(self):
        return self._passes

    # ---- per parameter -----------------------------------------------------------------------
    def _make_hook(self, slot):
        def hook(*_):
            if self._delay[slot] <= 0:
                raise AssertionError(_TOO_MANY_PASSES)
            self._delay[slot] -= 1
            self._touched = True
            if self._delay[slot] == 0:
                self._start(slot)

        return hook

    def _start(self, slot):
        """This rank's local step of one parameter; starts the Adasum of its delta."""
        p = self._params[slot]
        old, delta = self._old[slot], self._delta[slot]
        if old is None:
            old = self._old[slot] = torch.empty_like(p, requires_grad=False)
            delta = self._delta[slot] = torch.empty(p.shape, dtype=p.dtype, device=p.device)
        with torch.no_grad():
            if p.grad is None:  # no gradient here: the wrapped step would skip p
                delta.zero_()
            else:
                old.copy_(p)
                try:
                    self._local_step(slot)
                    torch.sub(p, old, out=delta)
                finally:  # p keeps its old value until step() (also when the step failed)
                    p.copy_(old)
        compressed, ctx = self._compression.compress(delta)
        handle = allreduce_async_(compressed, name=self._names[slot], op=Adasum)
        self._started[slot] = (handle, ctx)

    def _local_step(self, slot):
        """The wrapped optimizer's step with every param_group holding only this slot's
        parameter (its own group) or nothing, so its hyperparameters and state apply."""
        groups = self.param_groups
        stashed = [group["params"] for group in groups]
        mine = self._group_index[slot]
        try:
            for i, group in enumerate(groups):
                group["params"] = [self._params[slot]] if i == mine else []
            self._hvd_base_class.step(self)
        finally:
            for group, params in zip(groups, stashed):
                group["params"] = params

    def _restart(self):
        self._delay = [self._passes] * len(self._params)
        self._touched = False
        self._started = {}

    # ---- public API ------------------------------------------------------------------------
    def step(self, closure=None):
        """Starts the deltas not started yet (a parameter without a gradient on this rank
        contributes zeros; one with fewer passes than backward_passes_per_step steps on what
        it has), waits for every Adasum and applies the combined deltas. If a reduction
        fails, the parameters keep their old values and the error is raised."""
        loss = closure() if closure is not None else None
        for slot in range(len(self._params)):
            if slot not in self._started:
                self._start(slot)
        started = list(self._started.items())
        try:
            outs = synchronize_all([handle for _, (handle, _) in started])
        finally:
            self._restart()
        decompress = self._compression.decompress
        with torch.no_grad():
            for (slot, (_, ctx)), out in zip(started, outs):
                self._params[slot].add_(decompress(out, ctx))
        return loss

    def synchronize(self):
        """Nothing to wait for before step(): the deltas are combined and applied there (as
        in Horovod's Adasum optimizer; gradients are never reduced)."""

    @contextlib.contextmanager
    def skip_synchronize(self):
        """Refused, as in Horovod: step() always combines the deltas."""
        raise AssertionError("Skipping synchronization is not supported when using Adasum "
                             "optimizer.")
        yield  # pragma: no cover (makes this a generator)

    def set_backward_passes_per_step(self, passes):
        """Changes how many backward passes accumulate locally before a parameter's local step
        and reduction (and restarts the count)."""
        if not isinstance(passes, int) or passes < 1:
            raise ValueError("backward_passes_per_step must be a positive integer")
        self._passes = passes
        self._delay = [passes] * len(self._params)

    def load_state_dict(self, *args, **kwargs):
        """Loads the wrapped optimizer's state. Reductions in flight are forgotten (their
        parameters keep their old values) and the pass count restarts; their buffers are
        dropped, so a late result cannot land in the next step's delta."""
        for slot in self._started:
            self._old[slot] = self._delta[slot] = None
        self._restart()
        return self._hvd_base_class.load_state_dict(self, *args, **kwargs)

    def zero_grad(self, *args, **kwargs):
        if self._touched:
            raise AssertionError("optimizer.zero_grad() was called after loss.backward() but "
                                 "before optimizer.step() or optimizer.synchronize(). This is "
                                 "prohibited as it can cause a race condition.")
        return self._hvd_base_class.zero_grad(self, *args, **kwargs)


def make_adasum_optimizer(optimizer, named_parameters, compression, backward_passes_per_step,
                          process_set):
    """The Adasum optimizer over `optimizer`'s param_groups: an instance of a subclass of its
    class. Adasum runs over the global process set only, as in Horovod."""
    if process_set is not global_process_set:
        raise NotImplementedError("DistributedOptimizer(op=Adasum) combines the update deltas "
                                  "over the global process set only (as in Horovod); got "
                                  f"process set {process_set.process_set_id}")
    base = optimizer.__class__
    cls = type(base.__name__, (_DistributedAdasumOptimizer, base), {"_hvd_base_class": base})
    dist = cls.__new__(cls)
    base.__init__(dist, optimizer.param_groups)
    dist._hvd_adasum_setup(named_parameters, compression, backward_passes_per_step)
    return dist
