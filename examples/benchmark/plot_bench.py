#!/usr/bin/env python3
"""Plots and tabulates hvd_bench JSON files (from `hvd_bench --json FILE`).

Give several files (repeated runs, any number of ranks): figures of the same rank count are
combined by taking the median over runs of each run's median.

  /usr/bin/python3 plot_bench.py run1.json run2.json run3.json --png busbw.png --markdown

--png: busbw against size, one panel per collective of the sweep plus one for workload c,
       ours (solid) beside raw MPI (dashed), one colour per rank count.
--markdown: the median tables (sweep, workloads, targets) as Markdown on stdout.
Needs matplotlib only for --png (Debian: apt-get install python3-matplotlib).
"""
import argparse
import json
import statistics
from collections import defaultdict


def load(paths):
    """{ranks: [run, ...]} with each run the parsed JSON."""
    runs = defaultdict(list)
    for p in paths:
        with open(p) as f:
            r = json.load(f)
        runs[int(r["meta"]["ranks"])].append(r)
    return runs


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def sweep_medians(runs):
    """{op: {"bus_factor": f, "rows": {bytes: {"hvd": s, "mpi": s, "wrong": w}}}}"""
    acc = {}
    for r in runs:
        for o in r["sweep"]:
            d = acc.setdefault(o["op"], {"bus_factor": o["bus_factor"], "rows": defaultdict(lambda: defaultdict(list))})
            for row in o["rows"]:
                cell = d["rows"][int(row["bytes"])]
                for side in ("hvd", "mpi"):
                    if side in row:
                        cell[side].append(row[side]["median_s"])
                        cell["wrong"].append(row[side].get("wrong", 0))
    out = {}
    for op, d in acc.items():
        rows = {}
        for b, cell in sorted(d["rows"].items()):
            rows[b] = {"hvd": med(cell["hvd"]), "mpi": med(cell["mpi"]),
                       "wrong": max(cell["wrong"]) if cell["wrong"] else 0, "runs": len(cell["mpi"])}
        out[op] = {"bus_factor": d["bus_factor"], "rows": rows}
    return out


def workload_medians(runs):
    """[(key, title, bytes, [(variant, kind, median_s, per-run medians)], wrong)], first-run order."""
    info = {}  # key -> {"title", "bytes", "variants": {name: (kind, [medians])}, "wrong"}
    for r in runs:
        for w in r["workloads"]:
            d = info.setdefault(w["key"], {"title": w["title"], "bytes": w["bytes"],
                                           "variants": {}, "wrong": 0})
            d["wrong"] = max(d["wrong"], w["wrong"])
            for v in w["variants"]:
                d["variants"].setdefault(v["name"], (v["kind"], []))[1].append(v["median_s"])
    return [(k, d["title"], d["bytes"],
             [(n, kind, med(ms), ms) for n, (kind, ms) in d["variants"].items()], d["wrong"])
            for k, d in info.items()]


def fmt_bytes(b):
    b = int(b)
    for unit, div in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if b >= div:
            return "%g %s" % (b / div, unit)
    return "%d B" % b


def fmt_time(s):
    if s is None:
        return "n/a"
    if s < 1e-3:
        return "%.1f µs" % (s * 1e6)
    return "%.2f ms" % (s * 1e3)


