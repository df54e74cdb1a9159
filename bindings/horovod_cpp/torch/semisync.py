"""Semi-synchronous training for horovod_cpp.torch: bounded staleness, local SGD, StepGuard.

DistributedOptimizer(..., staleness=s) and DistributedOptimizer(..., local_sgd_period=k,
local_sgd_warmup_steps=n) return an optimizer built here (optimizer.py delegates to
make_semisync_optimizer); StepGuard paces ranks that step independently. The semantics are
those of the C++ training API (docs/training.md, "Semi-synchronous training"):

* staleness s: step() copies this step's gradients, starts their allreduce and applies the
  averaged gradients of the step s steps earlier (no update during the first s steps). Waiting
  for that allreduce is the only synchronization, so no rank runs more than s steps ahead of
  the slowest, and every rank applies the same updates in the same order.
* local SGD: each rank steps on its own gradients; parameters (and optionally the optimizer's
  floating-point state) are averaged after every k-th step following n synchronous steps.
* flush(): completes what is in flight on every rank (identical parameters afterwards): call
  it on every rank at the same step before a checkpoint, and before join() at the end.
"""

import collections

import torch

from .._basics import Average, Sum
from .mpi_ops import allreduce_async, allreduce_async_, join, poll
from .mpi_ops import synchronize as _wait


class _SemiSyncOptimizer:
    """Mixed into a subclass of the wrapped optimizer's class (see make_semisync_optimizer)."""

    _hvd_base_class = None

    def _hvd_semisync_setup(self, names, compression, op, gradient_predivide_factor, staleness,
                            local_sgd_period, local_sgd_warmup_steps, local_sgd_average_state,
                            local_sgd_overlap, process_set):
        self._names = names
        self._compression = compression
        self.op = op
        self.gradient_predivide_factor = gradient_predivide_factor
        self.staleness = staleness
        self.local_sgd_period = local_sgd_period
        self.local_sgd_warmup_steps = local_sgd_warmup_steps
        self.local_sgd_average_state = local_sgd_average_state
        self.local_sgd_overlap = local_sgd_overlap
        self.process_set = process_set
        self._params = [p for g in self.param_groups for p in g["params"] if p.requires_grad]
        self._pending = collections.deque()  # staleness: (entries) oldest first
        self._submitted = 0
        self._steps = 0
        self._average = None  # local SGD with overlap: [(target, snapshot, handle)]

    # ---- gradients -------------------------------------------------------------------------
    def _submit_gradients(self, tag):
        pre, post = 1.0, 1.0
        if self.op == Average:
            pre, post = 1.0 / self.gradient_predivide_factor, self.gradient_predivide_factor
        entries = []
        for p in self._params:
            g = p.grad
            if g is None:
                g = torch.zeros_like(p)
            elif g.is_sparse:
                g = g.to_dense()
            # Our own copy: the next backward writes p.grad while this one is in flight.
            g = g.detach().clone(memory_format=torch.contiguous_format)
            compressed, ctx = self._compression.compress(g)
            h = allreduce_async_(compressed, name=f"{self._names[p]}.{tag}", op=self.op,
                                 prescale_factor=pre, postscale_factor=post,
                                 process_set=self.process_set)
            entries.append((p, h, ctx))
        return entries

    def _apply(self, entries, closure):
        for p, h, ctx in entries:
            g = self._compression.decompress(_wait(h), ctx)
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
        t = self._steps
        self._steps += 1
        if self.staleness > 0:
            slot = self._submitted % (self.staleness + 1)
            self._submitted += 1
            self._pending.append(self._submit_gradients(f"stale{slot}"))
            loss = None
            while len(self._pending) > self.staleness:
                loss = self._apply(self._pending.popleft(), closure)
            return loss
        if t < self.local_sgd_warmup_steps:
            return self._apply(self._submit_gradients("warmup"), closure)
        self._finish_average()
        loss = self._hvd_base_class.step(self, closure)
        if (t + 1 - self.local_sgd_warmup_steps) % self.local_sgd_period == 0:
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
            while self._pending:
                self._apply(self._pending.popleft(), None)
            self._submitted = 0
            return
        self._finish_average()
        self._average_now()

    @property
    def steps_taken(self):
        """Number of step() calls so far."""
        return self._steps

    def synchronize(self):
        raise RuntimeError("horovod_cpp: synchronize() is not available with staleness or "
                           "local SGD (step() does the communication); use flush()")

    def state_dict(self):
        if self._pending or self._average is not None:
            raise RuntimeError("horovod_cpp: state_dict() while semi-synchronous "
                               "communication is in flight; call flush() on every rank first "
                               "(pending delayed gradients are not part of a checkpoint)")
        return self._hvd_base_class.state_dict(self)


def checked_names(optimizer, named_parameters):
    """(name, parameter) pairs for every parameter of `optimizer`: from named_parameters
    (unique names, every parameter named) or "noname.<i>" in param_group order."""
    params = [p for g in optimizer.param_groups for p in g["params"]]
    if named_parameters is None:
        return [(f"noname.{i}", p) for i, p in enumerate(params)]
    named = list(named_parameters)
    if any(not isinstance(x, tuple) or len(x) != 2 for x in named):
        raise ValueError("named_parameters should be a sequence of tuples (name, parameter)")
    names = [n for n, _ in named]
    dups = sorted({n for n in names if names.count(n) > 1})
    if dups:
        raise ValueError("Parameter names in named_parameters must be unique. Found "
                         "duplicates: %s" % ", ".join(dups))
    ids = {id(p) for _, p in named}
    if any(id(p) not in ids for p in params):
        raise ValueError("named_parameters was specified, but one or more model parameters "
                         "were not named")
    return named


def make_semisync_optimizer(optimizer, names, compression, op, gradient_predivide_factor,
                            staleness, local_sgd_period, local_sgd_warmup_steps,
                            local_sgd_average_state, local_sgd_overlap, process_set):
    """The semi-synchronous optimizer over `optimizer`'s param_groups (see the module doc).
    `names` maps each parameter to its collective name prefix."""
    if not isinstance(staleness, int) or staleness < 0:
        raise ValueError(f"staleness must be a non-negative integer, got {staleness!r}")
    if not isinstance(local_sgd_period, int) or local_sgd_period < 0:
        raise ValueError(f"local_sgd_period must be a non-negative integer, got "
                         f"{local_sgd_period!r}")
    if not isinstance(local_sgd_warmup_steps, int) or local_sgd_warmup_steps < 0:
        raise ValueError(f"local_sgd_warmup_steps must be a non-negative integer, got "
                         f"{local_sgd_warmup_steps!r}")
    if staleness > 0 and local_sgd_period > 0:
        raise ValueError(f"staleness ({staleness}) and local_sgd_period ({local_sgd_period}) "
                         "cannot both be set; choose one semi-synchronous mode")
    base = optimizer.__class__
    cls = type(base.__name__, (_SemiSyncOptimizer, base), {"_hvd_base_class": base})
    opt = cls.__new__(cls)
    base.__init__(opt, optimizer.param_groups)
    opt._hvd_semisync_setup(names, compression, op, gradient_predivide_factor, staleness,
                            local_sgd_period, local_sgd_warmup_steps, local_sgd_average_state,
                            local_sgd_overlap, process_set)
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
