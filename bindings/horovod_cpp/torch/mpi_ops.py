"""horovod.torch's collectives on torch tensors (CPU and CUDA), over horovod_cpp's native module.

Tensors are handed to the library without copying (their data_ptr()); handles are integers,
as in Horovod: poll(handle) never blocks, synchronize(handle) waits with the GIL released and
returns the output tensor. The handles live in a table of the native module: an allreduce is
one native call (_C.allreduce_async, the same entry as numpy's) that reads the arguments and
the tensor and stores the operation there; the other collectives register a Handle object and
the function that turns it into their output.
"""

import torch
import torch.utils.dlpack

from .. import _C
from .._basics import (Average, Sum, _group_names, _name, _op_value, _reducescatter_op, _set_id, _set_rank,
                       _set_size, global_process_set, handle_average_backwards_compatibility,
                       rank)
from .compression import Compression

_register = _C.torch_handle_register  # (native Handle, finish(native) -> output) -> handle
_synchronize = _C.torch_handle_synchronize
_synchronize_all = _C.torch_handle_synchronize_all
_poll = _C.torch_handle_poll
_wait_done = _C.torch_handle_wait_done  # (handle, seconds): done within them? not consumed
# allreduce_async(tensor, output, name, op, prescale, postscale, process_set, average, True):
# the one native call of an allreduce (bindings/src/allreduce.cc); returns the integer handle.
_allreduce = _C.allreduce_async


def _check_tensor(tensor, what="tensor"):
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"{what} must be a torch.Tensor, got {type(tensor).__name__}")
    # CUDA tensors go to the library, which checks their device on every rank together (a
    # device that only some ranks cannot use fails the collective on all of them, never hangs).
    if tensor.device.type not in ("cpu", "cuda"):
        raise NotImplementedError(f"horovod_cpp.torch: {what} is on device '{tensor.device}'; "
                                  "only CPU and CUDA tensors are supported")


def _checked_group(tensors):
    """The tensors of a grouped collective as a list, each checked by _check_tensor."""
    tensors = list(tensors)
    for t in tensors:
        _check_tensor(t, "every tensor of the group")
    return tensors


def _contiguous_input(tensor):
    return tensor.detach().contiguous()


def _copy_back(tensor, buf):
    """finish(native) for an in-place operation run in `buf`, a contiguous copy of `tensor`:
    copies the result back and returns `tensor`."""
    def finish(native=None):
        with torch.no_grad():
            tensor.copy_(buf)
        return tensor

    return finish


def _in_place_target(tensor):
    """(buffer the library writes, finish step that makes `tensor` hold the result)."""
    if tensor.is_contiguous():
        return tensor.detach(), lambda: tensor
    buf = tensor.detach().contiguous()
    return buf, _copy_back(tensor, buf)


_C.allreduce_setup_torch(torch.Tensor, _check_tensor, _copy_back)


def poll(handle):
    """True once the asynchronous operation of `handle` has completed; never blocks."""
    done = _poll(handle)
    if done is None:
        raise ValueError(f"poll(): unknown handle {handle!r}")
    return done


def synchronize(handle):
    """Waits for `handle` and returns the output tensor. Raises HorovodInternalError (a
    RuntimeError) when the collective failed across ranks. Unknown handles return None."""
    return _synchronize(handle)


def synchronize_all(handles):
    """Waits for every handle of `handles` (releasing the GIL once, not once per handle) and
    returns their outputs in order, as synchronize() would one by one; unknown handles give
    None. Every handle is consumed, also when some failed: then the first failure, in the
    order given, is raised once all have completed."""
    return _synchronize_all(handles)


# ---- allreduce ---------------------------------------------------------------------------
def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0, process_set=global_process_set):
    """Starts reducing `tensor` across ranks into a new tensor; returns a handle."""
    op = handle_average_backwards_compatibility(op, average)
    _check_tensor(tensor)
    output = torch.empty(tensor.shape, dtype=tensor.dtype, device=tensor.device)
    return _allreduce(tensor, output, name, op, prescale_factor, postscale_factor, process_set,
                      None, True)


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0, process_set=global_process_set):
    """Starts reducing `tensor` in place; returns a handle."""
    return _allreduce(tensor, None, name, op, prescale_factor, postscale_factor, process_set,
                      average, True)


