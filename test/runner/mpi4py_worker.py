"""A horovod_cpp job that uses mpi4py as Horovod programs do: run by test_mpi4py_jobs.py as
``mpirun -np N python mpi4py_worker.py MODE``. Every value is checked on every rank against
what the rank computes from rank-seeded data; the ranks agree on the verdict over mpi4py,
rank 0 prints "MPI4PY_JOB OK" and every rank exits 0, or every rank exits 1.

Modes:
  world      mpi4py imported first; init(comm=MPI.COMM_WORLD); mpi4py's collectives on the
             main thread while the library's run on another; exit without hvd.shutdown()
             (mpi4py then finalizes MPI at exit: the library must be down by then).
  split      init(comm=<even or odd world ranks>): two independent jobs in one MPI job, each
             with a ProcessSet(communicator) of its own first two ranks, in the job's ranks.
  ranks      init(comm=[0, 1]): only the listed world ranks run a job; the rest only mpi4py.
  sets       Horovod's init(comm=..., process_sets=[...]) with communicators: a Split (other
             colours on other ranks), a rank list equal to one of them, duplicates of the
             world and of the Split, and [0]; add_process_set(ProcessSet(comm)).
  rc_false   mpi4py.rc.initialize = False, hvd.init() first (the library initializes MPI),
             then mpi4py used beside it; Horovod's static process-set list with a permuted
             set, the global set's ranks and a repeat.
  pending    mpi4py first; an allreduce still in flight when the program ends.
  outside    init(comm=<even or odd world ranks>) where the job's rank 0 gives a set as
             MPI_COMM_WORLD (processes outside its job): every rank of the job gets the
             ValueError naming rank 0 (none waits for it), then init() with good sets works.
"""

import sys
import threading

import numpy as np

MODE = sys.argv[1]
if MODE == "rc_false":
    import mpi4py
    mpi4py.rc.initialize = False
    import horovod_cpp as hvd
    hvd.init(process_sets="dynamic")
    from mpi4py import MPI
else:
    from mpi4py import MPI  # initializes MPI (MPI_THREAD_MULTIPLE), before the library
    import horovod_cpp as hvd

WORLD = MPI.COMM_WORLD
WR, WS = WORLD.Get_rank(), WORLD.Get_size()
errors = []


def expect(what, got, want):
    if isinstance(got, np.ndarray) or isinstance(want, np.ndarray):
        ok = np.array_equal(np.asarray(got), np.asarray(want))
    else:
        ok = got == want
    if not ok:
        errors.append(f"world rank {WR}: {what} is {got!r}, expected {want!r}")


def data(r, n=1000):
    return (np.arange(n, dtype=np.float64) % 97) + 1000.0 * r


def check_job(members, tag):
    """Collectives of the current job, whose ranks are the world ranks `members` in order."""
    expect(f"{tag} size", hvd.size(), len(members))
    expect(f"{tag} rank", hvd.rank(), members.index(WR))
    for n in (1, 1000, 1 << 18):  # a scalar-sized, a small and a 2 MiB allreduce
        got = hvd.allreduce(data(WR, n), op=hvd.Sum, name=f"{tag}.sum.{n}")
        expect(f"{tag} allreduce of {n}", got, sum(data(r, n) for r in members))
    got = hvd.allgather(np.full((2, 3), WR, dtype=np.int32), name=f"{tag}.gather")
    expect(f"{tag} allgather", got, np.concatenate([np.full((2, 3), r, np.int32)
                                                   for r in members]))
    got = hvd.broadcast(data(WR, 5), root_rank=len(members) - 1, name=f"{tag}.bcast")
    expect(f"{tag} broadcast", got, data(members[-1], 5))


def interleaved():
    """The library's collectives on a thread of their own while the main thread runs mpi4py's."""
    out = {}

    def library():
        try:
            out["sums"] = [hvd.allreduce(np.full(64, float(i + WR)), op=hvd.Sum, name=f"t{i}")
                           for i in range(100)]
        except Exception as e:  # reported below, after mpi4py's part
            out["error"] = repr(e)

    t = threading.Thread(target=library)
    t.start()
    for i in range(100):
        expect(f"mpi4py allreduce {i}", WORLD.allreduce(i * WR), i * sum(range(WS)))
    t.join(120)
    expect("library thread error", out.get("error"), None)
    for i, got in enumerate(out.get("sums", [])):
        expect(f"threaded allreduce {i}", got, np.full(64, float(i * WS + sum(range(WS)))))
    expect("threaded allreduces done", len(out.get("sums", [])), 100)


def set_sum(ps, tag):
    """An allreduce in `ps` (a registered set this rank belongs to)."""
    got = hvd.allreduce(data(hvd.rank(), 10), op=hvd.Sum, process_set=ps, name=tag)
    expect(f"{tag} in {ps.ranks}", got, sum(data(r, 10) for r in ps.ranks))


