#!/usr/bin/env bash
# Autotuned against fixed defaults on hvd_bench's workloads (docs/benchmarks-history.md#autotune).
# Runs hvd_bench RUNS times in each mode, alternating (default, autotune, default, ...), with
# enough warm-up steps for the autotuner to finish before the timed steps; prints each run's
# medians of our variants and the raw-MPI baselines of the same run, and writes the autotune
# logs next to the output.
#   examples/benchmark/autotune_compare.sh [BUILD_DIR]
# Environment: NP (2), RUNS (3), WORKLOAD (d), WARMUP (60), STEPS (20), OUT (/tmp/hvd_autotune).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${1:-build}
NP=${NP:-2} RUNS=${RUNS:-3} WORKLOAD=${WORKLOAD:-d} WARMUP=${WARMUP:-60} STEPS=${STEPS:-20}
OUT=${OUT:-/tmp/hvd_autotune}
mkdir -p "$OUT"
bench=("$BUILD_DIR/examples/benchmark/hvd_bench" -o "" -W "$WORKLOAD" --warmup-steps "$WARMUP"
       --steps "$STEPS")
for run in $(seq 1 "$RUNS"); do
  for mode in default autotune; do
    log="$OUT/$WORKLOAD.$mode.$run.txt"
    if [ "$mode" = autotune ]; then
      extra=(--autotune --autotune-log-file "$OUT/$WORKLOAD.autotune.$run.csv")
    else
      extra=()
    fi
    python3 scripts/hvdrun -np "$NP" "${extra[@]}" \
      "${bench[@]}" > "$log" 2>&1 || { echo "run $run $mode failed: $log"; exit 1; }
    printf 'run %s %-8s ' "$run" "$mode"
    grep -E '^\[1,0\]<stdout>:  (hvd|mpi)' "$log" | sed -E 's/^\[1,0\]<stdout>:  //' |
      awk '{name=$0; sub(/ +[0-9]+\.[0-9]+ .*$/, "", name);
            n=split($0, f, / +/); for (i=1;i<=n;i++) if (f[i] ~ /^[0-9]+\.[0-9]+$/) {print name "=" f[i]; break}}' |
      tr '\n' ';'
    echo
    if [ "$mode" = autotune ]; then tail -1 "$OUT/$WORKLOAD.autotune.$run.csv"; fi
  done
done
