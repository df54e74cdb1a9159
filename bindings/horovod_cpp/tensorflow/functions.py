"""allreduce with compression and IndexedSlices, grouped_allreduce, reducescatter, and the
variable and object broadcasts of horovod.tensorflow."""

import tensorflow as tf

from .. import _objects
from .._basics import (Average, Sum, global_process_set,
                       handle_average_backwards_compatibility, rank)
from .compression import Compression
from .mpi_ops import (_allreduce, _executing_eagerly, _grouped_allreduce,
                      _grouped_reducescatter, _normalize_name, _reducescatter, _set_size_of,
                      allgather, broadcast)


def _sparse_allreduce(slices, op, prescale_factor, postscale_factor, name, process_set):
    """IndexedSlices: every rank's rows and indices gathered (a sum of the sparse gradients
    once densified); for Average the values divided by the set's size as Horovod does (a true
    division, so integer values become floating point)."""
    if op not in (Sum, Average):
        raise NotImplementedError("horovod_cpp: IndexedSlices support op=Sum and op=Average "
                                  "only (or pass sparse_as_dense=True)")
    if float(prescale_factor) != 1.0 or float(postscale_factor) != 1.0:
        raise NotImplementedError("horovod_cpp: prescale_factor and postscale_factor are not "
                                  "supported with tf.IndexedSlices (as in Horovod)")
    vname = None if name is None else f"{name}.values"
    iname = None if name is None else f"{name}.indices"
    values = allgather(slices.values, name=vname, process_set=process_set)
    indices = allgather(slices.indices, name=iname, process_set=process_set)
    if op == Average:
        values = tf.math.truediv(values, tf.cast(_set_size_of(process_set), values.dtype))
    return tf.IndexedSlices(values, indices, dense_shape=slices.dense_shape)


def allreduce(tensor, average=None, device_dense="", device_sparse="",
              compression=Compression.none, op=None, prescale_factor=1.0, postscale_factor=1.0,
              name=None, process_set=global_process_set, ignore_name_scope=False):
    """Reduces `tensor` over the ranks of the process set (default op: Average).

    tf.IndexedSlices are gathered (values and indices) rather than reduced. `compression`
    applies to dense tensors. device_dense/device_sparse are accepted for compatibility (every
    tensor is reduced from host memory)."""
    op = handle_average_backwards_compatibility(op, average)
    if isinstance(tensor, tf.IndexedSlices):
        return _sparse_allreduce(tensor, op, prescale_factor, postscale_factor, name,
                                 process_set)
    tensor = tf.convert_to_tensor(tensor)
    compressed, ctx = compression.compress(tensor)
    reduced = _allreduce(compressed, name=name, op=op, prescale_factor=prescale_factor,
                         postscale_factor=postscale_factor, process_set=process_set)
    return compression.decompress(reduced, ctx)


def grouped_allreduce(tensors, average=None, device_dense="", device_sparse="",
                      compression=Compression.none, op=None, prescale_factor=1.0,
                      postscale_factor=1.0, process_set=global_process_set,
                      ignore_name_scope=False, name=None):
    """Reduces a list of tensors negotiated and fused as one unit (one group per dtype);
    IndexedSlices among them are gathered."""
    op = handle_average_backwards_compatibility(op, average)
    tensors = list(tensors)
    if not tensors:
        return []
    out = [None] * len(tensors)
    dense_idx, dense, ctxs = [], [], []
    for i, t in enumerate(tensors):
        if isinstance(t, tf.IndexedSlices):
            sub = None if name is None else f"{name}.sparse{i}"
            out[i] = _sparse_allreduce(t, op, prescale_factor, postscale_factor, sub,
                                       process_set)
        else:
            c, ctx = compression.compress(tf.convert_to_tensor(t))
            dense_idx.append(i)
            dense.append(c)
            ctxs.append(ctx)
    if dense:
        reduced = _grouped_allreduce(dense, name=name, op=op, prescale_factor=prescale_factor,
                                     postscale_factor=postscale_factor, process_set=process_set)
        for i, r, ctx in zip(dense_idx, reduced, ctxs):
            out[i] = compression.decompress(r, ctx)
    return out


