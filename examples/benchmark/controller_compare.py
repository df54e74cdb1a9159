"""Tabulates hvd_bench sweeps of two controllers (or any two builds/settings) side by side.

    python3 controller_compare.py --a 'out/mpi_shm1_*.json' --b 'out/gloo_shm1_*.json' \
        [--names MPI,Gloo] [--ops allreduce,broadcast]

For each collective and size: each side's median over its runs of the per-run median time
(ours), their ratio b/a, and the ratio normalised by the raw-MPI baseline measured in the same
runs (b's ours/raw over a's ours/raw): on a machine whose speed drifts between runs this second
ratio compares the two sides against the same yardstick. Markdown on stdout; standard library
only.
"""

import argparse
import glob
import json
import statistics


def load(pattern):
    files = sorted(glob.glob(pattern))
    if not files:
        raise SystemExit(f"controller_compare: no file matches {pattern!r}")
    return [json.load(open(f)) for f in files], files


def medians(runs):
    """{(op, bytes): (median ours s, median ours/raw)} over the runs."""
    acc = {}
    for run in runs:
        for sweep in run["sweep"]:
            for row in sweep["rows"]:
                hvd, raw = row.get("hvd"), row.get(sweep.get("baseline", "mpi"))
                if not hvd or not raw or raw["median_s"] <= 0:
                    continue
                key = (sweep["op"], row["bytes"])
                acc.setdefault(key, []).append((hvd["median_s"], hvd["median_s"] / raw["median_s"]))
    return {k: (statistics.median(t for t, _ in v), statistics.median(r for _, r in v), len(v))
            for k, v in acc.items()}


def size_label(n):
    for unit, div in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div and n % div == 0:
            return f"{n // div} {unit}"
    return f"{n} B"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--a", required=True, help="glob of side a's JSON files")
    ap.add_argument("--b", required=True, help="glob of side b's JSON files")
    ap.add_argument("--names", default="a,b", help="the two sides' names")
    ap.add_argument("--ops", default="", help="collectives to show (default: all)")
    args = ap.parse_args()
    name_a, name_b = args.names.split(",")
    runs_a, files_a = load(args.a)
    runs_b, files_b = load(args.b)
    a, b = medians(runs_a), medians(runs_b)
    ops = [o for o in args.ops.split(",") if o]
    print(f"{name_a}: {len(files_a)} runs; {name_b}: {len(files_b)} runs; "
          f"{runs_a[0]['meta'].get('ranks')} ranks")
    current = None
    for key in sorted(set(a) & set(b), key=lambda k: (k[0], k[1])):
        op, nbytes = key
        if ops and op not in ops:
            continue
        if op != current:
            current = op
            print(f"\n**{op}**\n")
            print(f"| size | {name_a} us | {name_b} us | {name_b}/{name_a} | "
                  f"{name_a} / raw MPI | {name_b} / raw MPI | normalised {name_b}/{name_a} |")
            print("|---:|---:|---:|---:|---:|---:|---:|")
        (ta, ra, _), (tb, rb, _) = a[key], b[key]
        print(f"| {size_label(nbytes)} | {ta * 1e6:.2f} | {tb * 1e6:.2f} | {tb / ta:.2f}x | "
              f"{ra:.2f} | {rb:.2f} | {rb / ra:.2f}x |")


if __name__ == "__main__":
    main()
