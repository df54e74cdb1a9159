"""The torch.distributed backend "horovod_cpp": torch's own collectives and DDP on this library.

    import horovod_cpp.torch                       # registers the backend
    dist.init_process_group("horovod_cpp")         # under torchrun, or RANK/WORLD_SIZE/MASTER_*
    model = torch.nn.parallel.DistributedDataParallel(model)   # torch's DDP, unchanged

    # under mpirun or hvdrun, where torch has no rendezvous of its own:
    hvd.init(); hvd.init_process_group()

Not in Horovod: for programs written against torch.distributed. Every collective of the
default group (all_reduce, all_reduce_coalesced, broadcast, all_gather, all_gather_into_tensor,
reduce, gather, scatter, reduce_scatter, reduce_scatter_tensor, all_to_all, all_to_all_single,
barrier) runs as a collective of horovod_cpp's global process set: the same engine, fusion,
checks and copy paths as hvd.allreduce. torch issues a group's collectives in the same order on
every rank, so they are paired by the library's per-op counters (unnamed collectives).
Arguments that only this rank can get wrong (output lists and sizes) are checked after the
collective, so that a mistake on one rank never leaves the others waiting for it; what ranks
must agree on (shapes, splits) is checked by the library, which fails it on every rank.
torch's timeouts (the group's, and wait()'s) apply as on its other backends: a collective not
done in time raises RuntimeError on the rank that waits, instead of leaving the job hung.

A group of some ranks (`dist.new_group(ranks)`, `new_subgroups`,
`new_subgroups_by_enumeration`) runs on horovod_cpp's process set of those ranks. torch builds a
group's backend on its members only, but horovod_cpp registers a process set on every rank
(hvd.add_process_set is collective, as new_group is): register() therefore wraps torch's
new_group, which every rank of the job enters, so that it registers (or reuses) the set first.

send and recv (isend/irecv, batch_isend_irecv) go through the group's torch store, not the
engine, which runs collectives only (_p2p.py): for messages of control size.

Refused with an error that says so: a receive without a source, the bitwise reductions (BAND,
BOR, BXOR, PREMUL_SUM), and groups of some ranks made where horovod_cpp could not register
their set (new_group bound before horovod_cpp.torch was imported, or torch 2.x's
use_local_synchronization=True, which only the members enter).
"""

import atexit
import functools
import gc
import inspect
from datetime import timedelta

import torch
import torch.distributed as dist

from .. import _basics, _torchrun
from .._basics import Average, Max, Min, Product, Sum
from . import _p2p, mpi_ops
from ._c10d_work import BACKEND, _HorovodWork, _RecvWork, _seconds


#: torch's reductions and horovod_cpp's.
_OPS = tuple((getattr(torch_op, "op", torch_op), ours) for torch_op, ours in (
    (dist.ReduceOp.SUM, Sum), (dist.ReduceOp.AVG, Average), (dist.ReduceOp.MIN, Min),
    (dist.ReduceOp.MAX, Max), (dist.ReduceOp.PRODUCT, Product)))


def _op(reduce_op, what):
    """horovod_cpp's op for a torch ReduceOp (ValueError for those it has no counterpart of)."""
    kind = getattr(reduce_op, "op", reduce_op)
    for torch_op, ours in _OPS:
        if kind == torch_op:
            return ours
    raise ValueError(f"torch.distributed.{what} on the {BACKEND} backend: op {kind} is not "
                     "supported (SUM, AVG, MIN, MAX and PRODUCT are)")


def _flat(tensors):
    """The tensors' elements in one contiguous 1-D tensor."""
    return torch.cat([t.reshape(-1) for t in tensors]) if tensors else torch.empty(0)


def _scatter_flat(flat, outputs):
    """Copies consecutive pieces of 1-D `flat` into `outputs`, in order."""
    offset = 0
    for out in outputs:
        n = out.numel()
        out.copy_(flat[offset:offset + n].view_as(out))
        offset += n


