"""horovod_cpp.torch: a drop-in replacement for horovod.torch on CPU tensors.

    import horovod_cpp.torch as hvd   # instead of: import horovod.torch as hvd
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
from .ddp import DistributedDataParallel
from .elastic import HostsUpdatedInterrupt
from .functions import (allgather_object, broadcast_object, broadcast_optimizer_state,
                        broadcast_parameters)
from .mpi_ops import (allgather, allgather_async, allreduce, allreduce_, allreduce_async,
                      allreduce_async_, alltoall, alltoall_async, barrier, broadcast, broadcast_,
                      broadcast_async, broadcast_async_, grouped_allgather,
                      grouped_allgather_async, grouped_allreduce, grouped_allreduce_,
                      grouped_allreduce_async, grouped_allreduce_async_, grouped_reducescatter,
                      grouped_reducescatter_async, join, poll, reducescatter,
                      reducescatter_async, sparse_allreduce_async, synchronize,
                      synchronize_all)
from .optimizer import DistributedOptimizer
from .semisync import StepGuard
from .sync_batch_norm import SyncBatchNorm

import torch.distributed as _dist  # noqa: E402

if _dist.is_available():  # torch.distributed's backend "horovod_cpp"
    from .process_group import init_process_group  # noqa: E402
    from .process_group import register as _register_backend  # noqa: E402
    _register_backend()
