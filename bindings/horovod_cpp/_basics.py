"""Lifecycle, topology, build queries, reduction ops, process sets and errors.

Shared by ``horovod_cpp`` (numpy) and ``horovod_cpp.torch``. Everything here forwards to the
native module ``horovod_cpp._C``, a thin pybind11 layer over the C++ API.
"""

from . import _C

# ---- errors ------------------------------------------------------------------------------
#: A collective that failed across ranks (a RuntimeError, as in Horovod).
HorovodInternalError = _C.HorovodInternalError
#: Ranks disagreed on a collective (shape, dtype, op, root, ...). A HorovodInternalError.
MismatchError = _C.MismatchError
#: The runtime shut down before the operation completed. A HorovodInternalError.
ShutdownError = _C.ShutdownError
#: MPI reported a failure. A HorovodInternalError.
BackendError = _C.BackendError
#: Local misuse detected on this rank before any communication. A ValueError.
InvalidArgumentError = _C.InvalidArgumentError
#: Used before init() or after shutdown(). A ValueError, as in Horovod.
NotInitializedError = _C.NotInitializedError
#: A wait with a timeout expired (a TimeoutError); the operation goes on.
HorovodTimeoutError = _C.HorovodTimeoutError

# ---- reduction ops (integers, as in Horovod) ----------------------------------------------
Sum = _C.Sum
Average = _C.Average
Min = _C.Min
Max = _C.Max
Product = _C.Product
#: Horovod's Adasum. Accepted as a name; using it raises NotImplementedError.
Adasum = 5

_OPS = {Sum, Average, Min, Max, Product}


def _op_value(op):
    """Validates a reduction op and returns its integer value for _C."""
    if op == Adasum:
        raise NotImplementedError("horovod_cpp: op=Adasum is not supported (the core library "
                                  "implements Sum, Average, Min, Max and Product)")
    if op not in _OPS:
        raise ValueError(f"horovod_cpp: unknown reduction op {op!r}; use one of Sum, Average, "
                         "Min, Max, Product")
    return int(op)


def _core_op(name):
    """The native function `name`, or NotImplementedError when the core library lacks it.

    Collectives being added to the C++ core (alltoall, reducescatter, join, process sets,
    timeline) become available here as soon as bindings/src binds them.
    """
    fn = getattr(_C, name, None)
    if fn is None:
        raise NotImplementedError(
            f"horovod_cpp: {name} is not available yet: the C++ core library does not "
            "implement it in this version")
    return fn


def _name(name):
    """Empty names are replaced by the core with '<op>.noname.<n>' (call order)."""
    return "" if name is None else str(name)


# ---- lifecycle ---------------------------------------------------------------------------
_homogeneous = None


def init(comm=None, process_sets=None):
    """Starts horovod_cpp on every rank (collective). A second call is a no-op.

    comm: None for MPI_COMM_WORLD, or an mpi4py communicator (anything with py2f()).
    """
    global _homogeneous
    if _C.is_initialized():
        return
    if process_sets:
        _core_op("add_process_set")
    fortran = None
    if comm is not None:
        if isinstance(comm, (list, tuple)):
            raise NotImplementedError("horovod_cpp: init(comm=[ranks]) needs process sets, "
                                      "which the C++ core does not implement yet")
        if not hasattr(comm, "py2f"):
            raise ValueError("init(comm=...): expected an mpi4py communicator, got "
                             f"{type(comm).__name__}")
        fortran = int(comm.py2f())
    _C.init(fortran)
    # is_homogeneous() is answered locally later, so the one collective it needs runs here,
    # while every rank is known to be inside init().
    import numpy as np
    h = _C.allgather_async(np.array([_C.local_size()], dtype=np.int64), "horovod_cpp.init.local_size")
    sizes = h.result()
    _homogeneous = bool((sizes == sizes[0]).all())


def shutdown():
    """Stops horovod_cpp. Pending operations fail with ShutdownError. Idempotent."""
    _C.shutdown()


is_initialized = _C.is_initialized
rank = _C.rank
size = _C.size
local_rank = _C.local_rank
local_size = _C.local_size
cross_rank = _C.cross_rank
cross_size = _C.cross_size


def is_homogeneous():
    """True when every host runs the same number of ranks."""
    if not _C.is_initialized() or _homogeneous is None:
        raise NotInitializedError("horovod_cpp: is_homogeneous() called before init()")
    return _homogeneous


# ---- build queries -----------------------------------------------------------------------
def mpi_built():
    return bool(_C.mpi_built())


def mpi_enabled():
    """True: horovod_cpp always runs on MPI."""
    return bool(_C.mpi_built())


def mpi_threads_supported():
    """horovod_cpp asks MPI for MPI_THREAD_MULTIPLE and needs it; its availability is not
    exposed by the C++ API."""
    return _core_op("mpi_threads_supported")()


def gloo_built():
    return False


def gloo_enabled():
    return False


def nccl_built():
    return bool(_C.nccl_built())


def cuda_built():
    return bool(_C.cuda_built())


def ddl_built():
    return False


def ccl_built():
    return False


def rocm_built():
    return False


# ---- timeline ----------------------------------------------------------------------------
def start_timeline(file_path, mark_cycles=False):
    """Starts recording a timeline into file_path (not in the C++ core yet)."""
    return _core_op("start_timeline")(str(file_path), bool(mark_cycles))


def stop_timeline():
    return _core_op("stop_timeline")()


# ---- process sets ------------------------------------------------------------------------
class ProcessSet:
    """A subset of the ranks on which collectives can run.

    Only the global process set (every rank) exists until the C++ core implements process
    sets; passing any other set to a collective raises NotImplementedError.
    """

    def __init__(self, ranks_or_comm):
        self.process_set_id = None
        if hasattr(ranks_or_comm, "py2f"):
            self.mpi_comm = ranks_or_comm
            self.ranks = None
        else:
            self.mpi_comm = None
            self.ranks = sorted(int(r) for r in ranks_or_comm)

    def _is_global(self):
        return self.process_set_id == 0

    def size(self):
        if self._is_global():
            return size()
        return len(self.ranks) if self.ranks is not None else None

    def rank(self):
        if self._is_global():
            return rank()
        if self.ranks is None or rank() not in self.ranks:
            return -1
        return self.ranks.index(rank())

    def included(self):
        return self._is_global() or (self.ranks is not None and rank() in self.ranks)

    def __str__(self):
        return f"ProcessSet(process_set_id={self.process_set_id}, ranks={self.ranks})"

    __repr__ = __str__


global_process_set = ProcessSet([])
global_process_set.process_set_id = 0


def _check_process_set(process_set):
    if process_set is None or process_set is global_process_set or process_set.process_set_id == 0:
        return
    raise NotImplementedError("horovod_cpp: collectives on a process set other than "
                              "global_process_set need process sets, which the C++ core does "
                              "not implement yet")


def add_process_set(process_set):
    """Registers a new process set (collective). Not in the C++ core yet."""
    return _core_op("add_process_set")(process_set)


def remove_process_set(process_set):
    """Removes a process set (collective). Not in the C++ core yet."""
    return _core_op("remove_process_set")(process_set)
