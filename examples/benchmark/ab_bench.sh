#!/usr/bin/env bash
# Alternated A/B runs of hvd_bench against two builds of libhorovod_cpp (docs/benchmarks-history.md:
# "base" and "new" columns): the same hvd_bench binary runs with LD_LIBRARY_PATH naming each
# build's library folder in turn, RUNS times each (base, new, base, new, ...), one JSON per run.
# Alternating run by run spreads the machine's slow and fast windows over both builds.
#
#   examples/benchmark/ab_bench.sh BASE_LIB_DIR NEW_LIB_DIR OUTDIR [hvd_bench flags...]
#   python3 examples/benchmark/ab_compare.py OUTDIR
#
# The library folders hold libhorovod_cpp.so.0 (copy each build's, e.g. build/csrc/, aside).
# Environment: HVD_BENCH (default build/examples/benchmark/hvd_bench), NP (2), RUNS (4),
# TIMEOUT_S (600 per run). Exit: 0, or 1 if a run failed (a wrong result fails a run).
set -uo pipefail
if [ $# -lt 3 ]; then
  sed -n '2,13p' "$0"
  exit 2
fi
base=$(realpath "$1") new=$(realpath "$2") out=$3
shift 3
root="$(cd "$(dirname "$0")/../.." && pwd)"
HVD_BENCH=${HVD_BENCH:-$root/build/examples/benchmark/hvd_bench}
mkdir -p "$out"
failed=0
for i in $(seq 1 "${RUNS:-4}"); do
  for which in base new; do
    lib=$base
    [ "$which" = new ] && lib=$new
    timeout "${TIMEOUT_S:-600}" mpirun --oversubscribe --allow-run-as-root --bind-to none \
      -np "${NP:-2}" -x LD_LIBRARY_PATH="$lib" "$HVD_BENCH" "$@" --json "$out/${which}_$i.json" \
      > "$out/${which}_$i.txt" 2>&1 || { echo "ab_bench: $which run $i failed ($out/${which}_$i.txt)"; failed=1; }
  done
done
exit $failed
