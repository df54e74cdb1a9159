#!/usr/bin/env bash
# hvd_bench across two hosts made of network namespaces on this machine (each with its own
# hostname and address, joined by a bridge; Open MPI over TCP between them, shared memory
# within a host): ours beside raw MPI in the same run, for 4 ranks (mb1:2,mb2:2) and 2 ranks
# (mb1:1,mb2:1), alternated, RUNS times each; one JSON per run. With CONTROLLERS="mpi gloo"
# every such run is made on the MPI controller and on the Gloo controller in turn (the store
# served here on the bridge address, Gloo's TCP pairs between the hosts in place of Open MPI's
# tcp btl; hvd_bench --gloo keeps the raw-MPI baselines).
#
#   sudo examples/benchmark/multihost_bench.sh [OUTDIR]      (needs root, `ip`, `unshare`)
#   /usr/bin/python3 examples/benchmark/plot_bench.py OUTDIR/np4_*.json --markdown
#
# Environment: HVD_BENCH (default build/examples/benchmark/hvd_bench), RUNS (3), NPS ("4 2"),
# CONTROLLERS ("mpi"; "mpi gloo" or "gloo"), PYTHON (serves the Gloo store; default python3),
# BENCH_ARGS (default below: a short sweep, and workloads a, c, d with 100 tensors in d),
# SUBNET_PREFIX (default 10.78.0; only <prefix>.1, .11, .12 are used), TIMEOUT_S (per run,
# default 900), MPI_ARGS (more mpirun arguments, e.g. "-x HOROVOD_LOG_LEVEL=info").
# Figures and what they measure: docs/benchmarks-history.md, "Across hosts".
# The hosts come from test/multihost/hosts.sh under names of their own (bridge hvdmbbr0,
# namespaces hvdmb_mb1/2, hosts mb1/mb2), so that the multi-host test (hvdmhbr0, h1/h2,
# 10.77.0) can run beside it. Everything made here is removed on exit, pass or fail.
# Exit: 0 all runs passed (every element checked), 1 a run failed, 77 skipped (not root).
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
OUTDIR=${1:-multihost_bench_out}
HVD_BENCH=${HVD_BENCH:-$root/build/examples/benchmark/hvd_bench}
RUNS=${RUNS:-3}
NPS=${NPS:-"4 2"}
# Few iterations: over TCP with ranks sharing few cores every step costs tens of ms, and the
# d1 baseline (one MPI_Allreduce per tensor) took ~0.6 s per step with 100 tensors at 4 ranks.
BENCH_ARGS=${BENCH_ARGS:-"-o allreduce,allgather,broadcast -b 4 -e 64M -f 64 -n 10 -w 2 -W a,c,d --steps 5 --warmup-steps 1 --d-tensors 100"}
TIMEOUT_S=${TIMEOUT_S:-900}
CONTROLLERS=${CONTROLLERS:-mpi}
PYTHON=${PYTHON:-python3}
PFX=${SUBNET_PREFIX:-10.78.0}

MH_BR=hvdmbbr0
MH_NS=hvdmb_
MH_PFX=$PFX
MH_HOSTS=(mb1 mb2)
MH_MARK="# horovod_cpp multihost bench $$"
MH_LOCK=/run/lock/horovod_cpp_multihost_bench.lock
# shellcheck source=test/multihost/hosts.sh
. "$root/test/multihost/hosts.sh"

mh_require multihost_bench
[ -x "$HVD_BENCH" ] || { echo "multihost_bench: no $HVD_BENCH (build hvd_bench or set HVD_BENCH)"; exit 1; }
mh_start multihost_bench 60
# shellcheck source=examples/benchmark/store_util.sh
. "$here/store_util.sh"
trap 'bench_store_stop; mh_cleanup' EXIT
tmp=$MH_TMP
mkdir -p "$OUTDIR"
OUTDIR="$(cd "$OUTDIR" && pwd)"
echo "multihost_bench: hosts ${MH_HOSTS[*]} at $PFX.11, $PFX.12 (bridge $MH_BR, $PFX.1); results in $OUTDIR"

# The namespaces share this file system, so the same path to hvd_bench works on both hosts.
# shellcheck disable=SC2054  # the commas are Open MPI's list syntax
MPIRUN=(mpirun --allow-run-as-root --oversubscribe --bind-to none
  --mca plm_rsh_agent "$tmp/agent"
  --mca btl self,vader,tcp
  --mca btl_tcp_if_include "$PFX.0/24" --mca oob_tcp_if_include "$PFX.0/24")
# shellcheck disable=SC2206
MPIRUN+=(${MPI_ARGS:-})
failed=0
for i in $(seq 1 "$RUNS"); do
  for np in $NPS; do
    for controller in $CONTROLLERS; do
      per=$((np / 2))
      hosts="${MH_HOSTS[0]}:$per,${MH_HOSTS[1]}:$per"
      tag="np${np}_$i"
      extra=()
      if [ "$controller" = gloo ]; then
        tag="gloo_np${np}_$i"
        secret=$(bench_secret)
        bench_store_start "$tmp/port" "$secret" "$PFX.1" || exit 1
        extra=(-x HOROVOD_GLOO_RENDEZVOUS_ADDR="$PFX.1" -x "HOROVOD_GLOO_RENDEZVOUS_PORT=$(cat "$tmp/port")"
               -x "HOROVOD_CPP_RENDEZVOUS_SECRET=$secret")
      fi
      log="$OUTDIR/$tag.log"
      echo "multihost_bench: run $i, $np ranks on $hosts, $controller controller, $(date -u +%FT%TZ), load $(cut -d' ' -f1-3 /proc/loadavg)"
      # shellcheck disable=SC2086
      timeout --kill-after=30 "$TIMEOUT_S" "${MPIRUN[@]}" -H "$hosts" -np "$np" "${extra[@]}" \
        "$HVD_BENCH" $BENCH_ARGS ${extra:+--gloo} --json "$OUTDIR/$tag.json" > "$log" 2>&1
      rc=$?
      bench_store_stop
      if [ "$rc" != 0 ]; then
        echo "multihost_bench: run $i, $np ranks, $controller FAILED (exit $rc); last lines of $log:"
        tail -20 "$log"
        failed=1
      fi
    done
  done
done
[ "$failed" = 0 ] && echo "multihost_bench: all runs passed" || echo "multihost_bench: some runs FAILED"
exit "$failed"
