"""Collectives on numpy arrays. Zero-copy: the library reads and writes the arrays' memory.

Functions ending in ``_`` work in place (the array must be C-contiguous and writable); the
others leave their input untouched and return a new array. ``*_async`` functions return a
Handle: ``poll(handle)`` never blocks, ``synchronize(handle)`` waits (the GIL is released)
and returns the result.
"""

import numpy as np

from . import _C
from ._basics import (Average, _group_names, _name, _op_value, _reducescatter_op, _set_id,
                      global_process_set)

Handle = _C.Handle


def _as_input(tensor):
    """A C-contiguous array with tensor's values (no copy when it already is one)."""
    return np.asarray(tensor, order="C")


def _writable(tensor):
    if not isinstance(tensor, np.ndarray):
        raise TypeError(f"in-place operations need a numpy.ndarray, got {type(tensor).__name__}")
    return tensor


def poll(handle):
    """True once the operation of `handle` has completed. Never blocks."""
    return handle.poll()


def synchronize(handle, timeout=None):
    """Waits for `handle` (GIL released) and returns its result. Raises the operation's error:
    HorovodInternalError (RuntimeError) for a failure across ranks. With a timeout (seconds),
    raises HorovodTimeoutError on expiry; the operation goes on."""
    if timeout is not None:
        handle.wait(timeout)
    return handle.result()


# ---- allreduce ---------------------------------------------------------------------------
def allreduce_async(tensor, op=Average, name=None, prescale_factor=1.0, postscale_factor=1.0,
                    process_set=global_process_set):
    """Reduces `tensor` across ranks into a new array. Returns a Handle."""
    x = _as_input(tensor)
    return _C.allreduce_async(x, np.empty_like(x), name, op, prescale_factor, postscale_factor,
                              process_set, None, False)


def allreduce_async_(tensor, op=Average, name=None, prescale_factor=1.0, postscale_factor=1.0,
                     process_set=global_process_set):
    """Reduces `tensor` across ranks in place. Returns a Handle."""
    return _C.allreduce_async(_writable(tensor), None, name, op, prescale_factor,
                              postscale_factor, process_set, None, False)


def allreduce(tensor, op=Average, name=None, prescale_factor=1.0, postscale_factor=1.0,
              process_set=global_process_set):
    """Returns the reduction of `tensor` across ranks (a new array)."""
    return synchronize(allreduce_async(tensor, op, name, prescale_factor, postscale_factor,
                                       process_set))


def allreduce_(tensor, op=Average, name=None, prescale_factor=1.0, postscale_factor=1.0,
               process_set=global_process_set):
    """Reduces `tensor` in place and returns it."""
    return synchronize(allreduce_async_(tensor, op, name, prescale_factor, postscale_factor,
                                        process_set))


def grouped_allreduce_async_(tensors, op=Average, name=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=global_process_set):
    """Reduces a list of arrays in place as one unit. Returns one Handle whose result is the
    list."""
    sid = _set_id(process_set)
    tensors = [_writable(t) for t in tensors]
    return _C.grouped_allreduce_async(tensors, _group_names(name, len(tensors)), _op_value(op),
                                      float(prescale_factor), float(postscale_factor), sid)


def grouped_allreduce_async(tensors, op=Average, name=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=global_process_set):
    """Reduces copies of a list of arrays as one unit. Returns one Handle (result: a list)."""
    copies = [np.array(t, order="C", copy=True) for t in tensors]
    return grouped_allreduce_async_(copies, op, name, prescale_factor, postscale_factor,
                                    process_set)


def grouped_allreduce(tensors, op=Average, name=None, prescale_factor=1.0, postscale_factor=1.0,
                      process_set=global_process_set):
    return synchronize(grouped_allreduce_async(tensors, op, name, prescale_factor,
                                               postscale_factor, process_set))


def grouped_allreduce_(tensors, op=Average, name=None, prescale_factor=1.0, postscale_factor=1.0,
                       process_set=global_process_set):
    return synchronize(grouped_allreduce_async_(tensors, op, name, prescale_factor,
                                                postscale_factor, process_set))


# ---- allgather ---------------------------------------------------------------------------
def allgather_async(tensor, name=None, process_set=global_process_set):
    """Concatenates every rank's array along axis 0 (the first dimension may differ). The
    result is a new array allocated by the library."""
    sid = _set_id(process_set)
    return _C.allgather_async(_as_input(tensor), _name(name), sid)