class _HorovodAllreduce(torch.autograd.Function):
    """Allreduce whose gradient is the same allreduce of the incoming gradient."""

    @staticmethod
    def forward(ctx, tensor, name, op, prescale_factor, postscale_factor, process_set):
        ctx.op, ctx.prescale_factor, ctx.postscale_factor = op, prescale_factor, postscale_factor
        ctx.process_set = process_set
        return synchronize(allreduce_async(tensor, None, name, op, prescale_factor,
                                           postscale_factor, process_set))

    @staticmethod
    def backward(ctx, grad_output):
        grad = allreduce(grad_output, op=ctx.op, prescale_factor=ctx.prescale_factor,
                         postscale_factor=ctx.postscale_factor, process_set=ctx.process_set)
        return grad, None, None, None, None, None


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """Returns the reduction of `tensor` across ranks (differentiable; the input is not
    modified). op: Average (default), Sum, Min, Max, Product."""
    op = handle_average_backwards_compatibility(op, average)
    _check_tensor(tensor)
    compressed, cctx = compression.compress(tensor)
    reduced = _HorovodAllreduce.apply(compressed, name, op, prescale_factor, postscale_factor,
                                      process_set)
    return compression.decompress(reduced, cctx)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, process_set=global_process_set):
    """Reduces `tensor` in place and returns it (not differentiable)."""
    return _synchronize(_allreduce(tensor, None, name, op, prescale_factor, postscale_factor,
                                   process_set, average, True))


# ---- grouped allreduce -------------------------------------------------------------------
# (tensors, names, op, prescale, postscale, set_id) -> handle of an in-place reduction of plain
# CPU tensors (allreduce.cc), or NotImplemented for tensors _grouped_allreduce_general needs.
_grouped_plain = _C.grouped_allreduce_torch


def _grouped_allreduce_async(tensors, in_place, name, op, prescale_factor, postscale_factor,
                             process_set):
    sid = _set_id(process_set)
    opv = _op_value(op)
    if not in_place:
        tensors = [t.detach().clone(memory_format=torch.contiguous_format)
                   for t in _checked_group(tensors)]
    elif not isinstance(tensors, (list, tuple)):
        tensors = list(tensors)  # read once: the general path may read it again
    if name is None or isinstance(name, str):
        h = _grouped_plain(tensors, name, opv, prescale_factor, postscale_factor, sid)
        if h is not NotImplemented:
            return h
    return _grouped_allreduce_general(tensors, in_place, _group_names(name, len(tensors)), opv,
                                      prescale_factor, postscale_factor, sid)


def _grouped_allreduce_general(tensors, in_place, names, opv, prescale_factor,
                               postscale_factor, sid):
    """Grouped allreduce of any tensors (non-contiguous: via copies), named by `names`."""
    tensors = _checked_group(tensors)
    targets = [_in_place_target(t) if in_place else (t, None) for t in tensors]
    bufs = [b for b, _ in targets]
    finish = lambda h: [done() for _, done in targets] if in_place else bufs  # noqa: E731
    native = _C.grouped_allreduce_async(bufs, names, opv, float(prescale_factor),
                                        float(postscale_factor), sid)
    return _register(native, finish)


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=global_process_set):
    """Starts reducing a list of tensors as one unit into new tensors; returns one handle
    whose synchronize() gives the list of outputs."""
    op = handle_average_backwards_compatibility(op, average)
    return _grouped_allreduce_async(tensors, False, name, op, prescale_factor, postscale_factor,
                                    process_set)


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=global_process_set):
    """In-place form of grouped_allreduce_async."""
    op = handle_average_backwards_compatibility(op, average)
    return _grouped_allreduce_async(tensors, True, name, op, prescale_factor, postscale_factor,
                                    process_set)


