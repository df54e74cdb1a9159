"""Lifecycle, topology, build queries, reduction ops, process sets and errors.

Shared by ``horovod_cpp`` (numpy) and ``horovod_cpp.torch``. Everything here forwards to the
native module ``horovod_cpp._C``, a thin pybind11 layer over the C++ API.
"""

import ctypes
import warnings

# The shared libstdc++ in the process's global scope before the native module loads: a
# libhorovod_cpp built by a toolchain that linked a static libstdc++ into it would otherwise
# mix the two copies and crash at its first formatted number (csrc/CMakeLists.txt links the
# shared one explicitly; this guards builds made elsewhere).
try:
    ctypes.CDLL("libstdc++.so.6", mode=ctypes.RTLD_GLOBAL)
except OSError:
    pass

from . import _C  # noqa: E402

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
#: Adaptive summation (docs/training.md, "Adasum"): floating-point CPU and CUDA tensors (CUDA:
#: host-staged), any rank count.
Adasum = _C.Adasum

_OPS = {Sum, Average, Min, Max, Product, Adasum}


def _op_value(op):
    """Validates a reduction op and returns its integer value for _C."""
    if op not in _OPS:
        raise ValueError(f"horovod_cpp: unknown reduction op {op!r}; use one of Sum, Average, "
                         "Min, Max, Product, Adasum")
    return int(op)


def _reducescatter_op(op):
    """Validates a reducescatter op (Sum or Average only) and returns its value for _C."""
    opv = _op_value(op)
    if opv not in (Sum, Average):
        raise ValueError("reducescatter supports op=Average and op=Sum only")
    return opv


def handle_average_backwards_compatibility(op, average):
    """Horovod's rule for the deprecated `average` argument of horovod.torch and
    horovod.tensorflow: `op` wins, both given is an error, `average` alone maps to Average or
    Sum with a DeprecationWarning, neither gives Average."""
    if op is not None:
        if average is not None:
            raise ValueError("The op parameter supersedes average. Please provide only one of "
                             "them.")
        return op
    if average is not None:
        warnings.warn("Parameter `average` has been replaced with `op` and will be removed in "
                      "v1.0", DeprecationWarning)
        return Average if average else Sum
    return Average


def _name(name):
    """Empty names are replaced by the core with '<op>.noname.<n>' (call order)."""
    return "" if name is None else str(name)


def _group_names(name, n):
    """The names of a grouped collective's n tensors: "<name>.<i>", or all empty."""
    return [""] * n if name is None else [f"{name}.{i}" for i in range(n)]


# ---- lifecycle ---------------------------------------------------------------------------
_homogeneous = None


def init(comm=None, process_sets=None):
    """Starts horovod_cpp on every rank (collective). A second call is a no-op.

    comm: None for MPI_COMM_WORLD, an mpi4py communicator (anything with py2f()), or a list
    of MPI_COMM_WORLD ranks to run on (needs mpi4py; the other ranks must not call init()).
    process_sets: ProcessSet objects (or rank lists) to create now, as in Horovod: those given
    as communicators first (each gathered over the job: a ``Split`` communicator gives one set
    per colour), then those given as ranks, get ids 1, 2, ... in order; a set with the ranks
    of the global set or of an earlier one is not created again, and its object is left
    unregistered (process_set_id None). "dynamic" is accepted (sets can always be added later
    with add_process_set()).
    """
    global _homogeneous
    if _C.is_initialized():
        return
    from . import _mpi_comms  # imports no mpi4py itself
    fortran = None
    job_comm = None
    if comm is not None:
        if isinstance(comm, (list, tuple, range)):
            comm = _mpi_comms.comm_of_world_ranks(comm)
        if not _mpi_comms.is_comm(comm):
            raise ValueError("init(comm=...): expected an mpi4py communicator or a list of "
                             f"ranks, got {type(comm).__name__}")
        fortran = int(comm.py2f())
        job_comm = comm
    sets = []
    if process_sets is not None and not isinstance(process_sets, str):
        for ps in process_sets:
            if not isinstance(ps, ProcessSet):
                ps = ProcessSet(ps)
            if ps.process_set_id is not None:
                raise ValueError(f"init(process_sets=...): {ps} is already registered")
            sets.append(ps)
    elif isinstance(process_sets, str) and process_sets != "dynamic":
        raise ValueError(f"init(process_sets={process_sets!r}): expected a list of process "
                         "sets or 'dynamic'")
    if fortran is None:
        # Started by torchrun (or another env:// launcher): the job runs on the Gloo
        # controller, its variables set here from torch's.
        from . import _torchrun
        _torchrun.adopt()
    _mpi_comms.job_comm = job_comm
    order = _init_set_order(sets)
    _C.init(fortran, [])
    _registry.clear()
    _object_calls.clear()  # the core's counters start afresh too
    global_process_set.ranks = list(range(_C.size()))
    _registry[0] = global_process_set
    try:
        _create_init_sets(sets, order)
    except BaseException:
        shutdown()
        raise
    # is_homogeneous() is answered locally later, so the one collective it needs runs here,
    # while every rank is known to be inside init().
    import numpy as np
    h = _C.allgather_async(np.array([_C.local_size()], dtype=np.int64), "horovod_cpp.init.local_size")
    sizes = h.result()
    _homogeneous = bool((sizes == sizes[0]).all())