def allgather(tensor, name=None, process_set=global_process_set):
    return synchronize(allgather_async(tensor, name, process_set))


# ---- broadcast ---------------------------------------------------------------------------
def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    """Replaces `tensor` in place by its value on root_rank. Returns a Handle."""
    sid = _set_id(process_set)
    return _C.broadcast_async(_writable(tensor), int(root_rank), _name(name), sid)


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    """Broadcasts a copy of `tensor`. Returns a Handle whose result is the new array."""
    return broadcast_async_(np.array(tensor, order="C", copy=True), root_rank, name, process_set)


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    return synchronize(broadcast_async(tensor, root_rank, name, process_set))


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


def grouped_allgather_async(tensors, name=None, process_set=global_process_set):
    """Allgathers a list of arrays as one unit. Returns one Handle whose result is the list of
    new arrays."""
    sid = _set_id(process_set)
    tensors = [_as_input(t) for t in tensors]
    return _C.grouped_allgather_async(tensors, _group_names(name, len(tensors)), sid)


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    return synchronize(grouped_allgather_async(tensors, name, process_set))


# ---- alltoall ----------------------------------------------------------------------------
def _splits_list(splits):
    if splits is None:
        return []
    if hasattr(splits, "tolist"):
        splits = splits.tolist()
    return [int(s) for s in splits]


def _splits_dtype(splits):
    return splits.dtype if isinstance(splits, np.ndarray) else np.int32


def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    """Sends splits[r] rows (axis 0) of `tensor` to rank r of the set, in order; None splits
    axis 0 evenly. Returns a Handle whose result is (output, received_splits): the rows every
    rank sent this one, concatenated in rank order, and the number of rows from each."""
    sid = _set_id(process_set)
    return _C.alltoall_async(_as_input(tensor), _splits_list(splits), _name(name), sid)


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Returns the concatenation of what every rank sent this one; with `splits` given, returns
    (output, received_splits) as horovod.torch does."""
    output, received = synchronize(alltoall_async(tensor, splits, name, process_set))
    if splits is None:
        return output
    return output, received.astype(_splits_dtype(splits))


# ---- reducescatter -----------------------------------------------------------------------
def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set,
                        prescale_factor=1.0, postscale_factor=1.0):
    """Reduces `tensor` (Sum or Average) across the set and gives each rank its slice of axis 0
    (the first dim0 % size ranks get one row more). Returns a Handle (result: a new array)."""
    sid = _set_id(process_set)
    return _C.reducescatter_async(_as_input(tensor), _name(name), _reducescatter_op(op),
                                  float(prescale_factor), float(postscale_factor), sid)


def reducescatter(tensor, name=None, op=Average, process_set=global_process_set,
                  prescale_factor=1.0, postscale_factor=1.0):
    return synchronize(reducescatter_async(tensor, name, op, process_set, prescale_factor,
                                           postscale_factor))


def grouped_reducescatter_async(tensors, name=None, op=Average, process_set=global_process_set,
                                prescale_factor=1.0, postscale_factor=1.0):
    """Reduce-scatters a list of arrays as one unit; one Handle whose result is a list."""
    sid = _set_id(process_set)
    tensors = [_as_input(t) for t in tensors]
    return _C.grouped_reducescatter_async(tensors, _group_names(name, len(tensors)),
                                          _reducescatter_op(op), float(prescale_factor),
                                          float(postscale_factor), sid)


def grouped_reducescatter(tensors, name=None, op=Average, process_set=global_process_set,
                          prescale_factor=1.0, postscale_factor=1.0):
    return synchronize(grouped_reducescatter_async(tensors, name, op, process_set,
                                                   prescale_factor, postscale_factor))


# ---- join, barrier -----------------------------------------------------------------------
def join(device=-1):
    """This rank has no more data: until every rank has joined it contributes zeros to the
    other ranks' allreduces (Average still divides by the full size); any other collective
    issued meanwhile fails on every rank. Returns the last rank to join (the same everywhere).
    Global set only. device: Horovod's device for its zero tensors; accepted and not needed
    (the library supplies the zeros)."""
    if isinstance(device, bool) or not isinstance(device, int):
        raise TypeError(f"join(device=...) expects an int device id, got {type(device).__name__}")
    return _C.join()


def barrier(process_set=global_process_set):
    """Returns once every rank of the set has called barrier() (the GIL is released while
    waiting)."""
    _C.barrier(_set_id(process_set))