class ProcessGroupHorovod(dist.ProcessGroup):
    """torch.distributed's ProcessGroup interface over one of horovod_cpp's process sets (the
    global set for the default group). Ranks torch passes (roots) are ranks of the group,
    which are the set's ranks in ascending order."""

    def __init__(self, rank, size, process_set=None, timeout=None, store=None):
        super().__init__(rank, size)
        self._set = process_set if process_set is not None else _basics.global_process_set
        #: Seconds a collective may take (the group's timeout, as torch's backends apply it),
        #: None for no limit.
        self._timeout = _seconds(timeout)
        #: send/recv through the group's torch store (None: no store given, no send/recv).
        self._mailbox = _p2p.Mailbox(store, rank) if store is not None else None

    @property
    def process_set(self):
        """The horovod_cpp process set this group's collectives run in."""
        return self._set

    def _global_rank(self, group_rank):
        """The global rank (horovod_cpp's broadcast roots are global) of a rank of the group."""
        ranks = self._set.ranks
        return ranks[group_rank] if 0 <= group_rank < len(ranks) else group_rank

    def getBackendName(self):
        return BACKEND

    def _work(self, what, handles, finish, tensors=()):
        """A work (torch.distributed.`what`) over horovod_cpp's `handles` whose wait() runs
        finish(); tensors: those its future holds."""
        return _HorovodWork(what, handles, finish, tensors, self._timeout)

    # ---- reductions -------------------------------------------------------------------
    def allreduce(self, tensors, opts=None):
        op = _op(opts.reduceOp if opts is not None else dist.ReduceOp.SUM, "all_reduce")
        handles = [mpi_ops.allreduce_async_(t, op=op, process_set=self._set) for t in tensors]
        return self._work("all_reduce", handles, lambda: [mpi_ops.synchronize(h) for h in handles],
                          tensors)

    def allreduce_coalesced(self, tensors, opts=None):
        op = _op(opts.reduceOp if opts is not None else dist.ReduceOp.SUM,
                 "all_reduce_coalesced")
        handle = mpi_ops.grouped_allreduce_async_(list(tensors), op=op,
                                                  process_set=self._set)
        return self._work("all_reduce_coalesced", [handle],
                          lambda: mpi_ops.synchronize(handle), tensors)

    def reduce(self, tensors, opts):
        op = _op(opts.reduceOp, "reduce")
        root = opts.rootRank
        handles = [mpi_ops.allreduce_async(t, op=op, process_set=self._set) for t in tensors]

        def finish():
            results = [mpi_ops.synchronize(h) for h in handles]
            if self.rank() == root:  # only the destination's tensor changes, as in gloo
                for t, r in zip(tensors, results):
                    t.copy_(r)
            return list(tensors)
        return self._work("reduce", handles, finish, tensors)

    def reduce_scatter(self, outputs, input_lists, opts=None):
        op = _op(opts.reduceOp if opts is not None else dist.ReduceOp.SUM, "reduce_scatter")
        size = self.size()
        handles = [mpi_ops.reducescatter_async(_flat(inputs), op=op,
                                                   process_set=self._set) for inputs in input_lists]

        def finish():
            results = [mpi_ops.synchronize(h) for h in handles]
            for out, inputs, result in zip(outputs, input_lists, results):
                if len(inputs) != size or any(t.numel() != out.numel() for t in inputs):
                    raise ValueError(f"torch.distributed.reduce_scatter on the {BACKEND} "
                                     f"backend: expected {size} inputs of {out.numel()} "
                                     f"elements each, got {[t.numel() for t in inputs]}")
                out.copy_(result.view_as(out))
            return list(outputs)
        return self._work("reduce_scatter", handles, finish, outputs)

    def _into(self, handle, output, what, input):
        """A work that copies the handle's 1-D result into `output`, which must hold the
        input's elements times the group's size (all_gather_into_tensor) or divided by it
        (reduce_scatter_tensor): checked after the collective, on this rank."""
        def finish():
            result = mpi_ops.synchronize(handle)
            if result.numel() != output.numel():
                raise ValueError(f"torch.distributed.{what} on the {BACKEND} backend: output "
                                 f"of {output.numel()} elements for an input of "
                                 f"{input.numel()} on {self.size()} ranks")
            output.copy_(result.view_as(output))
            return [output]
        return self._work(what, [handle], finish, [output])

    def _reduce_scatter_base(self, output, input, opts=None):
        op = _op(opts.reduceOp if opts is not None else dist.ReduceOp.SUM,
                 "reduce_scatter_tensor")
        return self._into(mpi_ops.reducescatter_async(input.reshape(-1), op=op,
                                                      process_set=self._set), output,
                          "reduce_scatter_tensor", input)

    # ---- broadcast and gathers --------------------------------------------------------
    def broadcast(self, tensors, opts):
        root = self._global_rank(opts.rootRank)
        handles = [mpi_ops.broadcast_async_(t, root, process_set=self._set) for t in tensors]
        return self._work("broadcast", handles, lambda: [mpi_ops.synchronize(h) for h in handles],
                          tensors)

    def allgather(self, output_lists, inputs, opts=None):
        size = self.size()
        handles = [mpi_ops.allgather_async(t.reshape(1, -1), process_set=self._set) for t in inputs]

        def finish():
            results = [mpi_ops.synchronize(h) for h in handles]
            for outs, gathered in zip(output_lists, results):
                if len(outs) != size:
                    raise ValueError(f"torch.distributed.all_gather on the {BACKEND} "
                                     f"backend: {len(outs)} output tensors for {size} ranks")
                for out, row in zip(outs, gathered):
                    out.copy_(row.view_as(out))
            return list(output_lists)
        return self._work("all_gather", handles, finish, inputs)

    def _allgather_base(self, output, input, opts=None):
        # One row per rank: inputs that differ across ranks fail in the library, everywhere.
        return self._into(mpi_ops.allgather_async(input.reshape(1, -1),
                                                  process_set=self._set), output,
                          "all_gather_into_tensor", input)

    def gather(self, output_lists, inputs, opts):
        root = opts.rootRank
        handles = [mpi_ops.allgather_async(t.reshape(1, -1), process_set=self._set) for t in inputs]

        def finish():
            gathered = [mpi_ops.synchronize(h) for h in handles]
            if self.rank() == root:
                for outs, rows in zip(output_lists, gathered):
                    for out, row in zip(outs, rows):
                        out.copy_(row.view_as(out))
            return list(output_lists)
        return self._work("gather", handles, finish, inputs)

    def scatter(self, outputs, input_lists, opts):
        root = opts.rootRank
        size = self.size()
        handles = []
        wrong = None
        for i, out in enumerate(outputs):
            # An alltoall in which only the root sends: piece r to rank r. A root given the
            # wrong number of pieces sends nothing (the others then raise on what arrived).
            pieces = input_lists[i] if self.rank() == root else []
            if self.rank() == root and len(pieces) != size:
                wrong = f"{len(pieces)} tensors to scatter over {size} ranks"
            if self.rank() == root and wrong is None:
                send = _flat(pieces).to(out.dtype)
                splits = [p.numel() for p in pieces]
            else:
                send = torch.empty(0, dtype=out.dtype, device=out.device)
                splits = [0] * size
            handles.append(mpi_ops.alltoall_async(send, splits=splits,
                                                  process_set=self._set))

        def finish():
            received = [mpi_ops.synchronize(h)[0] for h in handles]
            for out, got in zip(outputs, received):
                if wrong is None and got.numel() != out.numel():
                    raise ValueError(f"torch.distributed.scatter on the {BACKEND} backend: "
                                     f"{got.numel()} elements from rank {root} for an output "
                                     f"of {out.numel()}")
                if wrong is None:
                    out.copy_(got.view_as(out))
            if wrong is not None:
                raise ValueError(f"torch.distributed.scatter on the {BACKEND} backend: "
                                 f"{wrong}")
            return list(outputs)
        return self._work("scatter", handles, finish, outputs)

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        # Splits of the wrong length or sum, or an uneven default split, fail in the library,
        # on every rank.
        handle = mpi_ops.alltoall_async(input, splits=list(input_split_sizes) or None,
                                        process_set=self._set)

        def finish():
            received, got = mpi_ops.synchronize(handle)
            want = list(output_split_sizes)
            if want and [int(g) for g in got] != want:
                raise RuntimeError(f"torch.distributed.all_to_all_single on the {BACKEND} "
                                   f"backend: output splits {want} but the ranks sent "
                                   f"{[int(g) for g in got]} rows")
            output.copy_(received.view_as(output))
            return [output]
        return self._work("all_to_all_single", [handle], finish, [output])

    def alltoall(self, outputs, inputs, opts=None):
        # A splits list of the wrong length fails in the library, on every rank.
        handle = mpi_ops.alltoall_async(_flat(inputs), splits=[t.numel() for t in inputs],
                                        process_set=self._set)

        def finish():
            received, _ = mpi_ops.synchronize(handle)
            if len(outputs) != self.size() or received.numel() != sum(
                    t.numel() for t in outputs):
                raise ValueError(f"torch.distributed.all_to_all on the {BACKEND} backend: "
                                 f"{len(outputs)} outputs of {sum(t.numel() for t in outputs)} "
                                 f"elements for {received.numel()} received from "
                                 f"{self.size()} ranks")
            _scatter_flat(received, outputs)
            return list(outputs)
        return self._work("all_to_all", [handle], finish, outputs)

    def barrier(self, opts=None):
        # A one-element allreduce: unlike hvd.barrier() it has a handle, so that the group's
        # timeout applies to it (dist.barrier() waits on it at once).
        handle = mpi_ops.allreduce_async_(torch.zeros(1), op=Sum, process_set=self._set)

        def finish():
            mpi_ops.synchronize(handle)
            return []
        return self._work("barrier", [handle], finish)

    # ---- point-to-point, through the group's torch store (_p2p) ---------------------------
    def _p2p(self, what, tensors, peer):
        if self._mailbox is None:
            raise RuntimeError(f"torch.distributed.{what} on the {BACKEND} backend: this group "
                               "was made without a torch store, which send/recv go through")
        if len(tensors) != 1:
            raise ValueError(f"torch.distributed.{what} on the {BACKEND} backend: one tensor "
                             f"per call, not {len(tensors)}")
        if not 0 <= peer < self.size() or peer == self.rank():
            raise ValueError(f"torch.distributed.{what} on the {BACKEND} backend: rank {peer} "
                             f"is not another rank of this group of {self.size()} (this is "
                             f"rank {self.rank()})")
        return tensors[0]

    def send(self, tensors, dst, tag=0):
        tensor = self._p2p("send", tensors, dst)
        self._mailbox.post(tensor, dst, tag)
        return self._work("send", [], lambda: [tensor], [tensor])

    def recv(self, tensors, src, tag=0):
        tensor = self._p2p("recv", tensors, src)
        return _RecvWork(self._mailbox, self._mailbox.expect(src, tag), src, tensor,
                         self._timeout)

    def recv_anysource(self, tensors, tag=0):
        raise RuntimeError(f"torch.distributed.recv without a source on the {BACKEND} "
                           "backend: name the sending rank (src=...)")