def _init_set_order(sets):
    """The rank lists init() creates, in Horovod's order (those given as communicators,
    gathered over the job, then those given as ranks), each once. Resolves the communicator
    sets' own ranks; collective over the job when a set is a communicator."""
    gathered, listed = [], []
    for ps in sets:
        if ps.mpi_comm is not None:
            from . import _mpi_comms
            ps.ranks, every = _mpi_comms.gathered_sets(ps.mpi_comm)
            gathered.extend(every)
        else:
            listed.append(list(ps.ranks))
    order = []
    for ranks in gathered + listed:
        if ranks not in order:
            order.append(ranks)
    return order


def _create_init_sets(sets, order):
    """Creates init()'s sets (collective) and registers their objects: the first object of
    each set of ranks gets its id; the global set's ranks and repeats stay unregistered."""
    if any(ps.mpi_comm is not None for ps in sets) and _C.gloo_enabled():
        raise ValueError("init(process_sets=[ProcessSet(communicator)]): this job runs on the "
                         "Gloo controller, which has no MPI communicators; give the set's ranks")
    ids = {tuple(global_process_set.ranks): 0}
    for ranks in order:
        if tuple(ranks) in ids:
            continue
        ids[tuple(ranks)] = _C.add_process_set(ranks)
    taken = {0}
    for ps in sets:
        sid = ids[tuple(ps.ranks)]
        if _registry.get(sid) is ps:  # the same object listed twice
            continue
        if sid in taken:
            ps.process_set_id = None  # the global set, or a repeat: Horovod ignores it too
            continue
        taken.add(sid)
        ps.process_set_id = sid
        _registry[sid] = ps
    for ranks, sid in ids.items():  # sets only other ranks passed (a Split's other colours)
        if sid not in _registry:
            ps = ProcessSet(ranks)
            ps.process_set_id = sid
            _registry[sid] = ps


def shutdown():
    """Stops horovod_cpp. Pending operations fail with ShutdownError. Idempotent. Process
    sets other than the global one are invalidated (re-create them after the next init())."""
    _C.shutdown()
    for ps in list(_registry.values()):
        if ps is not global_process_set:
            ps.process_set_id = None
    _registry.clear()


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
    """True unless this process runs a job on the Gloo controller."""
    return bool(_C.mpi_built()) and not _C.gloo_enabled()


def mpi_threads_supported():
    """True when MPI provides MPI_THREAD_MULTIPLE (ValueError before init())."""
    return bool(_C.mpi_threads_supported())


def gloo_built():
    """True when this build has the Gloo controller (HOROVOD_GLOO=1, hvdrun --gloo)."""
    return bool(_C.gloo_built())


def gloo_enabled():
    """True while this process runs a job on the Gloo controller."""
    return bool(_C.gloo_enabled())


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


def sycl_built():
    """False: no SYCL (Intel GPU) path. Horovod's programs ask it to choose between 'XPU' and
    'GPU' devices."""
    return False


# ---- timeline ----------------------------------------------------------------------------
def start_timeline(file_path, mark_cycles=False):
    """Starts writing a Chrome-trace timeline to file_path (rank 0 writes the file; call it on
    every rank). mark_cycles adds a marker per coordination cycle."""
    _C.start_timeline(str(file_path), bool(mark_cycles))


def stop_timeline():
    """Stops the timeline, leaving a complete JSON file."""
    _C.stop_timeline()


