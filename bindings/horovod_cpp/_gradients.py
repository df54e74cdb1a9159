"""The gradient engine under every Python frontend: what to reduce, how, in which groups and
with which scaling.

The torch DistributedOptimizer, TensorFlow's DistributedGradientTape and tf.compat.v1
DistributedOptimizer, and the Keras DistributedOptimizer keep only framework glue: when
gradients exist, where the results go. Everything Horovod's options decide is here, once:

* the options themselves (gradient_predivide_factor only with Average,
  groups / num_groups, unique parameter names);
* the scaling: Average with a predivide factor f reduces x/f and multiplies the average by f;
* pass counting (backward_passes_per_step) and group readiness;
* sparse gradients: gathered (allgather of rows and indices) unless sparse_as_dense, then
  reduced dense and handed back in their own layout;
* compression around every dense allreduce.

It imports no framework: the tensors are handled through a small "tensor ops" object the
frontend passes in (torch/_grad_ops.py, tensorflow/gradients.py), with these methods; the
collectives are called with Horovod's keyword arguments (name, op, prescale_factor,
postscale_factor, process_set), so a frontend's public functions serve as they are:

    is_sparse(g)                   -> bool
    densify(g)                     -> (dense tensor, layout for restore)
    restore(dense, layout)         -> the result in the gradient's own layout
    allreduce(t, **kw)             -> handle of an in-place (or new) reduction of t
    grouped_allreduce(ts, **kw)    -> handle of one reduction of the list ts
    sparse_allreduce(g, **kw)      -> handle of a gathered sparse g (no scale factors)
    wait(handles)        -> outputs of single allreduces (all waited for at once)
    wait_group(handle)   -> list of outputs of one grouped allreduce
    wait_sparse(handle)  -> output of one sparse allreduce
    allreduce_plain(t, name, op, prescale, postscale, process_set)   (optional)
                         -> handle of an in-place reduction of t, the arguments positional

A frontend whose ops have allreduce_plain and that calls passed() once per gradient (torch)
may take the engine's common case itself: while `plain` is true (no groups, one backward pass
per step, no compression), start_plain(slot, grad) starts a dense gradient's reduction with no
more Python work than the count and the native call, and wait() waits for all of them with
one call; anything else (a sparse gradient, another option) goes through passed().

A synchronous framework (TensorFlow builds ops) returns the output as the handle and waits
trivially.
"""

import warnings

from ._basics import Average
from ._compression import NoneCompressor

# How a started gradient is waited for.
_SINGLE, _GROUP, _SPARSE = 0, 1, 2

_TOO_MANY_PASSES = ("Gradients were computed more than backward_passes_per_step times before "
                    "call to step(). Increase backward_passes_per_step to accumulate gradients "
                    "locally.")


def check_reduce_options(op, gradient_predivide_factor):
    """Horovod's refusals for the reduction options of a distributed optimizer or tape."""
    if gradient_predivide_factor != 1.0 and op != Average:
        raise ValueError("gradient_predivide_factor not supported with op != Average")


def reduction_scales(op, gradient_predivide_factor):
    """(prescale, postscale) of a gradient allreduce: Average with a predivide factor f
    divides by f before the sum and multiplies by f after it (the core divides by the set's
    size for Average, so the product is the plain average)."""
    if op == Average and gradient_predivide_factor != 1.0:
        f = float(gradient_predivide_factor)
        return 1.0 / f, f
    return 1.0, 1.0


def fold_num_groups(groups, num_groups):
    """The deprecated num_groups argument folded into groups, as Horovod does."""
    if num_groups:
        warnings.warn("Parameter `num_groups` has been replaced by `groups` and will be "
                      "removed in v0.23.0.", DeprecationWarning, stacklevel=3)
        if groups is None:
            groups = num_groups
    return groups