class _HorovodGroupedAllreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, prescale_factor, postscale_factor, process_set, *tensors):
        ctx.op, ctx.prescale_factor, ctx.postscale_factor = op, prescale_factor, postscale_factor
        ctx.process_set = process_set
        return tuple(synchronize(grouped_allreduce_async(list(tensors), None, name, op,
                                                         prescale_factor, postscale_factor,
                                                         process_set)))

    @staticmethod
    def backward(ctx, *grad_outputs):
        grads = grouped_allreduce(list(grad_outputs), op=ctx.op,
                                  prescale_factor=ctx.prescale_factor,
                                  postscale_factor=ctx.postscale_factor,
                                  process_set=ctx.process_set)
        return (None, None, None, None, None) + tuple(grads)


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """Returns the reductions of a list of tensors, negotiated and fused as one unit
    (differentiable)."""
    op = handle_average_backwards_compatibility(op, average)
    tensors = _checked_group(tensors)
    compressed = [compression.compress(t) for t in tensors]
    reduced = _HorovodGroupedAllreduce.apply(name, op, prescale_factor, postscale_factor,
                                             process_set, *[c for c, _ in compressed])
    return [compression.decompress(r, c) for r, (_, c) in zip(reduced, compressed)]


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                       postscale_factor=1.0, process_set=global_process_set):
    """Reduces a list of tensors in place as one unit; returns the list."""
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor,
                                                postscale_factor, process_set))


# ---- allgather ---------------------------------------------------------------------------
def _from_library(array, dtype):
    """The torch tensor sharing a result of the library: a numpy array for CPU results
    (bfloat16 arrives as int16), (DLPack capsule or None when empty, shape, device index) for
    CUDA results, which complete on the device before synchronize() returns."""
    if isinstance(array, tuple):
        capsule, shape, device = array
        if capsule is None:
            return torch.empty(shape, dtype=dtype, device=torch.device("cuda", device))
        return torch.utils.dlpack.from_dlpack(capsule)
    t = torch.from_numpy(array)
    if dtype == torch.bfloat16:
        t = t.view(torch.bfloat16)
    return t


def allgather_async(tensor, name=None, process_set=global_process_set):
    """Starts concatenating every rank's `tensor` along dimension 0 (the first dimension may
    differ across ranks); returns a handle."""
    _check_tensor(tensor)
    sid = _set_id(process_set)
    dtype = tensor.dtype
    native = _C.allgather_async(_contiguous_input(tensor), _name(name), sid)
    return _register(native, lambda h: _from_library(h.result(), dtype))


class _HorovodAllgather(torch.autograd.Function):
    """Allgather whose gradient is this rank's slice of the averaged incoming gradient."""

    @staticmethod
    def forward(ctx, tensor, name, process_set):
        ctx.dim = tensor.shape[0] if tensor.dim() > 0 else 0
        ctx.process_set = process_set
        return synchronize(allgather_async(tensor, name, process_set))

    @staticmethod
    def backward(ctx, grad_output):
        grad = allreduce(grad_output, op=Average, process_set=ctx.process_set)
        dims = synchronize(allgather_async(torch.tensor([ctx.dim], dtype=torch.int64),
                                           process_set=ctx.process_set)).cpu()
        offset = int(dims[:_set_rank(ctx.process_set)].sum().item())
        return grad.narrow(0, offset, ctx.dim), None, None


def allgather(tensor, name=None, process_set=global_process_set):
    """Returns every rank's `tensor` concatenated along dimension 0, in rank order
    (differentiable)."""
    _check_tensor(tensor)
    return _HorovodAllgather.apply(tensor, name, process_set)


# ---- broadcast ---------------------------------------------------------------------------
def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts broadcasting root_rank's `tensor` into a new tensor; returns a handle."""
    _check_tensor(tensor)
    sid = _set_id(process_set)
    out = tensor.detach().clone(memory_format=torch.contiguous_format)
    native = _C.broadcast_async(out, int(root_rank), _name(name), sid)
    return _register(native, lambda h: out)


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts replacing `tensor` in place by root_rank's value; returns a handle."""
    _check_tensor(tensor)
    sid = _set_id(process_set)
    buf, done = _in_place_target(tensor)
    native = _C.broadcast_async(buf, int(root_rank), _name(name), sid)
    return _register(native, lambda h: done())


