#!/usr/bin/env python3
"""Plots and tabulates hvd_bench JSON files (from `hvd_bench --json FILE`).

Give several files (repeated runs, any number of ranks, CPU and GPU runs): figures of the same
rank count and mode are combined by taking the median over runs of each run's median. On one
rank busbw is 0 (nccl-tests' definition), so np=1 runs show algbw instead.

  /usr/bin/python3 plot_bench.py run1.json run2.json run3.json --png busbw.png --markdown

--png: busbw against size, one panel per collective of the sweep plus one for the single-tensor
       allreduce workloads (c; in GPU runs lat and big), ours (solid) beside the raw baseline
       (dashed: MPI, or NCCL for `hvd_bench --gpu` runs), one colour per rank count and mode.
--markdown: the median tables (sweep, workloads, targets) as Markdown on stdout.
Needs matplotlib only for --png (Debian: apt-get install python3-matplotlib).
"""
import argparse
import json
import statistics
from collections import defaultdict


BASELINES = {"mpi": "MPI", "nccl": "NCCL"}


def load(paths):
    """{(ranks, baseline): [run, ...]} with each run the parsed JSON; baseline "mpi" (CPU mode)
    or "nccl" (GPU mode, `hvd_bench --gpu`): runs of the two modes are never combined."""
    runs = defaultdict(list)
    for p in paths:
        with open(p) as f:
            r = json.load(f)
        runs[(int(r["meta"]["ranks"]), r["meta"].get("baseline", "mpi"))].append(r)
    return runs


def group_name(key):
    np_, base = key
    return "np=%d%s" % (np_, " GPU" if base == "nccl" else "")


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def sweep_medians(runs):
    """{op: {"bus_factor": f, "rows": {bytes: {"hvd": s, "base": s, "wrong": w}}}}, "base" being
    the raw baseline (MPI or NCCL) of the runs."""
    acc = {}
    for r in runs:
        for o in r["sweep"]:
            d = acc.setdefault(o["op"], {"bus_factor": o["bus_factor"], "rows": defaultdict(lambda: defaultdict(list))})
            for row in o["rows"]:
                cell = d["rows"][int(row["bytes"])]
                for side, key in (("hvd", "hvd"), ("base", "mpi"), ("base", "nccl")):
                    if key in row:
                        cell[side].append(row[key]["median_s"])
                        cell["wrong"].append(row[key].get("wrong", 0))
    out = {}
    for op, d in acc.items():
        rows = {}
        for b, cell in sorted(d["rows"].items()):
            rows[b] = {"hvd": med(cell["hvd"]), "base": med(cell["base"]),
                       "wrong": max(cell["wrong"]) if cell["wrong"] else 0, "runs": len(cell["base"])}
        out[op] = {"bus_factor": d["bus_factor"], "rows": rows}
    return out


def workload_medians(runs):
    """[(key, title, bytes, [(variant, kind, median_s, per-run medians)], wrong)], first-run order."""
    info = {}  # key -> {"title", "bytes", "variants": {name: (kind, [medians])}, "wrong"}
    for r in runs:
        for w in r["workloads"]:
            d = info.setdefault(w["key"], {"title": w["title"], "bytes": w["bytes"],
                                           "variants": {}, "wrong": 0})
            d["wrong"] = max(d["wrong"], w["wrong"], w.get("wrong_nccl", 0))
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
    for (np_, base), runs in sorted(runs_by_np.items()):
        n = np_
        bl = BASELINES.get(base, base)
        gpu = ", GPU: %s" % runs[0]["meta"].get("gpu", "?") if base == "nccl" else ""
        lines.append("### %d ranks%s (%d run%s, medians over runs)\n" % (n, gpu, len(runs), "s" if len(runs) > 1 else ""))
        sw = sweep_medians(runs)
        for op, d in sw.items():
            bf = d["bus_factor"]
            bw = "busbw"
            if n == 1:  # busbw is 0 on one rank (nccl-tests' definition): show algbw
                bf, bw = 1.0, "algbw"
            lines.append("**%s** (busbw = algbw × %.3g)\n" % (op, d["bus_factor"]))
            lines.append("| size | hvd time | hvd %s GB/s | %s time | %s %s GB/s | hvd/%s time | wrong |" % (bw, bl, bl, bw, bl))
            lines.append("|---:|---:|---:|---:|---:|---:|---:|")
            for b, c in d["rows"].items():
                hb = "%.3f" % (b / c["hvd"] / 1e9 * bf) if c["hvd"] else "n/a"
                mb = "%.3f" % (b / c["base"] / 1e9 * bf) if c["base"] else "n/a"
                ratio = "%.2f" % (c["hvd"] / c["base"]) if c["hvd"] and c["base"] else "n/a"
                lines.append("| %s | %s | %s | %s | %s | %s | %d |" % (
                    fmt_bytes(b), fmt_time(c["hvd"]), hb, fmt_time(c["base"]), mb, ratio, c["wrong"]))
            lines.append("")
        wl = workload_medians(runs)
        if wl:
            lines.append("**Workloads** (time per step; ratio = ours (first row) / this row)\n")
            lines.append("| workload | variant | median | per-run medians | ours/this |")
            lines.append("|---|---|---:|---|---:|")
            for k, title, nbytes, variants, wrong in wl:
                ours = variants[0][2]
                for name, kind, m, per in variants:
                    ratio = "%.2f" % (ours / m) if kind != "hvd" and m else ""
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
    panels.append("single-tensor allreduce (average)")
    cols = 3
    rows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.8 * rows), squeeze=False)
    colors = ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple"]
    for i, (key, runs) in enumerate(sorted(runs_by_np.items())):
        np_, base = key
        col = colors[i % len(colors)]
        names = {"hvd": "horovod_cpp", "base": "raw " + BASELINES.get(base, base)}
        sw = sweep_medians(runs)
        for p, op in enumerate(panels[:-1]):
            if op not in sw:
                continue
            ax = axes[p // cols][p % cols]
            d = sw[op]
            for side, style in (("hvd", "-o"), ("base", "--s")):
                xs = [b for b, c in d["rows"].items() if c[side]]
                ys = [b / d["rows"][b][side] / 1e9 * (d["bus_factor"] if np_ > 1 else 1.0) for b in xs]
                if xs:
                    ax.plot(xs, ys, style, color=col, markersize=3,
                            label="%s %s" % (names[side], group_name(key) + (" algbw" if np_ == 1 else "")))
        ax = axes[(len(panels) - 1) // cols][(len(panels) - 1) % cols]
        cs = sorted((w for w in workload_medians(runs) if w[0].startswith(("c_", "lat_", "big_"))),
                    key=lambda w: w[2])
        for side, style, idx in (("hvd", "-o", 0), ("base", "--s", 1)):
            xs = [w[2] for w in cs]
            ys = [w[2] / w[3][idx][2] / 1e9 * (2 * (np_ - 1) / np_ if np_ > 1 else 1.0) for w in cs]
            if xs:
                ax.plot(xs, ys, style, color=col, markersize=3,
                        label="%s %s" % (names[side], group_name(key) + (" algbw" if np_ == 1 else "")))
    for p, title in enumerate(panels):
        ax = axes[p // cols][p % cols]
        ax.set_title(title)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("size (bytes)")
        ax.set_ylabel("busbw (GB/s; algbw for np=1)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    for p in range(len(panels), rows * cols):
        axes[p // cols][p % cols].axis("off")
    fig.suptitle("horovod_cpp vs raw MPI / raw NCCL (GPU runs): busbw (median over runs)")
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
