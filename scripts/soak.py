#!/usr/bin/env python3
"""Soak run: long training-like workloads at 2 ranks, watching each rank for leaks.

Runs examples/benchmark/hvd_bench (the same workloads and checks as the benchmark) and samples
every rank's resident memory (VmRSS), thread count and open file descriptors from /proc while
it runs. After the warm-up (the first --warmup-fraction of the samples, which covers start-up,
buffer allocation and the benchmark's warm-up steps) and until the steps are done (the
benchmark prints the workload's table), the resident memory may grow by less than
--max-rss-growth-kib and the thread and descriptor counts may not change at all.

  python3 scripts/soak.py                 # 10,000 steps of workload d, 1,000 of workload a
  python3 scripts/soak.py --short         # the CI version (3000 and 20 steps)
  python3 scripts/soak.py --json soak.json
  python3 scripts/soak.py --self-test     # the check must catch a leak of 8 KiB per step

Growth is measured on the floor of the resident memory: the lowest sample of the last quarter
of the post-warm-up samples minus the lowest of the first quarter. A workload that allocates and
frees large buffers every step (ResNet-50's 100 MB of gradients) swings by tens of MB within a
step, so medians of short windows depend on where the samples fall; a leak raises the floor
itself, from step to step. The largest excursion above the start is printed too. Exit status 1 when a limit is broken or the benchmark
fails (its results are checked element by element).
"""
import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# hvd_bench's first line after a workload's steps: '# a: ResNet-50 gradient set (...'.
WORKLOAD_TABLE = re.compile(r'^# [a-z]: ')


def children_named(root_pid, name):
    """PIDs of the descendants of root_pid whose command name is `name`."""
    parent = {}
    comm = {}
    for d in os.listdir('/proc'):
        if not d.isdigit():
            continue
        try:
            with open(f'/proc/{d}/stat') as f:
                s = f.read()
        except OSError:
            continue
        rp = s.rfind(')')
        comm[int(d)] = s[s.find('(') + 1:rp]
        parent[int(d)] = int(s[rp + 2:].split()[1])
    out = []
    for pid, c in comm.items():
        if c != name:
            continue
        p = pid
        while p in parent and p != root_pid and p > 1:
            p = parent[p]
        if p == root_pid:
            out.append(pid)
    return sorted(out)


def sample(pid):
    """(rss KiB, threads, fds) of pid, or None once it is gone."""
    try:
        rss = threads = None
        with open(f'/proc/{pid}/status') as f:
            for line in f:
                if line.startswith('VmRSS:'):
                    rss = int(line.split()[1])
                elif line.startswith('Threads:'):
                    threads = int(line.split()[1])
        fds = len(os.listdir(f'/proc/{pid}/fd'))
        return (rss, threads, fds)
    except (OSError, ValueError):
        return None


def window_min(values, lo, hi):
    """The lowest of values[lo:hi] (fractions of the length; at least one value)."""
    part = values[int(lo * len(values)):max(int(hi * len(values)), int(lo * len(values)) + 1)]
    return min(part)


