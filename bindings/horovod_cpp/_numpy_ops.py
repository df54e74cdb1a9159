"""Collectives on numpy arrays. Zero-copy: the library reads and writes the arrays' memory.

Functions ending in ``_`` work in place (the array must be C-contiguous and writable); the
others leave their input untouched and return a new array. ``*_async`` functions return a
Handle: ``poll(handle)`` never blocks, ``synchronize(handle)`` waits (the GIL is released)
and returns the result.
"""

import numpy as np

from . import _C
from ._basics import Average, _check_process_set, _core_op, _name, _op_value, global_process_set

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
    _check_process_set(process_set)
    x = _as_input(tensor)
    out = np.empty_like(x)
    return _C.allreduce_async(x, out, _name(name), _op_value(op), float(prescale_factor),
                              float(postscale_factor))


def allreduce_async_(tensor, op=Average, name=None, prescale_factor=1.0, postscale_factor=1.0,
                     process_set=global_process_set):
    """Reduces `tensor` across ranks in place. Returns a Handle."""
    _check_process_set(process_set)
    return _C.allreduce_async(_writable(tensor), None, _name(name), _op_value(op),
                              float(prescale_factor), float(postscale_factor))


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


def _group_names(name, n):
    return [""] * n if name is None else [f"{name}.{i}" for i in range(n)]


def grouped_allreduce_async_(tensors, op=Average, name=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=global_process_set):
    """Reduces a list of arrays in place as one unit. Returns one Handle whose result is the
    list."""
    _check_process_set(process_set)
    tensors = [_writable(t) for t in tensors]
    return _C.grouped_allreduce_async(tensors, _group_names(name, len(tensors)), _op_value(op),
                                      float(prescale_factor), float(postscale_factor))


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
    _check_process_set(process_set)
    return _C.allgather_async(_as_input(tensor), _name(name))


def allgather(tensor, name=None, process_set=global_process_set):
    return synchronize(allgather_async(tensor, name, process_set))


# ---- broadcast ---------------------------------------------------------------------------
def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    """Replaces `tensor` in place by its value on root_rank. Returns a Handle."""
    _check_process_set(process_set)
    return _C.broadcast_async(_writable(tensor), int(root_rank), _name(name))


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    """Broadcasts a copy of `tensor`. Returns a Handle whose result is the new array."""
    return broadcast_async_(np.array(tensor, order="C", copy=True), root_rank, name, process_set)


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    return synchronize(broadcast_async(tensor, root_rank, name, process_set))


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


# ---- not yet in the core -----------------------------------------------------------------
def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Scatters slices of `tensor` to every rank and gathers theirs (not in the core yet)."""
    _check_process_set(process_set)
    return _core_op("alltoall")(_as_input(tensor), splits, _name(name))


def reducescatter(tensor, op=Average, name=None, process_set=global_process_set):
    """Reduces `tensor` and scatters slices of the result along axis 0 (not in the core yet)."""
    _check_process_set(process_set)
    return _core_op("reducescatter")(_as_input(tensor), _op_value(op), _name(name))


def join(device=-1):
    """Marks this rank as out of data; returns the last rank to join (not in the core yet)."""
    return _core_op("join")(device)


def barrier(process_set=global_process_set):
    """Returns once every rank has called barrier() (the GIL is released while waiting)."""
    _check_process_set(process_set)
    _C.barrier()