class _SubgroupRefused(dist.ProcessGroup):
    """A group of some ranks whose process set horovod_cpp could not register: every
    collective on it raises. Made instead of raising in new_group itself, where the members
    would fail and the other ranks would wait for them in torch's store barrier."""

    def __init__(self, rank, size, ranks):
        super().__init__(rank, size)
        self._ranks = ranks

    def getBackendName(self):
        return BACKEND

    def _refuse(self, *args, **kwargs):
        raise RuntimeError(f"torch.distributed group of ranks {self._ranks} on the {BACKEND} "
                           "backend: horovod_cpp registers a group's process set on every "
                           "rank when torch.distributed.new_group runs, but this group was "
                           "made by a new_group bound before horovod_cpp.torch was imported, "
                           "or with use_local_synchronization=True; import horovod_cpp.torch "
                           "first and call dist.new_group on every rank, or give new_group "
                           "backend='gloo'")


for _name in ("allreduce", "allreduce_coalesced", "reduce", "reduce_scatter",
              "_reduce_scatter_base", "broadcast", "allgather", "_allgather_base", "gather",
              "scatter", "alltoall_base", "alltoall", "barrier", "send", "recv",
              "recv_anysource"):
    setattr(_SubgroupRefused, _name, _SubgroupRefused._refuse)


