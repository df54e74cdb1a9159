"""horovod.tensorflow's collectives as real TensorFlow ops, with their gradients.

The ops live in the C++ library ``_tf_ops.so`` (adapters/tensorflow): asynchronous CPU
kernels that enqueue into the horovod_cpp runtime and complete from its completion thread.
They run eagerly and inside ``tf.function``. Naming follows Horovod: in eager mode an unnamed
collective is matched across ranks by call order; in a graph it is matched by its node's name,
which is unique in the graph and the same on every rank.
"""

import os
import re

import tensorflow as tf
from tensorflow.python.framework import ops as _tf_ops

from .._basics import (Adasum, Average, Max, Min, Product, Sum, _op_value, _reducescatter_op,
                       _set_id, global_process_set, rank, size)
from .compression import Compression

_LIB_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_tf_ops.so")
if not os.path.exists(_LIB_PATH):
    raise ImportError(
        "horovod_cpp.tensorflow: the op library _tf_ops.so was not built. Reinstall horovod_cpp "
        "with TensorFlow importable by the installing Python (pip install . from an environment "
        "that has tensorflow).")
MPI_LIB = tf.load_op_library(_LIB_PATH)


def _executing_eagerly():
    return tf.executing_eagerly()


def _normalize_name(name):
    """A tensor or op name made safe for a node name."""
    return re.sub("[^a-zA-Z0-9_]", "_", name)


def _naming(kind, tensor, name):
    """(node name, tensor_name attr, name_from_node attr) for a collective on `tensor`."""
    if _executing_eagerly():
        return None, "" if name is None else str(name), False
    if name is None:
        name = "Horovod%s_%s" % (kind, _normalize_name(tensor.name))
    return _normalize_name(str(name)), "", True


def _checked_set_id(process_set):
    """The core's id of `process_set`; ValueError (as in Horovod) for a set whose id is not
    registered, before any op is built."""
    from .._basics import _registry
    set_id = _set_id(process_set)
    if set_id not in _registry:
        raise ValueError(f"horovod_cpp: process set id {set_id} does not exist (registered ids: "
                         f"{sorted(_registry)}); register it with add_process_set() or "
                         "init(process_sets=...)")
    return set_id


def _process_set_of(process_set_id):
    """A ProcessSet stand-in carrying only an id (gradients know the id, not the object)."""
    from .._basics import _registry
    return _registry.get(process_set_id, global_process_set)


def _set_size_of(process_set):
    return size() if process_set is None or process_set.process_set_id == 0 else process_set.size()


def _set_rank_of(process_set):
    return rank() if process_set is None or process_set.process_set_id == 0 else process_set.rank()


# ---- the raw ops -------------------------------------------------------------------------
def _allreduce(tensor, name=None, op=Sum, prescale_factor=1.0, postscale_factor=1.0,
               process_set=global_process_set, ignore_name_scope=False):
    """The allreduce op itself (no compression, no IndexedSlices)."""
    node, tname, from_node = _naming("Allreduce", tensor, name)
    return MPI_LIB.horovod_cpp_allreduce(
        tensor, reduce_op=_op_value(op), prescale_factor=float(prescale_factor),
        postscale_factor=float(postscale_factor), tensor_name=tname, name_from_node=from_node,
        process_set_id=_checked_set_id(process_set), name=node)


@_tf_ops.RegisterGradient("HorovodCppAllreduce")
def _allreduce_grad(op, grad):
    """d(allreduce)/dx: the same allreduce of the incoming gradient (Sum and Average; the
    scale factors commute with the sum)."""
    reduce_op = op.get_attr("reduce_op")
    if reduce_op not in (Sum, Average):
        raise NotImplementedError("horovod_cpp: allreduce gradients exist for op=Sum and "
                                  "op=Average only")
    return _allreduce(grad, op=reduce_op, prescale_factor=op.get_attr("prescale_factor"),
                      postscale_factor=op.get_attr("postscale_factor"),
                      process_set=_process_set_of(op.get_attr("process_set_id")))


def _grouped_by_dtype(kind, tensors, name, call):
    """Runs call(group, node, tensor_name, name_from_node) once per dtype (an op's inputs share
    one dtype) and returns the outputs in input order."""
    tensors = list(tensors)
    by_dtype = {}
    for i, t in enumerate(tensors):
        by_dtype.setdefault(t.dtype, []).append(i)
    out = [None] * len(tensors)
    for dtype, idx in by_dtype.items():
        group = [tensors[i] for i in idx]
        if _executing_eagerly():
            node, tname, from_node = None, "" if name is None else f"{name}.{dtype.name}", False
        else:
            base = name if name is not None else "HorovodGrouped%s_%s_%s" % (
                kind, group[0].name, group[-1].name)
            node, tname, from_node = _normalize_name(str(base)), "", True
        for i, r in zip(idx, call(group, node, tname, from_node)):
            out[i] = r
    return out