def main():
    if MODE == "world":
        hvd.init(comm=WORLD)
        expect("mpi_threads_supported", hvd.mpi_threads_supported(), True)
        check_job(list(range(WS)), "world")
        interleaved()
    elif MODE == "split":
        job = WORLD.Split(WR % 2, WR)
        hvd.init(comm=job)
        members = [r for r in range(WS) if r % 2 == WR % 2]
        check_job(members, "split")
        if len(members) >= 2:
            # A set given as a communicator of the job's ranks 0 and 1 (job ranks, not world).
            sub = job.Split(0 if job.Get_rank() < 2 else MPI.UNDEFINED, job.Get_rank())
            pair = [hvd.ProcessSet(sub)] if sub != MPI.COMM_NULL else []
            # add_process_set is collective: the job's other ranks pass the same ranks.
            ps = hvd.add_process_set(pair[0] if pair else [0, 1])
            expect("communicator set's ranks (job ranks)", ps.ranks, [0, 1])
            if ps.included():
                set_sum(ps, "split.pair")
            hvd.remove_process_set(ps)
    elif MODE == "ranks":
        if WR < 2:
            hvd.init(comm=[0, 1])
            check_job([0, 1], "ranks")
        else:
            try:
                hvd.init(comm=[0, 1])
                errors.append(f"world rank {WR}: init(comm=[0, 1]) accepted a rank not listed")
            except ValueError as e:
                expect("refusal names this rank", f"rank {WR}" in str(e), True)
    elif MODE == "sets":
        split = WORLD.Split(WR % 2, WR)
        sets = [hvd.ProcessSet(split),
                hvd.ProcessSet(range(0, WS, 2)),  # the evens again: left unregistered
                hvd.ProcessSet(WORLD.Dup()),       # the global set's ranks: unregistered
                hvd.ProcessSet(split.Dup()),       # the Split again: unregistered
                hvd.ProcessSet([0])]               # a set of its own unless WS == 2
        hvd.init(comm=WORLD, process_sets=sets)
        evens, odds = list(range(0, WS, 2)), list(range(1, WS, 2))
        # As in Horovod, an object is left unregistered when an earlier object in this rank's
        # list (or the global set) has its ranks: on odd ranks the evens' list is no repeat.
        if WR % 2 == 0:
            want_ids = [1, None, None, None, 3 if WS > 2 else None]
        else:
            want_ids = [2, 1, None, None, 3 if WS > 2 else None]
        expect("ids of the given sets", [ps.process_set_id for ps in sets], want_ids)
        expect("ranks of the Split set", sets[0].ranks, evens if WR % 2 == 0 else odds)
        registry = {i: ps.ranks for i, ps in hvd._basics._registry.items()}
        want = {0: list(range(WS)), 1: evens, 2: odds}
        if WS > 2:
            want[3] = [0]
        expect("registered sets", registry, want)
        set_sum(sets[0], "sets.split")
        if WS > 2 and WR == 0:
            set_sum(sets[4], "sets.zero")
        # add_process_set is collective with the same ranks everywhere: a communicator that
        # differs across ranks is refused on every rank (at np 2 both halves exist already).
        last = WORLD.Split(1 if WR == WS - 1 else 0, WR)
        try:
            hvd.add_process_set(hvd.ProcessSet(last))
            errors.append(f"world rank {WR}: add_process_set of a Split was accepted")
        except ValueError as e:
            expect("refusal says why", "every rank must pass the same ranks" in str(e)
                   or (WS == 2 and "already exists" in str(e)), True)
        interleaved()
    elif MODE == "rc_false":
        expect("MPI initialized by the library", MPI.Is_initialized(), True)
        interleaved()
        hvd.shutdown()
        perm = list(reversed(range(1, WS))) if WR else list(range(1, WS))
        zero, repeat = hvd.ProcessSet([0]), hvd.ProcessSet([0])
        sets = [zero, perm, list(range(WS - 1, -1, -1)), repeat, zero]  # zero listed twice
        hvd.init(process_sets=sets)
        registry = {i: ps.ranks for i, ps in hvd._basics._registry.items()}
        expect("registered sets", registry, {0: list(range(WS)), 1: [0], 2: list(range(1, WS))})
        expect("ids of the [0] objects", (zero.process_set_id, repeat.process_set_id), (1, None))
        check_job(list(range(WS)), "rc_false")
        expect("mpi4py after re-init", WORLD.allreduce(1), WS)
    elif MODE == "pending":
        hvd.init()
        check_job(list(range(WS)), "pending")
        hvd.allreduce_async(np.ones(1 << 18), op=hvd.Sum, name="left.in.flight")
        WORLD.Barrier()  # every rank submitted it; nobody waits for it
    elif MODE == "outside":
        job = WORLD.Split(WR % 2, WR)
        members = [r for r in range(WS) if r % 2 == WR % 2]
        wrong = hvd.ProcessSet(WORLD if job.Get_rank() == 0 else job)
        try:
            hvd.init(comm=job, process_sets=[wrong])
            errors.append(f"world rank {WR}: a set outside the job was accepted")
        except ValueError as e:
            expect("refusal names the job's rank 0", "rank 0 of the job" in str(e), True)
        expect("initialized after the refusal", hvd.is_initialized(), False)
        hvd.init(comm=job, process_sets=[hvd.ProcessSet(job)])  # the global set's ranks
        check_job(members, "outside")
    else:
        errors.append(f"unknown mode {MODE}")


try:
    main()
except Exception as e:  # noqa: BLE001 - every failure becomes this rank's verdict
    errors.append(f"world rank {WR}: {type(e).__name__}: {e}")
failed = WORLD.allreduce(1 if errors else 0)
for line in errors:
    print(line, flush=True)
if failed:
    sys.exit(1)
if WR == 0:
    print("MPI4PY_JOB OK", MODE, flush=True)
# No hvd.shutdown(): mpi4py finalizes MPI at exit (it initialized it in every mode but
# rc_false), and the library must already be down by then.