def run_phase(label, bench, np_, bench_args, interval, warmup_fraction):
    cmd = ['mpirun', '-np', str(np_), '--oversubscribe', '--bind-to', 'none',
           '--allow-run-as-root', bench] + bench_args
    print(f'# soak {label}: {" ".join(cmd)}', flush=True)
    t0 = time.time()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    # The benchmark prints a workload's table (a line '# a: ...') once its steps are done and
    # checked; from then on it frees the workload's buffers, so sampling for the verdict stops
    # there. The output is read as it comes, on a thread of its own.
    lines = []
    steps_done = []

    def read_output():
        for line in proc.stdout:
            if not steps_done and WORKLOAD_TABLE.match(line):
                steps_done.append(time.time())
            lines.append(line)

    reader = threading.Thread(target=read_output, daemon=True)
    reader.start()
    ranks = []
    deadline = time.time() + 30
    while len(ranks) < np_ and proc.poll() is None and time.time() < deadline:
        ranks = children_named(proc.pid, os.path.basename(bench)[:15])
        time.sleep(0.05)
    series = {pid: [] for pid in ranks}
    while proc.poll() is None:
        for pid in ranks:
            s = sample(pid)
            if s and s[0] is not None and not steps_done:
                series[pid].append(s)
        time.sleep(interval)
    reader.join()
    output = ''.join(lines)
    wall = time.time() - t0
    ok = proc.returncode == 0 and '# OK' in output
    if not ok:
        print(output)
    result = {'phase': label, 'args': bench_args, 'wall_s': round(wall, 1),
              'exit_status': proc.returncode, 'benchmark_ok': ok, 'ranks': []}
    for i, pid in enumerate(ranks):
        samples = series[pid]
        post = samples[int(warmup_fraction * len(samples)):]
        # Sampling stopped when the steps were done (above); as a second guard the run ends
        # where the teardown begins: the first sample with fewer threads than at the end of the
        # warm-up (hvd::shutdown() has joined the library's thread).
        if post:
            steady_threads = post[0][1]
            for k, s in enumerate(post):
                if s[1] < steady_threads:
                    post = post[:k]
                    break
        if len(post) < 10:
            result['ranks'].append({'rank_index': i, 'samples': len(samples),
                                    'error': 'too few samples after warm-up'})
            result['benchmark_ok'] = False
            continue
        rss = [s[0] for s in post]
        thr = [s[1] for s in post]
        fds = [s[2] for s in post]
        result['ranks'].append({
            'rank_index': i,
            'samples': len(samples),
            'rss_start_kib': rss[0],
            'rss_end_kib': rss[-1],
            'rss_growth_kib': window_min(rss, 0.75, 1.0) - window_min(rss, 0.0, 0.25),
            'rss_max_above_start_kib': max(rss) - window_min(rss, 0.0, 0.25),
            'threads': [min(thr), max(thr)],
            'fds': [min(fds), max(fds)],
        })
    return result, output


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--build-dir', default=os.path.join(ROOT, 'build'))
    ap.add_argument('--np', type=int, default=2)
    ap.add_argument('--short', action='store_true', help='CI version: 3000 and 20 steps')
    ap.add_argument('--tiny-steps', type=int, help='steps of workload d (default 10000)')
    ap.add_argument('--resnet-steps', type=int, help='steps of workload a (default 1000)')
    ap.add_argument('--interval', type=float, default=0.2, help='seconds between samples')
    ap.add_argument('--warmup-fraction', type=float, default=0.25)
    ap.add_argument('--max-rss-growth-kib', type=int, default=1024)
    ap.add_argument('--json', help='write the figures here')
    ap.add_argument('--self-test', action='store_true',
                    help='run d with hvd_bench --debug-leak 8K (1000 steps); passes only if '
                         'every rank breaks the growth limit')
    a = ap.parse_args()
    # The short run must still give enough samples after the warm-up on a fast machine (a
    # step of d can take 1.5 ms): 3000 steps and samples every 0.05 s.
    tiny = a.tiny_steps or (3000 if a.short else 10000)
    if a.short and a.interval == 0.2:
        a.interval = 0.05
    resnet = a.resnet_steps or (20 if a.short else 1000)
    bench = os.path.join(a.build_dir, 'examples', 'benchmark', 'hvd_bench')
    if not os.access(bench, os.X_OK):
        sys.exit(f'soak: {bench} not built (cmake --build {a.build_dir} --target hvd_bench)')
    os.environ.setdefault('OMPI_ALLOW_RUN_AS_ROOT', '1')
    os.environ.setdefault('OMPI_ALLOW_RUN_AS_ROOT_CONFIRM', '1')
    phases = [
        ('tiny: 1000 x 256 floats', ['-o', 'none', '-W', 'd', '--steps', str(tiny),
                                     '--warmup-steps', '3']),
        ('resnet50: 161 tensors', ['-o', 'none', '-W', 'a', '--steps', str(resnet),
                                   '--warmup-steps', '3']),
    ]
    if a.self_test:
        phases = [('self-test: d leaking 8 KiB per step',
                   ['-o', 'none', '-W', 'd', '--steps', '1000', '--warmup-steps', '3',
                    '--debug-leak', '8K'])]
        a.interval = 0.05
    results = []
    failed = False
    for label, args in phases:
        r, _ = run_phase(label, bench, a.np, args, a.interval, a.warmup_fraction)
        results.append(r)
        print(f'# {label}: {args[args.index("--steps") + 1]} steps in {r["wall_s"]} s, '
              f'benchmark {"OK" if r["benchmark_ok"] else "FAILED"}')
        failed |= not r['benchmark_ok']
        for rk in r['ranks']:
            if 'error' in rk:
                print(f'  rank process {rk["rank_index"]}: {rk["error"]}')
                failed = True
                continue
            bad = (rk['rss_growth_kib'] >= a.max_rss_growth_kib or
                   rk['threads'][0] != rk['threads'][1] or rk['fds'][0] != rk['fds'][1])
            failed |= bad
            print(f'  rank process {rk["rank_index"]}: {rk["samples"]} samples; RSS '
                  f'{rk["rss_start_kib"]} -> {rk["rss_end_kib"]} KiB, growth '
                  f'{rk["rss_growth_kib"]:+} KiB (limit < {a.max_rss_growth_kib}), max excursion '
                  f'{rk["rss_max_above_start_kib"]:+} KiB; threads {rk["threads"][0]}..'
                  f'{rk["threads"][1]}; fds {rk["fds"][0]}..{rk["fds"][1]}'
                  f'{"  <-- LIMIT BROKEN" if bad else ""}')
    if a.json:
        with open(a.json, 'w') as f:
            json.dump({'np': a.np, 'phases': results}, f, indent=1)
    if a.self_test:
        # Every rank kept about 6 MiB more after the warm-up: each must be reported.
        caught = [rk for rk in results[0]['ranks']
                  if 'error' not in rk and rk['rss_growth_kib'] >= a.max_rss_growth_kib]
        ok = results[0]['exit_status'] == 0 and len(caught) == a.np
        print('# soak self-test', 'OK: the leak was caught on every rank' if ok else
              'FAILED: the growth check did not catch the leak on every rank')
        return 0 if ok else 1
    print('# soak', 'FAILED' if failed else 'OK')
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
