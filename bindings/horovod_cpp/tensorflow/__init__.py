"""horovod_cpp.tensorflow: a drop-in replacement for horovod.tensorflow on TensorFlow 2.

    import horovod_cpp.tensorflow as hvd   # instead of: import horovod.tensorflow as hvd

The collectives are real TensorFlow ops (asynchronous CPU kernels over the horovod_cpp
runtime), usable eagerly and inside tf.function, with gradients. See docs/tensorflow.md.
"""

from .._basics import (Adasum, Average, HorovodInternalError, HorovodTimeoutError, Max, Min,
                       MismatchError, NotInitializedError, ProcessSet, Product, ShutdownError,
                       Sum, add_process_set, ccl_built, cross_rank, cross_size, cuda_built,
                       ddl_built, gloo_built, gloo_enabled, global_process_set, init,
                       is_homogeneous, is_initialized, local_rank, local_size, mpi_built,
                       mpi_enabled, mpi_threads_supported, nccl_built, rank, remove_process_set,
                       rocm_built, shutdown, size, start_timeline, stop_timeline, sycl_built)
from . import elastic
from .compression import Compression
from .elastic import HostsUpdatedInterrupt
from .functions import (allgather_object, allreduce, broadcast_, broadcast_global_variables,
                        broadcast_object, broadcast_variables, grouped_allreduce,
                        grouped_reducescatter, handle_average_backwards_compatibility,
                        reducescatter)
from .gradient_tape import DistributedGradientTape, PartialDistributedGradientTape
from .mpi_ops import allgather, alltoall, barrier, broadcast, grouped_allgather, join
from .optimizer_v1 import BroadcastGlobalVariablesHook, DistributedOptimizerV1
from .sync_batch_norm import SyncBatchNormalization


def DistributedOptimizer(optimizer, name=None, use_locking=False, device_dense="",
                         device_sparse="", compression=Compression.none, sparse_as_dense=False,
                         backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0,
                         average_aggregated_gradients=False, num_groups=0, groups=None,
                         process_set=global_process_set, scale_local_gradients=True):
    """Wraps an optimizer so that gradients are averaged across ranks before they are applied:
    a tf.compat.v1.train.Optimizer (session style) or a Keras optimizer (then the same as
    horovod_cpp.keras.DistributedOptimizer)."""
    import tensorflow as tf
    if isinstance(optimizer, tf.compat.v1.train.Optimizer):
        return DistributedOptimizerV1(
            optimizer, name=name, use_locking=use_locking, compression=compression,
            sparse_as_dense=sparse_as_dense, backward_passes_per_step=backward_passes_per_step,
            op=op, gradient_predivide_factor=gradient_predivide_factor,
            average_aggregated_gradients=average_aggregated_gradients, num_groups=num_groups,
            groups=groups, process_set=process_set, scale_local_gradients=scale_local_gradients)
    from .keras import DistributedOptimizer as _keras_optimizer
    return _keras_optimizer(
        optimizer, name=name, compression=compression, sparse_as_dense=sparse_as_dense,
        backward_passes_per_step=backward_passes_per_step, op=op,
        gradient_predivide_factor=gradient_predivide_factor,
        average_aggregated_gradients=average_aggregated_gradients, num_groups=num_groups,
        groups=groups, process_set=process_set, scale_local_gradients=scale_local_gradients)


def size_op(process_set_id=0, name=None):
    """The number of ranks of the set, as a tensor."""
    import tensorflow as tf
    from .mpi_ops import _process_set_of, _set_size_of
    return tf.constant(_set_size_of(_process_set_of(process_set_id)), dtype=tf.int32, name=name)


def rank_op(name=None):
    """This process's rank, as a tensor."""
    import tensorflow as tf
    return tf.constant(rank(), dtype=tf.int32, name=name)


def local_size_op(name=None):
    import tensorflow as tf
    return tf.constant(local_size(), dtype=tf.int32, name=name)


def local_rank_op(name=None):
    import tensorflow as tf
    return tf.constant(local_rank(), dtype=tf.int32, name=name)


def process_set_included_op(process_set_id=0, name=None):
    """1 (an int32 tensor) when this rank belongs to the process set `process_set_id`, else 0;
    ValueError for an id that is not registered."""
    import tensorflow as tf
    from .._basics import _registry
    if process_set_id not in _registry:
        raise ValueError(f"horovod_cpp: process set id {process_set_id} does not exist "
                         f"(registered ids: {sorted(_registry)})")
    included = process_set_id == 0 or bool(_registry[process_set_id].included())
    return tf.constant(1 if included else 0, dtype=tf.int32, name=name)
