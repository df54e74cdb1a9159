"""horovod_cpp.keras (also horovod_cpp.tensorflow.keras): a drop-in replacement for
horovod.keras / horovod.tensorflow.keras on Keras 3 with the TensorFlow backend.

    import horovod_cpp.keras as hvd   # instead of: import horovod.tensorflow.keras as hvd
"""

import keras

from ..._basics import (Adasum, Average, HorovodInternalError, Max, Min, ProcessSet, Product,
                        Sum, add_process_set, ccl_built, cross_rank, cross_size, cuda_built,
                        ddl_built, gloo_built, gloo_enabled, global_process_set, init,
                        is_homogeneous, is_initialized, local_rank, local_size, mpi_built,
                        mpi_enabled, mpi_threads_supported, nccl_built, rank, remove_process_set,
                        rocm_built, shutdown, size, start_timeline, stop_timeline)
from .. import (allgather, allgather_object, allreduce, alltoall, barrier, broadcast,
                broadcast_object, grouped_allgather, grouped_allreduce, grouped_reducescatter,
                join, reducescatter, sycl_built)
from ..compression import Compression
from ..functions import broadcast_variables
from . import callbacks, elastic
from .optimizer import DistributedOptimizer, PartialDistributedOptimizer, _wrap_in_place
from ..gradients import GradientReducer
from ..sync_batch_norm import SyncBatchNormalization


def broadcast_global_variables(root_rank, model=None):
    """Broadcasts `model`'s weights and its optimizer's state from root_rank (Keras 3 has no
    global variable collection, so the model is needed)."""
    if model is None:
        raise ValueError("horovod_cpp.keras.broadcast_global_variables(root_rank, model): Keras 3 "
                         "has no global variables; pass the model (or use "
                         "callbacks.BroadcastGlobalVariablesCallback)")
    broadcast_variables(model.variables, root_rank)
    if model.optimizer is not None:
        broadcast_variables(model.optimizer.variables, root_rank)


def load_model(filepath, custom_optimizers=None, custom_objects=None,
               compression=Compression.none, **kwargs):
    """keras.models.load_model, then the model's optimizer (with its restored state) wrapped
    as a DistributedOptimizer. custom_optimizers: optimizer classes the file may name."""
    objects = dict(custom_objects or {})
    for cls in custom_optimizers or []:
        objects[cls.__name__] = cls
    model = keras.models.load_model(filepath, custom_objects=objects or None, **kwargs)
    if model.optimizer is not None and not getattr(model.optimizer, "_hvd_wrapped", False):
        reducer = GradientReducer(compression=compression)
        _wrap_in_place(model.optimizer, reducer, 1, False)
    return model
