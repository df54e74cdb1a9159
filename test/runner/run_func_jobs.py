"""Functions that the tests of `horovod_cpp.run` (test_run_func.py) send to the workers.

They live in a module of their own so that the workers can import them by name (plain pickle
sends a function by reference); the tests put this folder on the workers' PYTHONPATH.
"""

import numpy as np


def seeded(rank, n=1000):
    """Rank `rank`'s data: every element depends on the rank and its index."""
    return (np.arange(n, dtype=np.float64) * (rank + 1) + rank * 0.25).astype(np.float32)


def allreduce_job(n, scale=1.0):
    """Sums every rank's seeded data; returns (rank, size, local rank, sum * scale)."""
    import horovod_cpp as hvd
    hvd.init()
    total = hvd.allreduce(seeded(hvd.rank(), n), op=hvd.Sum, name="run.sum")
    out = (hvd.rank(), hvd.size(), hvd.local_rank(), total * scale)
    hvd.shutdown()
    return out


def placement_job(n):
    """(rank, size, local rank, cross rank, host name, the sum of every rank's seeded data)."""
    import socket
    import horovod_cpp as hvd
    hvd.init()
    total = hvd.allreduce(seeded(hvd.rank(), n), op=hvd.Sum, name="run.placed")
    return (hvd.rank(), hvd.size(), hvd.local_rank(), hvd.cross_rank(), socket.gethostname(),
            total)


def allgather_job():
    """Gathers rows whose count differs by rank: rank r gives r + 1 rows of value r."""
    import horovod_cpp as hvd
    hvd.init()
    rows = np.full((hvd.rank() + 1, 3), hvd.rank(), dtype=np.int64)
    return hvd.allgather(rows, name="run.gather")


def fail_on(bad_rank):
    """Raises a ValueError on `bad_rank` after a collective every rank takes part in."""
    import horovod_cpp as hvd
    hvd.init()
    hvd.allreduce(np.ones(4, np.float32), name="run.before")
    if hvd.rank() == bad_rank:
        raise ValueError(f"bad batch on rank {hvd.rank()}")
    return hvd.rank()


def no_init(value):
    """Never starts the library: its rank comes from the launcher's variables."""
    return value
