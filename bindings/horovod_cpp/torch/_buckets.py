"""DistributedOptimizer's buckets: its gradients reduced in a few grouped allreduces per step.

The parameters are cut ONCE, at construction, into buckets: contiguous runs in reverse
registration order (the order backward computes gradients, as DistributedDataParallel
assumes), of one dtype and device, up to a byte cap (the first one smaller, so that the first
exchange starts early in backward). The cut depends only on the parameter list, so it is the
same on every rank; a bucket's tensors carry their parameters' names, which every rank gives
alike. A hook counts one backward pass of its parameter; when a bucket's last pass arrives,
its one grouped allreduce (in place in the p.grad tensors; negotiated as a unit, so ranks may
complete buckets in different orders) starts. synchronize() starts the buckets not complete
(a parameter without a gradient on this rank: zeros) and waits for all of them at once.

A parameter whose gradient turns out sparse leaves its bucket for good (the engine's path
gathers it); a gradient that is not a plain CPU tensor (non-contiguous, CUDA) goes through
the general grouped path (copied, copied back). Options a bucket cannot honour (groups,
compression, Adasum) keep the per-parameter engine: see use_buckets().
"""

import os

from .. import _C
from .._basics import Adasum, _op_value, _set_id
from .._compression import NoneCompressor
from .._gradients import _TOO_MANY_PASSES
from .mpi_ops import _grouped_allreduce_general, _grouped_plain, synchronize_all

#: Default byte cap of a bucket (MiB), DistributedDataParallel's bucket_cap_mb.
DEFAULT_BUCKET_CAP_MB = 25.0
#: Cap of the first bucket (MiB): small, so that the first exchange overlaps backward.
FIRST_BUCKET_CAP_MB = 1.0


def resolve_cap_mb(value):
    """The byte cap in MiB: `value` when given, else HOROVOD_BUCKET_CAP_MB, else 25. 0 turns
    buckets off (one allreduce per parameter, started by its hook)."""
    if value is None:
        value = os.environ.get("HOROVOD_BUCKET_CAP_MB", DEFAULT_BUCKET_CAP_MB)
    try:
        cap = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"bucket_cap_mb must be a number of MiB, got {value!r}") from None
    if cap < 0:
        raise ValueError(f"bucket_cap_mb must be >= 0, got {value!r}")
    return cap


def use_buckets(options, cap_mb):
    """Whether the optimizer's options allow buckets: not with explicit groups (they are the
    user's own grouping), compression (a compressor per tensor), Adasum (not an elementwise
    fold of a group), or a cap of 0."""
    return (cap_mb > 0 and options.groups is None and
            options.compression is NoneCompressor and options.op != Adasum)


def plan_buckets(params, cap_bytes, first_cap_bytes):
    """Lists of positions into `params`: reverse order, cut where the dtype or device
    changes or where the next parameter would pass the cap (a parameter larger than the cap
    is a bucket of its own)."""
    buckets, current, size, key = [], [], 0, None
    for i in reversed(range(len(params))):
        p = params[i]
        nbytes = p.numel() * p.element_size()
        cap = first_cap_bytes if not buckets else cap_bytes
        k = (p.dtype, p.device)
        if current and (k != key or size + nbytes > cap):
            buckets.append(current)
            current, size = [], 0
        current.append(i)
        size += nbytes
        key = k
    if current:
        buckets.append(current)
    return buckets


