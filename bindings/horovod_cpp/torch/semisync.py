"""Semi-synchronous training for horovod_cpp.torch: bounded staleness, local SGD, StepGuard.

DistributedOptimizer(..., staleness=s) and DistributedOptimizer(..., local_sgd_period=k,
local_sgd_warmup_steps=n) return an optimizer built here (optimizer.py delegates to
make_semisync_optimizer); StepGuard paces ranks that step independently. What each step does
is decided by the framework-free schedule (.._semisync); this module does the tensor work:

* staleness s: step() copies this step's gradients, starts their allreduce and applies the
  averaged gradients of the step s steps earlier (no update during the first s steps). Waiting
  for that allreduce is the only synchronization, so no rank runs more than s steps ahead of
  the slowest, and every rank applies the same updates in the same order.
* local SGD: each rank steps on its own gradients; parameters (and optionally the optimizer's
  floating-point state) are averaged after every k-th step following n synchronous steps.
* flush(): completes what is in flight on every rank (identical parameters afterwards): call
  it on every rank at the same step before a checkpoint, and before join() at the end.
"""

import torch

from .._basics import Average, Sum
from .._gradients import GradientEngine
from .._semisync import STALE, WARMUP, SemiSyncSchedule
from ._grad_ops import TorchGradOps
from .mpi_ops import allreduce_async, allreduce_async_, join, poll
from .mpi_ops import synchronize as _wait


class _SemiSyncOptimizer:
    """Mixed into a subclass of the wrapped optimizer's class (see make_semisync_optimizer)."""

    _hvd_base_class = None

    def _hvd_semisync_setup(self, names, options, schedule, local_sgd_average_state,
                            local_sgd_overlap):
        self._names = names
        self._options = options
        self.op = options.op
        self.gradient_predivide_factor = options.gradient_predivide_factor
        self._schedule = schedule
        self.staleness = schedule.staleness
        self.local_sgd_period = schedule.local_sgd_period
        self.local_sgd_warmup_steps = schedule.local_sgd_warmup_steps
        self.local_sgd_average_state = local_sgd_average_state
        self.local_sgd_overlap = local_sgd_overlap
        self.process_set = options.process_set
        self._params = [p for g in self.param_groups for p in g["params"] if p.requires_grad]
        self._average = None  # local SGD with overlap: [(target, snapshot, handle)]

    # ---- gradients -------------------------------------------------------------------------
    def _submit_gradients(self, tag):
        """Starts the reduction of this step's gradients (names suffixed with `tag`); the
        engine that holds them is waited for by _apply()."""
        names = [f"{self._names[p]}.{tag}" for p in self._params]
        engine = GradientEngine(TorchGradOps, self._options, len(self._params), names=names)
        engine.start(range(len(self._params)), self._gradient_copy)
        return engine

    def _gradient_copy(self, slot):
        """Our own dense copy of a slot's gradient (zeros when there is none): the next
        backward writes p.grad while this one is in flight."""
        p = self._params[slot]
        g = p.grad
        if g is None:
            return torch.zeros_like(p)
        if g.is_sparse:
            g = g.to_dense()
        return g.detach().clone(memory_format=torch.contiguous_format)

    def _apply(self, engine, closure):
        for slot, g in sorted(engine.wait().items()):
            p = self._params[slot]
            if p.grad is None or p.grad.is_sparse or p.grad.shape != g.shape:
                p.grad = g
            else:
                with torch.no_grad():
                    p.grad.copy_(g)
        return self._hvd_base_class.step(self, closure)

    # ---- local SGD -------------------------------------------------------------------------
    def _averaged_tensors(self):
        out = [(self._names[p] + ".param", p.data) for p in self._params]
        if self.local_sgd_average_state:
            for p in self._params:
                st = self.state.get(p, {})
                for key in sorted(st):
                    v = st[key]
                    if torch.is_tensor(v) and v.is_floating_point() and v.dim() > 0:
                        out.append((f"{self._names[p]}.state.{key}", v))
        return out

    def _average_now(self):
        hs = [(t, allreduce_async_(t, name=f"{n}.local_sgd", op=Average,
                                   process_set=self.process_set))
              for n, t in self._averaged_tensors()]
        for t, h in hs:
            _wait(h)

    def _start_average(self):
        self._average = []
        for n, t in self._averaged_tensors():
            snap = t.detach().clone()
            h = allreduce_async(snap, name=f"{n}.local_sgd", op=Average,
                                process_set=self.process_set)
            self._average.append((t, snap, h))

    def _finish_average(self):
        if self._average is None:
            return
        with torch.no_grad():
            for t, snap, h in self._average:
                mean = _wait(h)
                t.copy_(mean + (t - snap))  # the average plus this rank's progress since
        self._average = None

    # ---- public API ------------------------------------------------------------------------
    def step(self, closure=None):
        kind, arg = self._schedule.next_step()
        if kind == STALE:
            loss = None
            for entries in self._schedule.submitted(self._submit_gradients(arg)):
                loss = self._apply(entries, closure)
            return loss
        if kind == WARMUP:
            return self._apply(self._submit_gradients(arg), closure)
        self._finish_average()
        loss = self._hvd_base_class.step(self, closure)
        if arg:
            if self.local_sgd_overlap:
                self._start_average()
            else:
                self._average_now()
        return loss

    def flush(self):
        """Completes every pending communication on this rank, in order: applies the delayed
        updates (staleness) or averages the parameters now (local SGD). Call on every rank at
        the same step; afterwards the parameters are identical everywhere."""
        if self.staleness > 0:
            for entries in self._schedule.drain():
                self._apply(entries, None)
            return
        self._finish_average()
        self._average_now()

    @property
    def steps_taken(self):
        """Number of step() calls so far."""
        return self._schedule.steps

    def synchronize(self):
        raise RuntimeError("horovod_cpp: synchronize() is not available with staleness or "
                           "local SGD (step() does the communication); use flush()")

    def state_dict(self):
        if self._schedule.pending or self._average is not None:
            raise RuntimeError("horovod_cpp: state_dict() while semi-synchronous "
                               "communication is in flight; call flush() on every rank first "
                               "(pending delayed gradients are not part of a checkpoint)")
        return self._hvd_base_class.state_dict(self)