# ---- process sets ------------------------------------------------------------------------
class ProcessSet:
    """A subset of the ranks on which collectives can run, as in Horovod.

    ProcessSet(ranks) or ProcessSet(mpi4py communicator); it becomes usable once registered
    by init(process_sets=[...]) or add_process_set(). Until then process_set_id is None and
    size(), rank() and included() return None.
    """

    #: Registered implicitly, for a torch.distributed group of these ranks (the torch
    #: backend's new_group): an add_process_set of the same ranks takes its id over instead
    #: of failing.
    _implicit = False

    def __init__(self, ranks_or_comm):
        self.process_set_id = None
        if hasattr(ranks_or_comm, "py2f"):
            self.mpi_comm = ranks_or_comm
            self.ranks = None
        else:
            self.mpi_comm = None
            self.ranks = sorted(int(r) for r in ranks_or_comm)

    def _resolve_comm(self):
        """The ranks of a set given as an mpi4py communicator, in the job's communicator."""
        if self.ranks is not None:
            return
        from . import _mpi_comms
        self.ranks = _mpi_comms.ranks_of(self.mpi_comm)

    def _invalidate(self):
        self.process_set_id = None

    def size(self):
        """The number of ranks in the set (None while unregistered)."""
        if self.process_set_id is None:
            return None
        return _C.process_set_size(self.process_set_id)

    def rank(self):
        """This rank's index within the set, -1 if not a member (None while unregistered)."""
        if self.process_set_id is None:
            return None
        return _C.process_set_rank(self.process_set_id)

    def included(self):
        """True when this rank belongs to the set; as in Horovod this needs only the ranks, not
        registration (None for a set given as a communicator not yet resolved)."""
        if self.ranks is None:
            return None
        if self.process_set_id == 0:
            return True
        return _C.rank() in self.ranks

    def __str__(self):
        return f"ProcessSet(process_set_id={self.process_set_id}, ranks={self.ranks})"

    __repr__ = __str__


global_process_set = ProcessSet([])
global_process_set.process_set_id = 0

# id -> registered ProcessSet (this rank's view; every rank registers the same sets).
_registry = {}

# (set id, kind) -> how many unnamed object calls of that kind ("broadcast_object",
# "allgather_object") completed their first exchange in the set: they name the next one, so
# they live and die with the set's registration (init() and remove_process_set() reset them).
_object_calls = {}


def _object_call_name(kind, name, sid):
    """(the base name of an object call, the counter key to advance once its first exchange
    completed, or None for a named call)."""
    if name is not None:
        return str(name), None
    key = (sid, kind)
    return f"{kind}.{_object_calls.get(key, 0)}", key


def _object_call_done(key):
    if key is not None:
        _object_calls[key] = _object_calls.get(key, 0) + 1


def _check_distinct(rank_lists, existing=()):
    seen = [tuple(r) for r in existing]
    for ranks in rank_lists:
        if tuple(ranks) in seen:
            raise ValueError(f"a process set with ranks {list(ranks)} already exists")
        seen.append(tuple(ranks))


def _set_id(process_set):
    """The core's id of `process_set` (a registered ProcessSet; None: the global set)."""
    if process_set is None:
        return 0
    if not isinstance(process_set, ProcessSet):
        raise TypeError("process_set must be a horovod_cpp ProcessSet, got "
                        f"{type(process_set).__name__}")
    if process_set.process_set_id is None:
        raise ValueError(f"{process_set} is not registered: pass it to init(process_sets=...) "
                         "or add_process_set() first")
    return process_set.process_set_id


def _set_size(process_set):
    return size() if process_set is None else process_set.size()


def _set_rank(process_set):
    return rank() if process_set is None else process_set.rank()


def add_process_set(process_set):
    """Registers a new process set (collective: every rank calls it with the same ranks, in
    the same order relative to other add/remove calls) and returns it. process_set: a
    ProcessSet or a sequence of global ranks. ValueError for a set already registered or with
    the same ranks as an existing one, or bad ranks."""
    if not isinstance(process_set, ProcessSet):
        process_set = ProcessSet(process_set)
    if process_set.process_set_id is not None:
        raise ValueError(f"{process_set} is already registered")
    process_set._resolve_comm()
    if not _C.is_initialized():
        raise NotInitializedError("horovod_cpp: add_process_set() called before init()")
    implicit = [ps for i, ps in _registry.items()
                if i != 0 and ps._implicit and list(ps.ranks) == list(process_set.ranks)]
    if implicit:  # registered on every rank already: taken over here, on every rank
        process_set.process_set_id = implicit[0].process_set_id
        _registry[process_set.process_set_id] = process_set
        return process_set
    _check_distinct([process_set.ranks],
                    [ps.ranks for i, ps in _registry.items() if i != 0])
    process_set.process_set_id = _C.add_process_set(list(process_set.ranks))
    _registry[process_set.process_set_id] = process_set
    return process_set


def remove_process_set(process_set):
    """Removes a process set (collective). Returns True when removed, False for the global
    set or a set that is not registered. Operations still pending in it fail."""
    if (not isinstance(process_set, ProcessSet) or process_set.process_set_id is None
            or process_set.process_set_id == 0):
        return False
    _C.remove_process_set(process_set.process_set_id)
    for key in [k for k in _object_calls if k[0] == process_set.process_set_id]:
        del _object_calls[key]
    _registry.pop(process_set.process_set_id, None)
    process_set._invalidate()
    return True


# The rules the native allreduce_async applies to arguments it does not read itself.
_C.allreduce_setup(global_process_set, _set_id, _op_value, handle_average_backwards_compatibility)
