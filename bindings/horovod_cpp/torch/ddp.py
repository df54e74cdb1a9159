"""DistributedDataParallel: torch's DDP module wrapper, on horovod_cpp's gradient engine.

    model = hvd.DistributedDataParallel(model)      # was: torch.nn.parallel.DistributedDataParallel
    loss_fn(model(x), y).backward()                 # p.grad is the average over the ranks here
    optimizer.step()                                # any torch.optim optimizer, unwrapped

Not in Horovod: for programs written for DDP. At construction the module's parameters and
buffers take the values of the process set's first rank. Each forward pass (with gradients
enabled) first broadcasts the buffers from that rank (`broadcast_buffers`). During backward the
gradients are reduced in buckets (GradientSync, the same engine as DistributedOptimizer) and,
as in DDP, when `loss.backward()` returns every p.grad holds the average: the wait runs in a
callback at the end of the backward pass. `no_sync()` accumulates gradients locally.
"""

import collections
import contextlib
import itertools

import torch
from torch.autograd import Variable

from .._basics import Average, Sum, _set_id, global_process_set, rank
from .._gradients import ReduceOptions, check_reduce_options
from ._buckets import resolve_cap_mb
from ._group_sets import process_set_of
from ._grad_sync import GradientSync
from .compression import Compression
from .functions import broadcast_parameters
from .mpi_ops import allreduce_async, broadcast_async_, synchronize
from .mpi_ops import join as hvd_join

def _state(module):
    """The (name, tensor) pairs of a module's parameters and buffers."""
    return list(itertools.chain(module.named_parameters(), module.named_buffers()))


#: Numbers the wrappers of a process in creation order: every rank creates its wrappers in
#: the same order, so the reductions of two wrapped modules never share a name.
_instances = collections.defaultdict(itertools.count)  # set id -> count of wrappers


