#!/usr/bin/env python3
"""Compares the alternated runs of ab_bench.sh: for every sweep row and workload variant, the
medians over runs of ours and raw MPI for each build, and the median of the per-run ratios
(ours / raw MPI of the same run) with its range for the new build.

    python3 examples/benchmark/ab_compare.py OUTDIR
"""
import glob
import json
import statistics
import sys


def load(folder, which):
    return [json.load(open(f)) for f in sorted(glob.glob(f"{folder}/{which}_*.json"))]


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    base, new = load(sys.argv[1], "base"), load(sys.argv[1], "new")
    if not base or not new:
        print(f"ab_compare: no base_*.json or new_*.json in {sys.argv[1]}")
        return 1
    med = statistics.median
    print("sweep: op, bytes | base: ours us, MPI us, ours/MPI | new: ours us, MPI us, ours/MPI (runs)")
    for oi, op in enumerate(base[0].get("sweep", [])):
        for ri, row in enumerate(op["rows"]):
            def fig(runs):
                rows = [r["sweep"][oi]["rows"][ri] for r in runs]
                hvd = [x["hvd"]["median_s"] * 1e6 for x in rows]
                mpi = [x["mpi"]["median_s"] * 1e6 for x in rows]
                ratio = [a / b for a, b in zip(hvd, mpi)]
                return med(hvd), med(mpi), med(ratio), min(ratio), max(ratio)
            b, n = fig(base), fig(new)
            print(f"{op['op']:13s} {row['bytes']:>9d} | {b[0]:9.1f} {b[1]:9.1f} {b[2]:6.2f} | "
                  f"{n[0]:9.1f} {n[1]:9.1f} {n[2]:6.2f} ({n[3]:.2f}-{n[4]:.2f})")
    if base[0].get("workloads"):
        print("workloads: variant | base ms | new ms; then ours / each raw-MPI variant, per-run medians")
    for wi, w in enumerate(base[0].get("workloads", [])):
        for vi, v in enumerate(w["variants"]):
            b = med(r["workloads"][wi]["variants"][vi]["median_s"] * 1e3 for r in base)
            n = med(r["workloads"][wi]["variants"][vi]["median_s"] * 1e3 for r in new)
            print(f"{w['key']:9s} {v['name'][:44]:44s} {b:10.4f} {n:10.4f}")
        ours = [i for i, v in enumerate(w["variants"]) if v["kind"] == "hvd"]
        mpis = [i for i, v in enumerate(w["variants"]) if v["kind"] == "mpi"]
        for h in ours:
            for m in mpis:
                def ratio(runs):
                    return med(r["workloads"][wi]["variants"][h]["median_s"] /
                               r["workloads"][wi]["variants"][m]["median_s"] for r in runs)
                print(f"   {w['variants'][h]['name'][:30]} / {w['variants'][m]['name'][:34]}: "
                      f"base {ratio(base):.2f}, new {ratio(new):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
