"""mpi4py communicators as a job and as process sets: Horovod's ``init(comm=...)``,
``init(comm=[ranks])`` and ``ProcessSet(communicator)``.

Imported only where a program passes a communicator or a rank list, so that mpi4py (and the
MPI_Init its import performs) is never needed otherwise. Ranks are those of the job's own
communicator (the one given to ``init``, else ``MPI_COMM_WORLD``), as everywhere in
horovod_cpp: a set made from a communicator of a job started on part of ``MPI_COMM_WORLD``
names the ranks that ``hvd.rank()`` returns there.
"""

#: The job's communicator, kept from init() to translate later ProcessSet(communicator)s;
#: None: MPI_COMM_WORLD.
job_comm = None


def _mpi():
    try:
        from mpi4py import MPI
    except ImportError as e:
        raise ValueError("horovod_cpp: a job or process set given as MPI ranks of "
                         "MPI_COMM_WORLD needs mpi4py (or pass an mpi4py communicator)") from e
    return MPI


def is_comm(obj):
    """True for an mpi4py communicator (anything with ``py2f()``)."""
    return hasattr(obj, "py2f")


def comm_of_world_ranks(ranks):
    """A communicator of these MPI_COMM_WORLD ranks (collective over the listed ranks only);
    ValueError on a rank outside the list."""
    MPI = _mpi()
    world = MPI.COMM_WORLD
    wanted = sorted({int(r) for r in ranks})
    bad = [r for r in wanted if not 0 <= r < world.Get_size()]
    if not wanted or bad:
        raise ValueError(f"init(comm={list(ranks)}): MPI_COMM_WORLD has ranks 0 to "
                         f"{world.Get_size() - 1}" + (f"; {bad} are not among them" if bad else ""))
    if world.Get_rank() not in wanted:
        raise ValueError(f"init(comm={list(ranks)}): this process (MPI_COMM_WORLD rank "
                         f"{world.Get_rank()}) is not in the list; only the listed ranks call "
                         "init()")
    group = world.Get_group().Incl(wanted)
    comm = world.Create_group(group)
    group.Free()
    return comm


def _base():
    return job_comm if job_comm is not None else _mpi().COMM_WORLD


def ranks_of(comm):
    """The sorted ranks, in the job's communicator, of the processes of `comm`; ValueError
    naming any process of `comm` outside the job."""
    MPI = _mpi()
    base = _base()
    mine = comm.Get_group()
    theirs = base.Get_group()
    try:
        got = MPI.Group.Translate_ranks(mine, list(range(comm.Get_size())), theirs)
    finally:
        mine.Free()
        theirs.Free()
    outside = [i for i, r in enumerate(got) if r == MPI.UNDEFINED]
    if outside:
        raise ValueError(f"ProcessSet(communicator): the communicator's ranks {outside} are "
                         "not processes of horovod_cpp's job (the communicator given to "
                         "init(), else MPI_COMM_WORLD)")
    return sorted(int(r) for r in got)


def gathered_sets(comm):
    """Every distinct set of ranks that the job's processes pass at one position of
    ``init(process_sets=[...])`` as a communicator, in sorted order, as Horovod registers
    them (a communicator from ``Split`` differs from rank to rank and yields one set per
    colour). Collective over the job's communicator; also returns this process's own set.
    A communicator that a rank cannot translate fails on every rank, naming that rank."""
    try:
        mine, problem = ranks_of(comm), None
    except ValueError as e:  # exchanged first: the other ranks would wait in allgather
        mine, problem = None, str(e)
    every = _base().allgather((mine, problem))
    bad = [(r, p) for r, (_, p) in enumerate(every) if p is not None]
    if bad:
        raise ValueError(f"init(process_sets=...): rank {bad[0][0]} of the job: {bad[0][1]}"
                         + (f" (and {len(bad) - 1} more rank(s))" if len(bad) > 1 else ""))
    return mine, [list(r) for r in sorted({tuple(m) for m, _ in every})]