class Buckets:
    """The buckets of one optimizer: per-slot pass counts, per-bucket counts of passes left,
    the handles started this step."""

    def __init__(self, params, names, options, cap_mb, passes, engine, grad_of):
        self._params = params
        self._engine = engine
        self._grad_of = grad_of  # the optimizer's: records parameters with sparse gradients
        cap = int(cap_mb * (1 << 20))
        plan = plan_buckets(params, cap, min(cap, int(FIRST_BUCKET_CAP_MB * (1 << 20))))
        self._names = names
        self._args = (_op_value(options.op), float(options.prescale),
                      float(options.postscale), _set_id(options.process_set))
        self._members = [list(b) for b in plan]
        self._bucket_of = [-1] * len(params)  # -1: the engine's slot (a sparse gradient)
        for b, slots in enumerate(self._members):
            for s in slots:
                self._bucket_of[s] = b
        self._group = [None] * len(plan)      # (parameters, GroupNames) per bucket
        for b in range(len(plan)):
            self._regroup(b)
        self._handles = []
        self._engine_slots = []
        # Restarted in place (set_passes, wait), so that the hooks hold the lists themselves.
        self._delay, self._full, self._left = [], [], []
        self.set_passes(passes)

    def _regroup(self, b):
        """Bucket b's parameters and native names, from its slots (at construction, and when
        a slot leaves the bucket)."""
        slots = self._members[b]
        self._group[b] = ([self._params[s] for s in slots],
                          _C.GroupNames([self._names[s] for s in slots]))

    # ---- state ---------------------------------------------------------------------------
    def set_passes(self, passes):
        """backward_passes_per_step changed (or first set): every count restarts."""
        self._passes = passes
        self._handles = []
        self._delay[:] = [passes] * len(self._params)
        self._full[:] = [passes * len(m) for m in self._members]
        self._left[:] = self._full

    def reset(self):
        """Forgets the reductions in flight and restarts every count (after a state load)."""
        self.set_passes(self._passes)

    @property
    def pending(self):
        """Whether a pass was counted or a bucket started since the last wait()."""
        return bool(self._handles) or self._left != self._full

    def engine_slots(self):
        """The slots the engine reduces (not in any bucket)."""
        return self._engine_slots

    # ---- starting ------------------------------------------------------------------------
    def hook(self, slot, other):
        """The hook of `slot`'s gradient accumulator: counts a pass, starts the bucket on its
        last one; other() when the slot left the buckets."""
        bucket_of, group, start = self._bucket_of, self._group, self._start
        delay, left = self._delay, self._left

        def hook(*_):
            b = bucket_of[slot]
            if b < 0:
                return other()
            d = delay[slot]
            if d <= 0:
                raise AssertionError(_TOO_MANY_PASSES)
            delay[slot] = d - 1
            n = left[b] - 1
            left[b] = n
            if n == 0:
                start(b, [p.grad for p in group[b][0]])

        return hook

    def _start(self, b, grads):
        self._left[b] = -1  # started: not started again by start_rest()
        h = _grouped_plain(grads, self._group[b][1], *self._args)
        if h is NotImplemented:
            h = self._start_general(b, grads)
        if h is not None:
            self._handles.append(h)

    def _start_general(self, b, grads):
        """A bucket with a gradient that is not a plain CPU tensor: sparse ones leave the
        bucket for good and go to the engine (gathered there); the rest is one general
        grouped allreduce. Returns its handle (None when nothing is left)."""
        slots = self._members[b]
        sparse = [i for i, g in enumerate(grads) if g.is_sparse]
        if sparse:
            for i in sparse:
                self._bucket_of[slots[i]] = -1
                self._engine_slots.append(slots[i])
                self._engine.start_now(slots[i], self._grad_of(slots[i]))
            keep = [i for i in range(len(slots)) if i not in set(sparse)]
            self._members[b] = [slots[i] for i in keep]
            grads = [grads[i] for i in keep]
            self._full[b] = self._passes * len(keep)
            self._regroup(b)
            slots = self._members[b]
        if not grads:
            return None
        return _grouped_allreduce_general(grads, True, [self._names[s] for s in slots],
                                          *self._args)

    def start_rest(self, grad_of):
        """Starts every bucket not started yet (grad_of(slot) fills a missing gradient)."""
        for b, n in enumerate(self._left):
            if n > 0 and self._members[b]:
                self._start(b, [grad_of(s) for s in self._members[b]])

    def wait(self):
        """Waits for every bucket started (results in place in the gradients); the counts
        restart, also when a reduction failed (its error is raised)."""
        handles, self._handles = self._handles, []
        self._delay[:] = [self._passes] * len(self._params)
        self._left[:] = self._full
        if handles:
            synchronize_all(handles)