class DistributedDataParallel(torch.nn.Module):
    """torch.nn.parallel.DistributedDataParallel's interface over horovod_cpp.

    module: the model, on one device (CPU, or the GPU of this rank's local rank).
    device_ids / output_device / dim: as in DDP for a single-device module (at most one
    device id, which must be where the module's parameters are); the outputs are the module's.
    broadcast_buffers: broadcast the buffers from the first rank at each forward pass.
    bucket_cap_mb: the gradients' buckets (None: HOROVOD_BUCKET_CAP_MB, else 25, as DDP).
    find_unused_parameters: a parameter without a gradient in a pass is always handled (its
    reduction gets zeros from this rank); with True, as in DDP, one that got no gradient on any
    rank keeps p.grad None (an allreduce of the used flags per pass), else it gets zeros.
    gradient_as_bucket_view, static_graph, check_reduction: accepted, no effect here.
    process_group: None, or a group of torch.distributed's "horovod_cpp" backend (made on its
    members only, as torch's DDP is): its process set is used. Or give process_set= (made on
    every rank; those outside the set keep their gradients local).
    compression, op (Average or Sum), gradient_predivide_factor: as in DistributedOptimizer.
    """

    def __init__(self, module, device_ids=None, output_device=None, dim=0,
                 broadcast_buffers=True, process_group=None, bucket_cap_mb=None,
                 find_unused_parameters=False, check_reduction=False,
                 gradient_as_bucket_view=False, static_graph=False,
                 process_set=global_process_set, compression=Compression.none, op=Average,
                 gradient_predivide_factor=1.0):
        super().__init__()
        process_set = process_set_of("DistributedDataParallel", process_group, process_set)
        if device_ids is not None and len(device_ids) > 1:
            raise ValueError(f"DistributedDataParallel(device_ids={list(device_ids)}): one "
                             "device per process (pin it by hvd.local_rank())")
        devices = {p.device for p in module.parameters()}
        if device_ids:
            want = torch.device(device_ids[0]) if not isinstance(device_ids[0], int) else \
                torch.device("cuda", device_ids[0])
            if devices and devices != {want}:
                raise ValueError(f"DistributedDataParallel(device_ids={list(device_ids)}): "
                                 f"the module's parameters are on {sorted(map(str, devices))}; "
                                 "move the module there first, as DDP requires")
        check_reduce_options(op, gradient_predivide_factor)
        if op not in (Average, Sum):
            raise ValueError("DistributedDataParallel(op=...): Average or Sum (for Adasum "
                             "use hvd.DistributedOptimizer(op=hvd.Adasum), which combines the "
                             "updates of local steps)")
        _set_id(process_set)  # a registered ProcessSet (ValueError otherwise)
        self.module = module
        self.device_ids = list(device_ids) if device_ids else None
        self.output_device = output_device
        self.dim = dim
        self.broadcast_buffers = broadcast_buffers
        self.process_set = process_set
        self.find_unused_parameters = find_unused_parameters
        self.gradient_as_bucket_view = gradient_as_bucket_view
        self.static_graph = static_graph
        self.require_backward_grad_sync = True
        self._finishing = False
        # Numbered per set: the members of a torch group's set may make wrappers the other
        # ranks do not (torch's DDP is made on a group's members only).
        sid = _set_id(process_set)
        n = next(_instances[sid])
        prefix = f"DistributedDataParallel.{n}" if sid == 0 else \
            f"DistributedDataParallel.set{sid}.{n}"
        self._prefix = prefix
        self._buffer_groups = None  # taken at the first forward that broadcasts the buffers
        ranks = process_set.ranks
        self._root = 0 if ranks is None else min(ranks)
        self._included = bool(process_set.included())
        if self._included:
            # As DDP: every rank starts from the first rank's parameters and buffers.
            broadcast_parameters(_state(module), root_rank=self._root, process_set=process_set)
        named = [(n, p) for n, p in module.named_parameters() if p.requires_grad]
        # find_unused_parameters: which slots got a gradient since the last reduction here.
        self._used = [0] * len(named)
        options = ReduceOptions(op=op, gradient_predivide_factor=gradient_predivide_factor,
                                compression=compression, sparse_as_dense=False, groups=None,
                                process_set=process_set)
        self._sync = GradientSync([p for _, p in named],
                                  [f"{prefix}.allreduce.{n}" for n, _ in named], options, 1,
                                  resolve_cap_mb(bucket_cap_mb), wrap=self._gate)

    # ---- backward ------------------------------------------------------------------------
    def _gate(self, slot, hook):
        """The hook registered for a slot: nothing inside no_sync(); the first one of a
        backward pass has the wait queued at its end. With find_unused_parameters it also
        records that the slot got a gradient."""
        used = self._used if self.find_unused_parameters else None

        def gated(*args):
            if used is not None:
                used[slot] = 1
            if not self.require_backward_grad_sync:
                return
            if not self._finishing:
                self._finishing = True
                Variable._execution_engine.queue_callback(self._finish_backward)
            hook(*args)

        return gated

    def _finish_backward(self):
        # Runs when the backward pass is over: reduces what no hook started (parameters
        # without a gradient in this pass) and writes every average into p.grad.
        self._finishing = False
        if not self.find_unused_parameters:
            self._sync.synchronize()
            return
        # As DDP: a parameter that got no gradient on any rank (since the last reduction)
        # keeps p.grad None; one used somewhere gets the average, with zeros from here.
        params = self._sync.params
        none_here = [i for i, p in enumerate(params) if not self._used[i] and p.grad is None]
        used = allreduce_async(torch.tensor(self._used, dtype=torch.int32), op=Sum,
                               name=f"{self._prefix}.used", process_set=self.process_set)
        self._used[:] = [0] * len(self._used)
        try:
            self._sync.synchronize()
        finally:
            anywhere = synchronize(used)
        for i in none_here:
            if int(anywhere[i]) == 0:
                params[i].grad = None

    @contextlib.contextmanager
    def no_sync(self):
        """Backward passes inside accumulate gradients locally; the first one after it
        averages the accumulated gradients, as in DDP."""
        previous = self.require_backward_grad_sync
        self.require_backward_grad_sync = False
        try:
            yield
        finally:
            self.require_backward_grad_sync = previous

    @contextlib.contextmanager
    def join(self, divide_by_initial_world_size=True, enable=True,
             throw_on_early_termination=False):
        """For ranks with different numbers of batches, as DDP's join(): wrap the training
        loop; a rank that leaves it first contributes zeros to the others' gradient averages
        (still divided by the full size) until every rank has left, and then every rank takes
        the parameters and buffers of the rank that left last (hvd.join()). Global process set
        and no buffers broadcast per forward (broadcast_buffers=False, or a module without
        buffers): a joined rank cannot be the root of a broadcast."""
        if not divide_by_initial_world_size or throw_on_early_termination:
            raise NotImplementedError(
                "DistributedDataParallel.join(): only divide_by_initial_world_size=True and "
                "throw_on_early_termination=False (hvd.join()'s semantics)")
        if enable and self.process_set is not global_process_set:
            raise NotImplementedError("DistributedDataParallel.join(): the global process set "
                                      "only (hvd.join() is global)")
        if enable and self.broadcast_buffers and any(True for _ in self.module.buffers()):
            raise NotImplementedError(
                "DistributedDataParallel.join(): the module has buffers broadcast at each "
                "forward, which a joined rank cannot serve; use broadcast_buffers=False")
        yield
        if enable:
            last = hvd_join()
            broadcast_parameters(_state(self.module), root_rank=last)

    # ---- forward -------------------------------------------------------------------------
    def forward(self, *inputs, **kwargs):
        if (self.broadcast_buffers and self._included and
                torch.is_grad_enabled() and self.require_backward_grad_sync):
            self._sync_buffers()
        return self.module(*inputs, **kwargs)

    def _group_buffers(self):
        """The module's buffers by dtype and device, each group as (broadcast name, flat 1-D
        views of its buffers, their sizes). Taken once, as DDP takes its buffers once: a buffer
        the module replaces later (not updates in place) is not followed."""
        groups = {}
        for b in self.module.buffers():
            groups.setdefault((b.dtype, b.device), []).append(b)
        out = []
        for (dtype, device), bufs in groups.items():
            name = f"{self._prefix}.buffers.{str(dtype).replace('torch.', '')}.{device.type}"
            views = [b.view(-1) if b.is_contiguous() else b for b in bufs]
            out.append((name, views, [b.numel() for b in bufs]))
        return out

    def _sync_buffers(self):
        # Coalesced, as DDP does: one broadcast per dtype and device of every buffer flattened
        # together, then the values written back in two vectorized ops on the ranks that
        # received them.
        if self._buffer_groups is None:
            self._buffer_groups = self._group_buffers()
        pending = []
        for name, views, sizes in self._buffer_groups:
            flat = torch.cat([v.reshape(-1) for v in views])
            pending.append((broadcast_async_(flat, self._root, name,
                                             process_set=self.process_set), flat, views, sizes))
        receive = rank() != self._root
        for handle, flat, views, sizes in pending:
            synchronize(handle)
            if not receive:
                continue
            with torch.no_grad():
                parts = torch.split(flat, sizes)
                if all(v.dim() == 1 for v in views):
                    torch._foreach_zero_(views)
                    torch._foreach_add_(views, parts)
                else:  # a non-contiguous buffer: one copy each
                    for v, part in zip(views, parts):
                        v.copy_(part.view_as(v))
