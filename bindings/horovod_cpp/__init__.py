"""horovod_cpp: Horovod-style synchronous data-parallel training over MPI.

``import horovod_cpp as hvd`` gives collectives on numpy arrays; ``import horovod_cpp.torch
as hvd`` is a drop-in replacement for ``horovod.torch``. Run with ``mpirun -np N python ...``.
"""

from ._basics import (Adasum, Average, BackendError, HorovodInternalError, HorovodTimeoutError,
                      InvalidArgumentError, Max, Min, MismatchError, NotInitializedError,
                      ProcessSet, Product, ShutdownError, Sum, add_process_set, ccl_built,
                      cross_rank, cross_size, cuda_built, ddl_built, gloo_built, gloo_enabled,
                      global_process_set, init, is_homogeneous, is_initialized, local_rank,
                      local_size, mpi_built, mpi_enabled, mpi_threads_supported, nccl_built,
                      rank, remove_process_set, rocm_built, shutdown, size, start_timeline,
                      stop_timeline, sycl_built)
from ._numpy_ops import (Handle, allgather, allgather_async, allreduce, allreduce_,
                         allreduce_async, allreduce_async_, alltoall, alltoall_async, barrier,
                         broadcast, broadcast_, broadcast_async, broadcast_async_,
                         grouped_allgather, grouped_allgather_async, grouped_allreduce,
                         grouped_allreduce_, grouped_allreduce_async, grouped_allreduce_async_,
                         grouped_reducescatter, grouped_reducescatter_async, join, poll,
                         reducescatter, reducescatter_async, synchronize)
from ._objects import allgather_object, broadcast_object
from . import elastic
from .elastic import HostsUpdatedInterrupt

__version__ = "0.1.0"


def run(func, *args, **kwargs):
    """Horovod's `horovod.run`: launches a job that calls `func` on every rank and returns the
    values in rank order; the arguments are those of `horovod_cpp.runner.run`
    (runner/run_func.py, docs/running.md). The launcher is imported only when called."""
    from .runner.run_func import run as run_job
    return run_job(func, *args, **kwargs)