def _grouped_reducing(kind, raw_op, reduce_op, tensors, name, prescale_factor,
                      postscale_factor, process_set):
    """A grouped reducing op (`raw_op`, reduce_op the core's value) once per dtype."""
    set_id = _checked_set_id(process_set)
    return _grouped_by_dtype(kind, tensors, name, lambda group, node, tname, from_node: raw_op(
        group, reduce_op=reduce_op, prescale_factor=float(prescale_factor),
        postscale_factor=float(postscale_factor), tensor_name=tname, name_from_node=from_node,
        process_set_id=set_id, name=node))


def _grouped_allreduce(tensors, name=None, op=Sum, prescale_factor=1.0, postscale_factor=1.0,
                       process_set=global_process_set):
    """One grouped op per dtype; results in input order."""
    return _grouped_reducing("Allreduce", MPI_LIB.horovod_cpp_grouped_allreduce, _op_value(op),
                             tensors, name, prescale_factor, postscale_factor, process_set)


@_tf_ops.RegisterGradient("HorovodCppGroupedAllreduce")
def _grouped_allreduce_grad(op, *grads):
    reduce_op = op.get_attr("reduce_op")
    if reduce_op not in (Sum, Average):
        raise NotImplementedError("horovod_cpp: allreduce gradients exist for op=Sum and "
                                  "op=Average only")
    return _grouped_allreduce(list(grads), op=reduce_op,
                              prescale_factor=op.get_attr("prescale_factor"),
                              postscale_factor=op.get_attr("postscale_factor"),
                              process_set=_process_set_of(op.get_attr("process_set_id")))


def allgather(tensor, name=None, ignore_name_scope=False, process_set=global_process_set):
    """Concatenates every rank's `tensor` along dimension 0 (which may differ by rank); the
    other dimensions and the dtype must agree."""
    tensor = tf.convert_to_tensor(tensor)
    node, tname, from_node = _naming("Allgather", tensor, name)
    return MPI_LIB.horovod_cpp_allgather(tensor, tensor_name=tname, name_from_node=from_node,
                                         process_set_id=_checked_set_id(process_set), name=node)


@_tf_ops.RegisterGradient("HorovodCppAllgather")
def _allgather_grad(op, grad):
    """As Horovod: the gradient averaged over the ranks, then this rank's rows."""
    ps = _process_set_of(op.get_attr("process_set_id"))
    grad = _allreduce(grad, op=Average, process_set=ps)
    d = tf.reshape(tf.shape(op.inputs[0], out_type=tf.int64)[0], [1])
    sizes = tf.reshape(allgather(d, process_set=ps), [_set_size_of(ps)])
    return tf.split(grad, num_or_size_splits=sizes, axis=0)[_set_rank_of(ps)]


def grouped_allgather(tensors, name=None, ignore_name_scope=False,
                      process_set=global_process_set):
    """Allgathers a list of tensors negotiated and fused as one unit (one group per dtype);
    returns the gathered tensors in input order."""
    tensors = [tf.convert_to_tensor(t) for t in tensors]
    if not tensors:
        return []
    set_id = _checked_set_id(process_set)
    return _grouped_by_dtype("Allgather", tensors, name, lambda group, node, tname, from_node:
                             MPI_LIB.horovod_cpp_grouped_allgather(
                                 group, tensor_name=tname, name_from_node=from_node,
                                 process_set_id=set_id, name=node))


@_tf_ops.RegisterGradient("HorovodCppGroupedAllgather")
def _grouped_allgather_grad(op, *grads):
    """Each tensor as in allgather's gradient, the collectives grouped."""
    ps = _process_set_of(op.get_attr("process_set_id"))
    grads = _grouped_allreduce(list(grads), op=Average, process_set=ps)
    dims = [tf.reshape(tf.shape(x, out_type=tf.int64)[0], [1]) for x in op.inputs]
    n, r = _set_size_of(ps), _set_rank_of(ps)
    sizes = grouped_allgather(dims, process_set=ps)
    return [tf.split(g, num_or_size_splits=tf.reshape(s, [n]), axis=0)[r]
            for g, s in zip(grads, sizes)]


