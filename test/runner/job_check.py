"""A small horovod_cpp job that checks its own placement and a few collectives.

Run by hvdrun in the launcher tests and the multi-host test:
    hvdrun -np 4 -H h1:2,h2:2 python job_check.py --local-size 2 --cross-size 2
Each rank checks its topology against what the host list implies (ranks are placed slot by
slot), that ranks on one host share a host name and ranks on different hosts do not, and the
values of allreduces (one, a fused group, integers), an allgather and a broadcast computed
independently from rank-seeded data.
All ranks agree on the verdict; rank 0 prints "JOB_CHECK OK" and every rank exits 0, or every
rank exits 1.
"""

import argparse
import os
import socket
import sys

import numpy as np

import horovod_cpp as hvd


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--local-size", type=int, required=True)
    p.add_argument("--cross-size", type=int, required=True)
    p.add_argument("--expect-env", action="append", default=[],
                   help="NAME=VALUE that every rank must see")
    p.add_argument("--exit-code-on-rank", default="",
                   help="R:C makes rank R exit with code C after the checks (exit-status test)")
    a = p.parse_args()
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    errors = []

    def expect(what, got, want):
        if got != want:
            errors.append(f"rank {r}: {what} is {got!r}, expected {want!r}")

    expect("size", n, a.local_size * a.cross_size)
    expect("local_size", hvd.local_size(), a.local_size)
    expect("cross_size", hvd.cross_size(), a.cross_size)
    expect("local_rank", hvd.local_rank(), r % a.local_size)
    expect("cross_rank", hvd.cross_rank(), r // a.local_size)
    for item in a.expect_env:
        name, _, value = item.partition("=")
        expect(f"${name}", os.environ.get(name), value)

    names = hvd.allgather_object(socket.gethostname())
    for q in range(n):
        same_host = q // a.local_size == r // a.local_size
        if same_host != (names[q] == names[r]):
            errors.append(f"rank {r} on {names[r]!r} and rank {q} on {names[q]!r}: "
                          f"{'same' if same_host else 'different'} host expected")

    x = np.arange(1000, dtype=np.float64) * (r + 1)
    got = hvd.allreduce(x, op=hvd.Sum, name="check.sum")
    want = np.arange(1000, dtype=np.float64) * (n * (n + 1) / 2)
    if not np.array_equal(got, want):
        errors.append(f"rank {r}: allreduce differs at {np.flatnonzero(got != want)[:5]}")
    # A fused group across hosts (where a host holds several ranks: the hierarchical path),
    # Average, with members shorter than the ranks per host and one of several shm rounds.
    group = [(np.arange(k, dtype=np.float64) % 13) * (r + 1) for k in (1, 3, 70001)]
    got = hvd.grouped_allreduce(group, op=hvd.Average, name="check.group")
    for k, (t, g_) in enumerate(zip(group, got)):
        want = (np.arange(t.size, dtype=np.float64) % 13) * ((n + 1) / 2)
        if not np.allclose(g_, want, rtol=1e-12, atol=0):
            errors.append(f"rank {r}: grouped allreduce member {k} differs at "
                          f"{np.flatnonzero(g_ != want)[:5]}")
    i = hvd.allreduce(np.arange(5, dtype=np.int32) + r, op=hvd.Sum, name="check.int")
    if not np.array_equal(i, np.arange(5, dtype=np.int32) * n + n * (n - 1) // 2):
        errors.append(f"rank {r}: int32 allreduce gave {i}")
    g = hvd.allgather(np.full((r + 1, 3), r, dtype=np.int32), name="check.gather")
    want_g = np.concatenate([np.full((q + 1, 3), q, dtype=np.int32) for q in range(n)])
    if not np.array_equal(g, want_g):
        errors.append(f"rank {r}: allgather gave {g.ravel()[:12]}...")
    b = hvd.broadcast(np.arange(7, dtype=np.int64) + 100 * r, root_rank=n - 1, name="check.bc")
    if not np.array_equal(b, np.arange(7, dtype=np.int64) + 100 * (n - 1)):
        errors.append(f"rank {r}: broadcast gave {b}")

    all_errors = [e for errs in hvd.allgather_object(errors) for e in errs]
    if r == 0:
        for e in all_errors:
            print("JOB_CHECK FAIL " + e, flush=True)
        if not all_errors:
            print(f"JOB_CHECK OK size={n} hosts={sorted(set(names))}", flush=True)
    hvd.shutdown()
    if all_errors:
        sys.exit(1)
    if a.exit_code_on_rank:
        who, code = (int(v) for v in a.exit_code_on_rank.split(":"))
        if r == who:
            sys.exit(code)


if __name__ == "__main__":
    main()