def make_semisync_optimizer(optimizer, names, options, staleness, local_sgd_period,
                            local_sgd_warmup_steps, local_sgd_average_state, local_sgd_overlap):
    """The semi-synchronous optimizer over `optimizer`'s param_groups (see the module doc).
    `names` maps each parameter to its collective name prefix; `options` are the checked
    reduction options (.._gradients.ReduceOptions)."""
    schedule = SemiSyncSchedule(staleness, local_sgd_period, local_sgd_warmup_steps)
    base = optimizer.__class__
    cls = type(base.__name__, (_SemiSyncOptimizer, base), {"_hvd_base_class": base})
    opt = cls.__new__(cls)
    base.__init__(opt, optimizer.param_groups)
    opt._hvd_semisync_setup(names, options, schedule, local_sgd_average_state,
                            local_sgd_overlap)
    return opt


class StepGuard:
    """Keeps this rank at most `staleness` steps ahead of the slowest rank (stale-synchronous
    pacing, like a SemiSyncRunHook). Call step() at the start of every training step: it
    announces the step with a one-element allreduce and waits only for the announcement made
    `staleness` steps earlier, so a rank that is not ahead never blocks. staleness=0 is a
    barrier per step. A rank with no more steps calls finish() (it joins: until every rank
    has finished it answers the others' announcements with zeros, so they never block on it).
    Every rank must call finish() (or hvd.join()) at the end."""

    def __init__(self, staleness, name="StepGuard"):
        if not isinstance(staleness, int) or staleness < 0:
            raise ValueError(f"StepGuard: staleness must be a non-negative integer, got "
                             f"{staleness!r}")
        self.staleness = staleness
        self.name = name
        self._period = staleness + 1
        self._handles = [None] * self._period
        self._steps = 0
        self._known = 0
        self._finished = False

    def step(self):
        """Starts step steps (0-based) and returns its index, after waiting while this rank
        is more than `staleness` steps ahead of the slowest."""
        if self._finished:
            raise RuntimeError(f"StepGuard '{self.name}': step() after finish()")
        t = self._steps
        slot = t % self._period
        self._handles[slot] = allreduce_async_(torch.ones(1, dtype=torch.int64),
                                               name=f"{self.name}.{slot}", op=Sum)
        self._steps += 1
        must = t - self.staleness
        if must >= self._known:
            self._take(must)
        while self._known < self._steps and poll(self._handles[self._known % self._period]):
            self._take(self._known)
        return t

    def _take(self, step):
        slot = step % self._period
        _wait(self._handles[slot])
        self._handles[slot] = None
        self._known = step + 1

    def finish(self):
        """This rank has no more steps: waits for its own announcements (made by every rank
        by then, or answered by ranks that joined), then joins. Returns the last rank to
        join."""
        self._finished = True
        # Our announcements first: they complete once every rank has made them or joined, so
        # nothing of ours is in flight when we join.
        for s in range(self._known, self._steps):
            self._take(s)
        return join()

    @property
    def steps(self):
        """Number of step() calls so far."""
        return self._steps

    @property
    def slowest_started(self):
        """A lower bound of the number of steps every (not joined) rank has started."""
        return self._known