def reducescatter(tensor, device_dense="", compression=Compression.none, op=Average, name=None,
                  process_set=global_process_set, ignore_name_scope=False, prescale_factor=1.0,
                  postscale_factor=1.0):
    """Reduces `tensor` (Sum or Average) and returns this rank's slice of dimension 0 (the
    first dim0 % size ranks get one row more)."""
    tensor = tf.convert_to_tensor(tensor)
    compressed, ctx = compression.compress(tensor)
    out = _reducescatter(compressed, name=name, op=op, prescale_factor=prescale_factor,
                         postscale_factor=postscale_factor, process_set=process_set)
    return compression.decompress(out, ctx)


def grouped_reducescatter(tensors, device_dense="", compression=Compression.none, op=Average,
                          name=None, process_set=global_process_set, ignore_name_scope=False,
                          prescale_factor=1.0, postscale_factor=1.0):
    """Reduce-scatters a list of tensors negotiated and fused as one unit (one group per
    dtype); returns this rank's slice of each, in input order."""
    tensors = [tf.convert_to_tensor(t) for t in tensors]
    if not tensors:
        return []
    pairs = [compression.compress(t) for t in tensors]
    out = _grouped_reducescatter([c for c, _ in pairs], name=name, op=op,
                                 prescale_factor=prescale_factor,
                                 postscale_factor=postscale_factor, process_set=process_set)
    return [compression.decompress(o, ctx) for o, (_, ctx) in zip(out, pairs)]


def broadcast_(variables, root_rank, name=None, process_set=global_process_set):
    """In place: assigns every variable of `variables` (one or a list) its value on root_rank
    (a global rank); returns the variables' new values (a list when given a list)."""
    single = not isinstance(variables, (list, tuple))
    variables = [variables] if single else list(variables)
    for v in variables:
        if not isinstance(v, tf.Variable) and not hasattr(v, "assign"):
            raise TypeError("horovod_cpp.broadcast_ updates variables in place; got "
                            f"{type(v).__name__} (use broadcast() for tensors)")
    out = []
    for i, v in enumerate(variables):
        sub = None if name is None else (name if single else f"{name}.{i}")
        if sub is None and not _executing_eagerly():
            sub = "HorovodBroadcastInplace_%s" % _normalize_name(v.name)
        value = broadcast(tf.convert_to_tensor(v), root_rank, name=sub, process_set=process_set)
        out.append(v.assign(value))
    return tf.convert_to_tensor(out[0]) if single else [tf.convert_to_tensor(o) for o in out]


def broadcast_variables(variables, root_rank, process_set=global_process_set, inplace=False):
    """Assigns every variable its value on root_rank (a global rank). Eagerly the variables
    are updated at once; in a graph this returns the op that does it."""
    variables = list(variables)
    if _executing_eagerly():
        for v in variables:
            v.assign(broadcast(v, root_rank, process_set=process_set))
        return None
    return tf.group(*[
        v.assign(broadcast(v, root_rank, process_set=process_set,
                           name="HorovodBroadcast_%s" % _normalize_name(v.name)))
        for v in variables])


def broadcast_global_variables(root_rank):
    """TF1 graphs: the op that broadcasts every global variable from root_rank."""
    if _executing_eagerly():
        raise RuntimeError(
            "hvd.broadcast_global_variables() does not support eager execution. Please use "
            "`hvd.broadcast_variables(<model/optimizer variables>)` instead.")
    return broadcast_variables(tf.compat.v1.global_variables(), root_rank)


def broadcast_object(obj, root_rank=0, session=None, name=None, process_set=global_process_set):
    """Returns root_rank's picklable `obj` on every rank (session is accepted for
    compatibility; the object travels outside the graph)."""
    return _objects.broadcast_object(obj, root_rank, name=name, process_set=process_set)


def allgather_object(obj, session=None, name=None, process_set=global_process_set):
    """Returns the list of every rank's picklable `obj`, in rank order."""
    return _objects.allgather_object(obj, name=name, process_set=process_set)