class _HorovodBroadcast(torch.autograd.Function):
    """Broadcast whose gradient is the averaged incoming gradient on the root, zero
    elsewhere (Horovod's convention)."""

    @staticmethod
    def forward(ctx, tensor, root_rank, name, process_set):
        ctx.root_rank = root_rank
        ctx.process_set = process_set
        return synchronize(broadcast_async(tensor, root_rank, name, process_set))

    @staticmethod
    def backward(ctx, grad_output):
        grad = allreduce(grad_output, op=Average, process_set=ctx.process_set)
        if rank() != ctx.root_rank:
            grad = grad * 0
        return grad, None, None, None


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """Returns root_rank's `tensor` on every rank (differentiable)."""
    _check_tensor(tensor)
    return _HorovodBroadcast.apply(tensor, root_rank, name, process_set)


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    """Replaces `tensor` in place by root_rank's value and returns it."""
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


# ---- sparse allreduce --------------------------------------------------------------------
def _rows_layout(tensor):
    """`tensor` (sparse COO) coalesced with one sparse dimension and dense rows, the layout of
    nn.Embedding's gradients, so that every rank allgathers indices and values of the same
    shapes (zero_() turns a sparse gradient into an all-sparse-dims tensor with no entries)."""
    if tensor.sparse_dim() != 1 and tensor.dim() > 0:
        if tensor._nnz() == 0:
            return torch.sparse_coo_tensor(
                torch.zeros((1, 0), dtype=torch.int64, device=tensor.device),
                torch.zeros((0,) + tuple(tensor.shape[1:]), dtype=tensor.dtype,
                            device=tensor.device), tensor.shape)
        tensor = tensor.to_dense().to_sparse(1)
    return tensor.coalesce()


def sparse_allreduce_async(tensor, name, op, process_set=global_process_set):
    """Reduces a sparse COO tensor by allgathering its indices and values (as Horovod does).
    Returns a callable that waits and returns the reduced sparse tensor."""
    _check_tensor(tensor)
    if not tensor.is_sparse:
        raise ValueError("sparse_allreduce_async needs a sparse tensor")
    if op not in (Average, Sum):
        raise ValueError("sparse_allreduce_async supports op=Average and op=Sum only")
    t = _rows_layout(tensor)
    prefix = "sparse" if name is None else name
    indices_h = allgather_async(t.indices().transpose(0, 1).contiguous(),
                                name=f"{prefix}.indices", process_set=process_set)
    values_h = allgather_async(t.values().contiguous(), name=f"{prefix}.values",
                               process_set=process_set)

    def wait():
        values = synchronize(values_h)
        indices = synchronize(indices_h)
        if op == Average:
            values = values / _set_size(process_set)
        return torch.sparse_coo_tensor(indices.transpose(0, 1), values, t.size())

    return wait


# ---- grouped allgather -------------------------------------------------------------------
def grouped_allgather_async(tensors, name=None, process_set=global_process_set):
    """Starts allgathering a list of tensors as one unit; one handle whose synchronize()
    gives the list of outputs."""
    sid = _set_id(process_set)
    tensors = _checked_group(tensors)
    dtypes = [t.dtype for t in tensors]
    native = _C.grouped_allgather_async([_contiguous_input(t) for t in tensors],
                                        _group_names(name, len(tensors)), sid)
    return _register(native, lambda h: [_from_library(a, d) for a, d in zip(h.result(), dtypes)])


def _narrow_own_rows(grads, dims, process_set):
    """Each averaged gradient cut to this rank's rows, as in allgather's backward."""
    table = synchronize(allgather_async(torch.tensor([dims], dtype=torch.int64),
                                        process_set=process_set))
    r = _set_rank(process_set)
    offsets = table[:r].sum(0).tolist() if r > 0 else [0] * len(dims)
    return [g.narrow(0, int(o), d) for g, o, d in zip(grads, offsets, dims)]


class _HorovodGroupedAllgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, process_set, *tensors):
        ctx.dims = [t.shape[0] if t.dim() > 0 else 0 for t in tensors]
        ctx.process_set = process_set
        return tuple(synchronize(grouped_allgather_async(list(tensors), name, process_set)))

    @staticmethod
    def backward(ctx, *grad_outputs):
        grads = synchronize(grouped_allreduce_async([g.contiguous() for g in grad_outputs],
                                                    op=Average, process_set=ctx.process_set))
        return (None, None) + tuple(_narrow_own_rows(grads, ctx.dims, ctx.process_set))


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    """Returns the allgather of every tensor of the list, negotiated as one unit
    (differentiable)."""
    tensors = _checked_group(tensors)
    return list(_HorovodGroupedAllgather.apply(name, process_set, *tensors))