def markdown(runs_by_np):
    lines = []
    for np_, runs in sorted(runs_by_np.items()):
        n = np_
        lines.append("### %d ranks (%d run%s, medians over runs)\n" % (n, len(runs), "s" if len(runs) > 1 else ""))
        sw = sweep_medians(runs)
        for op, d in sw.items():
            bf = d["bus_factor"]
            lines.append("**%s** (busbw = algbw × %.3g)\n" % (op, bf))
            lines.append("| size | hvd time | hvd busbw GB/s | MPI time | MPI busbw GB/s | hvd/MPI time | wrong |")
            lines.append("|---:|---:|---:|---:|---:|---:|---:|")
            for b, c in d["rows"].items():
                hb = "%.3f" % (b / c["hvd"] / 1e9 * bf) if c["hvd"] else "n/a"
                mb = "%.3f" % (b / c["mpi"] / 1e9 * bf) if c["mpi"] else "n/a"
                ratio = "%.2f" % (c["hvd"] / c["mpi"]) if c["hvd"] and c["mpi"] else "n/a"
                lines.append("| %s | %s | %s | %s | %s | %s | %d |" % (
                    fmt_bytes(b), fmt_time(c["hvd"]), hb, fmt_time(c["mpi"]), mb, ratio, c["wrong"]))
            lines.append("")
        wl = workload_medians(runs)
        if wl:
            lines.append("**Workloads** (time per step; ratio = ours (first row) / this row)\n")
            lines.append("| workload | variant | median | per-run medians | ours/this |")
            lines.append("|---|---|---:|---|---:|")
            for k, title, nbytes, variants, wrong in wl:
                ours = variants[0][2]
                for name, kind, m, per in variants:
                    ratio = "%.2f" % (ours / m) if kind == "mpi" and m else ""
                    lines.append("| %s | %s | %s | %s | %s |" % (
                        k + ": " + title if name == variants[0][0] else "", name, fmt_time(m),
                        ", ".join(fmt_time(x) for x in per), ratio))
            lines.append("")
    return "\n".join(lines)


def plot(runs_by_np, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = []
    for np_, runs in sorted(runs_by_np.items()):
        for op in sweep_medians(runs):
            if op not in panels:
                panels.append(op)
    panels.append("workload c (allreduce average)")
    cols = 3
    rows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.8 * rows), squeeze=False)
    colors = ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple"]
    for i, (np_, runs) in enumerate(sorted(runs_by_np.items())):
        col = colors[i % len(colors)]
        sw = sweep_medians(runs)
        for p, op in enumerate(panels[:-1]):
            if op not in sw:
                continue
            ax = axes[p // cols][p % cols]
            d = sw[op]
            for side, style in (("hvd", "-o"), ("mpi", "--s")):
                xs = [b for b, c in d["rows"].items() if c[side]]
                ys = [b / d["rows"][b][side] / 1e9 * d["bus_factor"] for b in xs]
                if xs:
                    ax.plot(xs, ys, style, color=col, markersize=3,
                            label="%s np=%d" % ("horovod_cpp" if side == "hvd" else "raw MPI", np_))
        ax = axes[(len(panels) - 1) // cols][(len(panels) - 1) % cols]
        cs = [w for w in workload_medians(runs) if w[0].startswith("c_")]
        for side, style, idx in (("hvd", "-o", 0), ("mpi", "--s", 1)):
            xs = [w[2] for w in cs]
            ys = [w[2] / w[3][idx][2] / 1e9 * 2 * (np_ - 1) / np_ for w in cs]
            if xs:
                ax.plot(xs, ys, style, color=col, markersize=3,
                        label="%s np=%d" % ("horovod_cpp" if side == "hvd" else "raw MPI", np_))
    for p, title in enumerate(panels):
        ax = axes[p // cols][p % cols]
        ax.set_title(title)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("size (bytes)")
        ax.set_ylabel("busbw (GB/s)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    for p in range(len(panels), rows * cols):
        axes[p // cols][p % cols].axis("off")
    fig.suptitle("horovod_cpp vs raw MPI: busbw (median over runs)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("json", nargs="+", help="hvd_bench --json outputs")
    ap.add_argument("--png", help="write the busbw plot here")
    ap.add_argument("--markdown", action="store_true", help="print median tables as Markdown")
    args = ap.parse_args()
    runs = load(args.json)
    if args.markdown:
        print(markdown(runs))
    if args.png:
        plot(runs, args.png)
    if not args.markdown and not args.png:
        ap.error("nothing to do: give --png and/or --markdown")


if __name__ == "__main__":
    main()