def broadcast(tensor, root_rank, name=None, ignore_name_scope=False,
              process_set=global_process_set):
    """`tensor` as it is on root_rank (a global rank), on every rank of the set."""
    tensor = tf.convert_to_tensor(tensor)
    node, tname, from_node = _naming("Broadcast", tensor, name)
    return MPI_LIB.horovod_cpp_broadcast(tensor, root_rank=int(root_rank), tensor_name=tname,
                                         name_from_node=from_node,
                                         process_set_id=_checked_set_id(process_set), name=node)


@_tf_ops.RegisterGradient("HorovodCppBroadcast")
def _broadcast_grad(op, grad):
    """As Horovod: the averaged gradient on the root, zeros elsewhere."""
    ps = _process_set_of(op.get_attr("process_set_id"))
    reduced = _allreduce(grad, op=Average, process_set=ps)
    if rank() != op.get_attr("root_rank"):
        return reduced * 0
    return reduced


def alltoall(tensor, splits=None, name=None, ignore_name_scope=False,
             process_set=global_process_set):
    """Sends splits[r] rows of `tensor` to rank r (None: an even split). Returns the rows
    received (in rank order), and with `splits` given also the received splits."""
    tensor = tf.convert_to_tensor(tensor)
    splits_ = (tf.convert_to_tensor(splits) if splits is not None
               else tf.constant([], dtype=tf.int32))
    node, tname, from_node = _naming("Alltoall", tensor, name)
    output, rsplits = MPI_LIB.horovod_cpp_alltoall(
        tensor, splits_, tensor_name=tname, name_from_node=from_node,
        process_set_id=_checked_set_id(process_set), name=node)
    return (output, rsplits) if splits is not None else output


@_tf_ops.RegisterGradient("HorovodCppAlltoall")
def _alltoall_grad(op, grad_wrt_output, grad_wrt_received_splits):
    """The rows go back where they came from: alltoall with the received splits."""
    ps = _process_set_of(op.get_attr("process_set_id"))
    grad, _ = alltoall(grad_wrt_output, splits=op.outputs[1], process_set=ps)
    return [grad, None]


def _reducescatter(tensor, name=None, op=Average, prescale_factor=1.0, postscale_factor=1.0,
                   process_set=global_process_set):
    node, tname, from_node = _naming("Reducescatter", tensor, name)
    return MPI_LIB.horovod_cpp_reducescatter(
        tensor, reduce_op=_reducescatter_op(op), prescale_factor=float(prescale_factor),
        postscale_factor=float(postscale_factor), tensor_name=tname, name_from_node=from_node,
        process_set_id=_checked_set_id(process_set), name=node)


def _reducescatter_grad_scale(op):
    """As Horovod: the allgathered gradient times the set's size for Sum, unscaled for Average
    (then times the scale factors)."""
    ps = _process_set_of(op.get_attr("process_set_id"))
    scale = op.get_attr("prescale_factor") * op.get_attr("postscale_factor")
    if op.get_attr("reduce_op") == Sum:
        scale *= _set_size_of(ps)
    return ps, scale


@_tf_ops.RegisterGradient("HorovodCppReducescatter")
def _reducescatter_grad(op, grad):
    ps, scale = _reducescatter_grad_scale(op)
    g = allgather(grad, process_set=ps)
    return g if scale == 1.0 else g * tf.constant(scale, dtype=g.dtype)


def _grouped_reducescatter(tensors, name=None, op=Average, prescale_factor=1.0,
                           postscale_factor=1.0, process_set=global_process_set):
    """One grouped op per dtype; results in input order."""
    return _grouped_reducing("Reducescatter", MPI_LIB.horovod_cpp_grouped_reducescatter,
                             _reducescatter_op(op), tensors, name, prescale_factor,
                             postscale_factor, process_set)


@_tf_ops.RegisterGradient("HorovodCppGroupedReducescatter")
def _grouped_reducescatter_grad(op, *grads):
    ps, scale = _reducescatter_grad_scale(op)
    gathered = grouped_allgather(list(grads), process_set=ps)
    return [g if scale == 1.0 else g * tf.constant(scale, dtype=g.dtype) for g in gathered]


def join():
    """This rank has no more batches; returns the last rank to join (the same everywhere)."""
    return MPI_LIB.horovod_cpp_join()


def barrier(process_set=global_process_set):
    """Returns once every rank of the set has called barrier()."""
    return MPI_LIB.horovod_cpp_barrier(process_set_id=_checked_set_id(process_set))
