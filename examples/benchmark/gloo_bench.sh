#!/usr/bin/env bash
# hvd_bench with our library on the Gloo controller and on the MPI controller, alternated run by
# run on this host, each beside raw MPI in the same run (hvd_bench --gloo keeps the raw-MPI
# baselines; a fresh rendezvous store is served here for every Gloo run). With shared memory on
# (the default: on one host both controllers use the shared-memory transports, so the Gloo and
# MPI runs differ in the control plane and the bootstrap only) and off (HOROVOD_CPP_SHM=0: Gloo's
# TCP pairs against our MPI data plane over Open MPI's shared-memory btl).
#
#   examples/benchmark/gloo_bench.sh [OUTDIR]
#   /usr/bin/python3 examples/benchmark/plot_bench.py OUTDIR/gloo_shm1_*.json --markdown
#
# Environment: HVD_BENCH (default build/examples/benchmark/hvd_bench), RUNS (3), NP (2),
# SHM_MODES ("1 0"), BENCH_ARGS (default below: the five collectives 4 B-64 MiB), TIMEOUT_S
# (per run, default 900), PYTHON (serves the store; default python3: the store is standard
# library only). One JSON per run: OUTDIR/<controller>_shm<mode>_<run>.json.
# Exit: 0 every run passed (every element checked), 1 a run failed.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
OUTDIR=${1:-gloo_bench_out}
HVD_BENCH=${HVD_BENCH:-$root/build/examples/benchmark/hvd_bench}
RUNS=${RUNS:-3}
NP=${NP:-2}
SHM_MODES=${SHM_MODES:-"1 0"}
BENCH_ARGS=${BENCH_ARGS:-"-o allreduce,allgather,broadcast,alltoall,reducescatter -b 4 -e 64M -f 4 -n 20 -w 3 -W none"}
TIMEOUT_S=${TIMEOUT_S:-900}
PYTHON=${PYTHON:-python3}
mkdir -p "$OUTDIR"
[ -x "$HVD_BENCH" ] || { echo "gloo_bench: no $HVD_BENCH (build hvd_bench or set HVD_BENCH)"; exit 1; }
tmp=$(mktemp -d)
# shellcheck source=examples/benchmark/store_util.sh
. "$here/store_util.sh"
# shellcheck disable=SC2317  # run by the EXIT trap
cleanup() {
  bench_store_stop
  rm -rf "$tmp"
}
trap cleanup EXIT

MPIRUN=(mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$NP")
failed=0
for i in $(seq 1 "$RUNS"); do
  for shm in $SHM_MODES; do
    for controller in mpi gloo; do
      out="$OUTDIR/${controller}_shm${shm}_$i.json"
      extra=()
      if [ "$controller" = gloo ]; then
        secret=$(bench_secret)
        bench_store_start "$tmp/port" "$secret" || exit 1
        extra=(-x HOROVOD_GLOO_RENDEZVOUS_ADDR=127.0.0.1 -x "HOROVOD_GLOO_RENDEZVOUS_PORT=$(cat "$tmp/port")"
               -x "HOROVOD_CPP_RENDEZVOUS_SECRET=$secret")
      fi
      echo "### run $i shm=$shm controller=$controller"
      # shellcheck disable=SC2086  # BENCH_ARGS is a list of flags
      if ! timeout "$TIMEOUT_S" "${MPIRUN[@]}" -x "HOROVOD_CPP_SHM=$shm" "${extra[@]}" \
          "$HVD_BENCH" $BENCH_ARGS ${extra:+--gloo} --json "$out"; then
        echo "gloo_bench: run $i shm=$shm controller=$controller FAILED"
        failed=1
      fi
      bench_store_stop
    done
  done
done
exit $failed