# ---- alltoall ----------------------------------------------------------------------------
def _splits_list(splits):
    """alltoall's splits as a list of ints, checked on this rank before anything is submitted:
    a splits tensor must be int32 (Horovod's rule) and one-dimensional."""
    if splits is None:
        return []
    if isinstance(splits, torch.Tensor):
        if splits.dtype != torch.int32:
            raise ValueError(f"alltoall: splits must be an int32 tensor (or a list of ints), "
                             f"got {splits.dtype}")
        if splits.dim() != 1:
            raise ValueError(f"alltoall: splits must be one-dimensional, got shape "
                             f"{list(splits.shape)}")
        return [int(s) for s in splits.tolist()]
    try:
        return [int(s) for s in splits]
    except (TypeError, ValueError) as e:
        raise ValueError(f"alltoall: splits must be a sequence of integers: {e}") from e


def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    """Starts sending splits[r] rows (dimension 0) of `tensor` to rank r of the set, in order
    (None: an even split). synchronize() returns (output, received_splits): what every rank
    sent this one, concatenated in rank order, and the rows from each (int32). A splits
    tensor must be int32 (ValueError otherwise, raised before anything is submitted)."""
    _check_tensor(tensor)
    sid = _set_id(process_set)
    dtype = tensor.dtype
    split_list = _splits_list(splits)
    native = _C.alltoall_async(_contiguous_input(tensor), split_list, _name(name), sid)

    def finish(h):
        output, received = h.result()
        return _from_library(output, dtype), torch.from_numpy(received).to(torch.int32)

    return _register(native, finish)