def check_groups(groups, is_tensor, kind):
    """groups as Horovod accepts it: None, a non-negative int (0: no groups) or a list of
    lists of `kind` (each tensor at most once). Returns None, an int > 0 or the list."""
    if groups is None:
        return None
    if isinstance(groups, bool) or not (isinstance(groups, list) or
                                        (isinstance(groups, int) and groups >= 0)):
        raise ValueError(f"groups should be a non-negative integer or a list of list of "
                         f"{kind}.")
    if isinstance(groups, int):
        return groups or None
    seen = set()
    for g in groups:
        for t in g:
            if not is_tensor(t):
                raise ValueError(f"groups must consist of {kind}.")
            if id(t) in seen:
                raise ValueError("A parameter can only appear once in groups.")
            seen.add(id(t))
    return groups


def split_evenly(items, n):
    """`items` cut into n contiguous chunks whose lengths differ by at most one (fewer when
    there are fewer items)."""
    n = max(1, min(n, len(items))) if items else 1
    q, r = divmod(len(items), n)
    out, start = [], 0
    for i in range(n):
        end = start + q + (1 if i < r else 0)
        out.append(items[start:end])
        start = end
    return [c for c in out if c]


def plan_groups(groups, objects):
    """None (every gradient on its own) or tuples of positions into `objects` reduced
    together: groups=n cuts the objects into n contiguous groups; lists of objects keep the
    listed ones that are among `objects`, and every object not listed is a group of its own."""
    if groups is None:
        return None
    if isinstance(groups, int):
        return [tuple(c) for c in split_evenly(list(range(len(objects))), groups)]
    position = {id(o): i for i, o in enumerate(objects)}
    out, listed = [], set()
    for g in groups:
        idx = tuple(position[id(o)] for o in g if id(o) in position)
        listed.update(idx)
        if idx:
            out.append(idx)
    out.extend((i,) for i in range(len(objects)) if i not in listed)
    return out


def checked_names(params, named_parameters):
    """(name, parameter) pairs for every parameter in `params`: from named_parameters
    (unique names, every parameter named) or "noname.<i>" in order."""
    if named_parameters is None:
        return [(f"noname.{i}", p) for i, p in enumerate(params)]
    named = list(named_parameters)
    if any(not isinstance(x, tuple) or len(x) != 2 for x in named):
        raise ValueError("named_parameters should be a sequence of tuples (name, parameter), "
                         "usually produced by model.named_parameters().")
    names = [n for n, _ in named]
    dups = sorted({n for n in names if names.count(n) > 1})
    if dups:
        raise ValueError("Parameter names in named_parameters must be unique. Found "
                         "duplicates: %s" % ", ".join(dups))
    ids = {id(p) for _, p in named}
    unnamed = [id(p) for p in params if id(p) not in ids]
    if unnamed:
        raise ValueError("named_parameters was specified, but one or more model parameters "
                         "were not named. Python object ids: %s"
                         % ", ".join(str(i) for i in unnamed))
    return named


class ReduceOptions:
    """Horovod's reduction options of one optimizer or tape, checked once."""

    def __init__(self, op=Average, gradient_predivide_factor=1.0, compression=NoneCompressor,
                 sparse_as_dense=False, groups=None, process_set=None):
        check_reduce_options(op, gradient_predivide_factor)
        self.op = op
        self.gradient_predivide_factor = gradient_predivide_factor
        self.compression = compression
        self.sparse_as_dense = bool(sparse_as_dense)
        self.groups = groups
        self.process_set = process_set
        self.prescale, self.postscale = reduction_scales(op, gradient_predivide_factor)