def _registered_set(ranks):
    """The registered process set of exactly `ranks` (sorted global ranks), or None."""
    for ps in list(_basics._registry.values()):
        if ps.process_set_id not in (None, 0) and list(ps.ranks) == ranks:
            return ps
    return None


def _create(options, pg_options=None):
    """The backend's creator (torch's extended API), called on the group's members only:
    hvd.init() when the program has not, with the group's store under torchrun."""
    ranks = list(options.global_ranks_in_group or [])
    if not _basics.is_initialized():
        _torchrun.given_store = options.store
        try:
            _basics.init()
        finally:
            _torchrun.given_store = None
    if ranks and ranks != list(range(_basics.size())):
        found = _registered_set(sorted(ranks))
        if found is None:
            return _SubgroupRefused(options.group_rank, options.group_size, ranks)
        return ProcessGroupHorovod(options.group_rank, options.group_size, found,
                                   options.timeout, options.store)
    if options.group_rank != _basics.rank() or options.group_size != _basics.size():
        raise ValueError(f"init_process_group(backend={BACKEND!r}): torch says rank "
                         f"{options.group_rank} of {options.group_size}, horovod_cpp says rank "
                         f"{_basics.rank()} of {_basics.size()}; launch with torchrun (or set "
                         "RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), or under mpirun/hvdrun "
                         "call hvd.init_process_group()")
    return ProcessGroupHorovod(options.group_rank, options.group_size, timeout=options.timeout,
                               store=options.store)