class _HorovodAlltoall(torch.autograd.Function):
    """Alltoall whose gradient is the alltoall of the incoming gradient with the received
    splits (rows that were not sent get a zero gradient)."""

    @staticmethod
    def forward(ctx, tensor, splits, name, process_set):
        output, received = synchronize(alltoall_async(tensor, splits, name, process_set))
        ctx.process_set = process_set
        ctx.recvsplits = received
        ctx.dim0 = tensor.shape[0] if tensor.dim() > 0 else 0
        if splits is None:
            return output
        ctx.mark_non_differentiable(received)
        return output, received

    @staticmethod
    def backward(ctx, grad_output, *dead_gradients):
        grad, _ = synchronize(alltoall_async(grad_output.contiguous(), ctx.recvsplits,
                                             process_set=ctx.process_set))
        if grad.shape[0] < ctx.dim0:
            pad = grad.new_zeros((ctx.dim0 - grad.shape[0],) + tuple(grad.shape[1:]))
            grad = torch.cat([grad, pad])
        return grad, None, None, None


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Scatters slices of dimension 0 of `tensor` to the ranks of the set and gathers theirs
    (differentiable). Returns the output, or (output, received_splits) when `splits` is
    given, as horovod.torch does."""
    _check_tensor(tensor)
    _splits_list(splits)  # ValueError here, before anything is submitted
    return _HorovodAlltoall.apply(tensor, splits, name, process_set)


# ---- reducescatter -----------------------------------------------------------------------
def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set,
                        prescale_factor=1.0, postscale_factor=1.0):
    """Starts reducing `tensor` (Sum or Average) across the set; each rank receives its slice
    of dimension 0 (the first dim0 % size ranks get one row more). Returns a handle."""
    _check_tensor(tensor)
    sid = _set_id(process_set)
    dtype = tensor.dtype
    native = _C.reducescatter_async(_contiguous_input(tensor), _name(name), _reducescatter_op(op),
                                    float(prescale_factor), float(postscale_factor), sid)
    return _register(native, lambda h: _from_library(h.result(), dtype))


def _reducescatter_grad_scale(ctx):
    """Horovod's gradient of reducescatter: the allgather of the output gradients, times the
    set size for Sum (the scale factors do not enter it)."""
    return float(_set_size(ctx.process_set)) if ctx.op == Sum else 1.0


class _HorovodReducescatter(torch.autograd.Function):
    """Reducescatter whose gradient is the allgather of the incoming gradient, times the set
    size for op=Sum (Horovod's convention)."""

    @staticmethod
    def forward(ctx, tensor, name, op, process_set, prescale_factor, postscale_factor):
        ctx.op, ctx.process_set = op, process_set
        return synchronize(reducescatter_async(tensor, name, op, process_set, prescale_factor,
                                               postscale_factor))

    @staticmethod
    def backward(ctx, grad_output):
        grad = synchronize(allgather_async(grad_output.contiguous(),
                                           process_set=ctx.process_set))
        scale = _reducescatter_grad_scale(ctx)
        if scale != 1.0:
            grad = grad * scale
        return grad, None, None, None, None, None


def reducescatter(tensor, name=None, compression=Compression.none, op=Average,
                  process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    """Returns this rank's slice (dimension 0) of the reduction of `tensor` across the set
    (differentiable). op: Average (default) or Sum."""
    _check_tensor(tensor)
    compressed, cctx = compression.compress(tensor)
    reduced = _HorovodReducescatter.apply(compressed, name, op, process_set, prescale_factor,
                                          postscale_factor)
    return compression.decompress(reduced, cctx)


def grouped_reducescatter_async(tensors, name=None, op=Average, process_set=global_process_set,
                                prescale_factor=1.0, postscale_factor=1.0):
    """Starts reduce-scattering a list of tensors as one unit; one handle whose synchronize()
    gives the list of outputs."""
    sid = _set_id(process_set)
    tensors = _checked_group(tensors)
    dtypes = [t.dtype for t in tensors]
    native = _C.grouped_reducescatter_async(
        [_contiguous_input(t) for t in tensors], _group_names(name, len(tensors)),
        _reducescatter_op(op), float(prescale_factor), float(postscale_factor), sid)
    return _register(native, lambda h: [_from_library(a, d) for a, d in zip(h.result(), dtypes)])


class _HorovodGroupedReducescatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, process_set, prescale_factor, postscale_factor, *tensors):
        ctx.op, ctx.process_set = op, process_set
        return tuple(synchronize(grouped_reducescatter_async(
            list(tensors), name, op, process_set, prescale_factor, postscale_factor)))

    @staticmethod
    def backward(ctx, *grad_outputs):
        grads = synchronize(grouped_allgather_async([g.contiguous() for g in grad_outputs],
                                                    process_set=ctx.process_set))
        scale = _reducescatter_grad_scale(ctx)
        if scale != 1.0:
            grads = [g * scale for g in grads]
        return (None, None, None, None, None) + tuple(grads)


def grouped_reducescatter(tensors, name=None, compression=Compression.none, op=Average,
                          process_set=global_process_set, prescale_factor=1.0,
                          postscale_factor=1.0):
    """Reduce-scatters a list of tensors as one unit (differentiable); returns the list."""
    tensors = _checked_group(tensors)
    compressed = [compression.compress(t) for t in tensors]
    reduced = _HorovodGroupedReducescatter.apply(name, op, process_set, prescale_factor,
                                                 postscale_factor, *[c for c, _ in compressed])
    return [compression.decompress(r, c) for r, (_, c) in zip(reduced, compressed)]


# ---- join, barrier -----------------------------------------------------------------------
def join(device=-1):
    """This rank has finished its data: until every rank has joined, it contributes zeros to
    the other ranks' allreduces (Average still divides by the full size); any other collective
    the others submit meanwhile fails on them at once with a MismatchError (a RuntimeError).
    Blocks until every rank joined and returns the rank that joined last. Global set only.

    device: where Horovod makes its temporary zero tensors (-1: CPU). Accepted and not needed
    here (the library supplies the zeros), so `hvd.join(hvd.local_rank())` works as in Horovod.
    """
    if isinstance(device, bool) or not isinstance(device, int):
        raise TypeError(f"join(device=...) expects an int device id, got {type(device).__name__}")
    return _C.join()


def barrier(process_set=global_process_set):
    """Returns once every rank of the set has called barrier()."""
    _C.barrier(_set_id(process_set))