class GradientEngine:
    """Reduces the gradients of a fixed list of slots (one per parameter, numbered from 0).

    Asynchronous use (torch): passed(slot, grad_of) after each backward pass of a slot
    starts its reduction (alone, or its group's once every member is due) when
    backward_passes_per_step passes are counted; finish(required, grad_of) starts what is
    left and returns {slot: result}. Synchronous use (TensorFlow): reduce(grads).
    grad_of(slot) returns the slot's gradient to reduce (the frontend fills a missing one).
    """

    def __init__(self, ops, options, count, names=None, groups=None,
                 backward_passes_per_step=1):
        self._ops = ops
        self._opt = options
        self._names = names if names is not None else [None] * count
        self._groups = groups                   # None or tuples of slots (plan_groups)
        self._group_of = {}
        for g in groups or ():
            for s in g:
                self._group_of[s] = g
        self.backward_passes_per_step = backward_passes_per_step
        self._count = count
        self._delay = [backward_passes_per_step] * count
        self._started = {}                      # slot -> (kind, handle, ctx, layout)
        self._touched = set()                   # slots with a pass counted since finish()
        self._ready = {g: set() for g in groups or ()}
        # start_plain's reductions: slots and handles in start order (disjoint from _started).
        self._plain_slots = []
        self._plain_handles = []
        self._plain_submit = getattr(ops, "allreduce_plain", None)
        self._plain_args = (options.op, options.prescale, options.postscale,
                            options.process_set)
        self.plain = False
        self._update_plain()

    def _update_plain(self):
        # The compressor is a class (Horovod's Compression.none is NoneCompressor itself).
        self.plain = (self._plain_submit is not None and self._groups is None and
                      self.backward_passes_per_step == 1 and
                      self._opt.compression is NoneCompressor)

    # ---- state ---------------------------------------------------------------------------
    @property
    def pending(self):
        """Whether a gradient has been counted or started since the last finish()."""
        return bool(self._touched or self._started or self._plain_slots)

    def set_passes(self, passes):
        """Changes backward_passes_per_step and restarts every count."""
        if not isinstance(passes, int) or passes < 1:
            raise ValueError("backward_passes_per_step must be a positive integer")
        self.backward_passes_per_step = passes
        self._delay = [passes] * self._count
        self._update_plain()

    def reset(self):
        """Forgets the reductions in flight and restarts every count (after a state load)."""
        self._started = {}
        self._touched = set()
        self._plain_slots = []
        self._plain_handles = []
        self._delay = [self.backward_passes_per_step] * self._count
        for g in self._ready:
            self._ready[g] = set()

    # ---- starting --------------------------------------------------------------------------
    def passed(self, slot, grad_of):
        """One backward pass of `slot` is done: counts it, and starts the reduction when
        backward_passes_per_step passes are counted."""
        if self._delay[slot] <= 0:
            raise AssertionError(_TOO_MANY_PASSES)
        self._delay[slot] -= 1
        self._touched.add(slot)
        if self._delay[slot] > 0:
            return
        if self._groups is None:
            self._start_one(slot, grad_of(slot))
            return
        group = self._group_of[slot]
        ready = self._ready[group]
        ready.add(slot)
        if len(ready) == len(group):
            self._start_group(group, grad_of)

    def start_plain(self, slot, grad):
        """passed(slot, ...) of a dense gradient `grad` while `plain` is true: counts the pass
        and starts its in-place reduction, as passed() would, with nothing else."""
        if self._delay[slot] <= 0:
            raise AssertionError(_TOO_MANY_PASSES)
        self._delay[slot] = 0
        self._plain_handles.append(self._plain_submit(grad, self._names[slot], *self._plain_args))
        self._plain_slots.append(slot)

    def start_now(self, slot, grad):
        """Starts the reduction of `grad` for `slot` now, its passes counted by the frontend
        (torch's buckets hand a gradient that turned out sparse over to the engine)."""
        self._touched.add(slot)
        self._start_one(slot, grad)

    def _dense(self, grad):
        """(tensor to reduce, layout) where sparse_as_dense turns a sparse gradient dense."""
        if self._opt.sparse_as_dense and self._ops.is_sparse(grad):
            return self._ops.densify(grad)
        return grad, None

    def _start_one(self, slot, grad):
        grad, layout = self._dense(grad)
        o, ops = self._opt, self._ops
        if ops.is_sparse(grad):
            h = ops.sparse_allreduce(grad, name=self._names[slot], op=o.op,
                                     process_set=o.process_set)
            self._started[slot] = (_SPARSE, h, None, None)
            return
        compressed, ctx = o.compression.compress(grad)
        h = ops.allreduce(compressed, name=self._names[slot], op=o.op, prescale_factor=o.prescale,
                          postscale_factor=o.postscale, process_set=o.process_set)
        self._started[slot] = (_SINGLE, h, ctx, layout)

    def _start_group(self, group, grad_of):
        """One grouped allreduce of the group's dense gradients; its sparse ones (without
        sparse_as_dense) are gathered on their own."""
        o, ops = self._opt, self._ops
        dense = []
        for slot in group:
            grad, layout = self._dense(grad_of(slot))
            if ops.is_sparse(grad):
                self._start_one(slot, grad)
            else:
                compressed, ctx = o.compression.compress(grad)
                dense.append((slot, compressed, ctx, layout))
        if dense:
            first = self._names[dense[0][0]]
            h = ops.grouped_allreduce([c for _, c, _, _ in dense],
                                      name=None if first is None else first + ".group",
                                      op=o.op, prescale_factor=o.prescale,
                                      postscale_factor=o.postscale, process_set=o.process_set)
            shared = _Shared(ops, h)
            for i, (slot, _, ctx, layout) in enumerate(dense):
                self._started[slot] = (_GROUP, (shared, i), ctx, layout)
        self._ready[group] = set()

    # ---- finishing ---------------------------------------------------------------------------
    def start(self, required, grad_of):
        """Starts the reduction of every slot in `required` (or counted) not started yet (the
        whole group of one)."""
        if len(self._started) + len(self._plain_slots) == self._count:
            return  # every slot started (the steady state of a step)
        required = self._touched.union(required)
        if self._groups is None:
            for slot in sorted(required - self._started.keys() - set(self._plain_slots)):
                self._start_one(slot, grad_of(slot))
        else:
            for g in self._groups:
                if any(s in required for s in g) and any(s not in self._started for s in g):
                    self._start_group(g, grad_of)

    def finish(self, required, grad_of):
        """start(required, grad_of), then waits for every reduction started and returns
        {slot: result}; the counts restart."""
        self.start(required, grad_of)
        return self.wait()

    def wait(self):
        """Waits for every reduction started and returns {slot: result}; the counts
        restart."""
        o, ops = self._opt, self._ops
        plain = self._plain_slots
        singles = [s for s, e in self._started.items() if e[0] == _SINGLE]
        # One wait for every single reduction, start_plain's first.
        every = ops.wait(self._plain_handles + [self._started[s][1] for s in singles]) \
            if plain or singles else []
        results = dict(zip(plain, every))  # in place, no compression: the outputs as they are
        outputs = dict(zip(singles, every[len(plain):]))
        for slot, (kind, h, ctx, layout) in self._started.items():
            if kind == _SPARSE:
                results[slot] = ops.wait_sparse(h)
                continue
            out = outputs[slot] if kind == _SINGLE else h[0].outputs()[h[1]]
            out = o.compression.decompress(out, ctx)
            results[slot] = out if layout is None else ops.restore(out, layout)
        passes = self.backward_passes_per_step
        if self._touched.issubset(self._started.keys()):
            # Every counted slot started (always after start()): all counts restart at once.
            self._delay = [passes] * self._count
        else:
            for slot in self._started:
                self._delay[slot] = passes
            for slot in plain:
                self._delay[slot] = passes
        self._started = {}
        self._touched = set()
        self._plain_slots = []
        self._plain_handles = []
        return results

    def reduce(self, grads):
        """Every gradient reduced now (no pass counting): the list of results in order."""
        results = self.finish(range(len(grads)), grads.__getitem__)
        return [results[i] for i in range(len(grads))]


class _Shared:
    """One grouped allreduce shared by the slots of a group; waited for once."""

    def __init__(self, ops, handle):
        self._ops = ops
        self._handle = handle
        self._outputs = None

    def outputs(self):
        if self._outputs is None:
            self._outputs = self._ops.wait_group(self._handle)
        return self._outputs