def _subset_of_ours(arguments):
    """The sorted ranks of a new_group call (its bound arguments) that makes a group of some
    ranks on this backend, or None for any other call (left to torch as it is, errors too)."""
    ranks = arguments.get("ranks")
    if ranks is None or arguments.get("use_local_synchronization") or \
            not dist.is_initialized():
        return None
    try:
        ranks = sorted(int(r) for r in ranks)
        if dist.Backend(arguments.get("backend") or dist.get_backend()) != BACKEND:
            return None
    except (TypeError, ValueError):
        return None
    world = dist.get_world_size()
    if not ranks or len(set(ranks)) != len(ranks) or ranks[0] < 0 or ranks[-1] >= world or \
            len(ranks) == world:
        return None
    return ranks


def _wrap_new_group(torch_new_group):
    """torch's new_group, first registering (or reusing) horovod_cpp's process set of the
    group's ranks on every rank when the group is of this backend. torch requires every rank
    of the job to enter new_group, so this collective runs where torch's would."""
    signature = inspect.signature(torch_new_group)

    @functools.wraps(torch_new_group)
    def new_group(*args, **kwargs):
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError:
            return torch_new_group(*args, **kwargs)  # torch's own error
        ranks = _subset_of_ours(bound.arguments)
        if ranks is not None:
            if not _basics.is_initialized():
                _basics.init()  # under torchrun through the default group's store
            if _registered_set(ranks) is None:
                _basics.add_process_set(ranks)._implicit = True
        return torch_new_group(*args, **kwargs)

    new_group._horovod_cpp_torch_new_group = torch_new_group
    return new_group


def register():
    """Registers the backend with torch.distributed (once; import horovod_cpp.torch does), and
    wraps torch's new_group (module function and the name torch.distributed exports) so that
    groups of some ranks get their process set."""
    if not dist.is_available() or BACKEND.upper() in getattr(dist.Backend, "_plugins", {}):
        return
    dist.Backend.register_backend(BACKEND, _create, extended_api=True)
    from torch.distributed import distributed_c10d
    if not hasattr(distributed_c10d.new_group, "_horovod_cpp_torch_new_group"):
        wrapped = _wrap_new_group(distributed_c10d.new_group)
        distributed_c10d.new_group = wrapped  # new_subgroups* call it by this name
        dist.new_group = wrapped
    # A group of this backend is a Python object that torch's C++ objects hold (DDP's reducer
    # among them). Freed by the interpreter's final teardown, where such objects in reference
    # cycles end up, it aborts the process ("terminate called without an active exception"):
    # the garbage is collected at exit, while the interpreter still runs.
    atexit.register(gc.collect)


#: The stores rank 0 served for init_process_group (see there).
_served_stores = []


def init_process_group(timeout=timedelta(minutes=30)):
    """Makes torch.distributed's default group on the horovod_cpp backend (collective).

    Under torchrun (torch's env:// variables) this is dist.init_process_group("horovod_cpp").
    Under mpirun or hvdrun, where torch has no rendezvous of its own: hvd.init() if not done,
    then a torch store served by rank 0 (at MASTER_ADDR if set, else 127.0.0.1 when the job
    has one host, else rank 0's host name), its port sent to every rank by horovod_cpp."""
    import os
    import socket
    if dist.is_initialized():
        raise RuntimeError("hvd.init_process_group(): torch.distributed's default group "
                           "already exists (dist.destroy_process_group() first)")
    if _torchrun.wanted(os.environ):
        dist.init_process_group(BACKEND, timeout=timeout)
        return
    if not _basics.is_initialized():
        _basics.init()
    store = None
    address = None
    if _basics.rank() == 0:
        host = os.environ.get("MASTER_ADDR") or (
            "127.0.0.1" if _basics.cross_size() == 1 else socket.getfqdn())
        # Not waiting for the others here: they learn the port only after this returns.
        store = dist.TCPStore(host, 0, _basics.size(), True, timeout, wait_for_workers=False)
        address = (host, store.port)
    from .functions import broadcast_object
    address = broadcast_object(address, root_rank=0, name="init_process_group.store")
    if store is None:
        store = dist.TCPStore(address[0], address[1], _basics.size(), False, timeout)
    else:
        # Served until this process ends, not until the group is destroyed: the others may
        # still be leaving torch's store barrier (new_group's) when rank 0 destroys it.
        _served_stores.append(store)
    dist.init_process_group(BACKEND, store=store, rank=_basics.rank(),
                            world_size=_basics.size(), timeout=timeout)
