#!/usr/bin/env bash
# A real two-host run on one machine: `hvdrun -np 4 -H h1:2,h2:2` across two hosts made of
# network namespaces (each with its own hostname and address, joined by a bridge), running
# test/runner/job_check.py, which checks local/cross ranks, that ranks of one host share a
# host name, and the values of allreduce/allgather/broadcast; then horovod_cpp.run on the same
# hosts (run_func_hosts.py). hvdrun's pre-launch check
# probes both hosts through the same launch path first.
#
#   sudo test/multihost/run_multihost.sh          (Open MPI over TCP between the hosts)
#   sudo test/multihost/run_multihost.sh --gloo   (hvdrun --gloo: no mpirun; see below)
#   sudo test/multihost/run_multihost.sh --elastic          (an elastic job, one host's network
#                                                           cut: test/multihost/elastic_netcut.py)
#   sudo test/multihost/run_multihost.sh --elastic-timings  (scripts/elastic_recovery.py here)
#   sudo test/multihost/run_multihost.sh --torchrun  (a torchrun agent on each host, 2 workers
#                                                 each: test/runner/torchrun_worker.py backend,
#                                                 then the digits job with --ddp; no hvdrun)
#   sudo test/multihost/run_multihost.sh --ray    (a Ray cluster whose nodes are the two hosts:
#                                                 RayExecutor and ElasticRayExecutor, a host
#                                                 lost and back: test/multihost/ray_hosts.py;
#                                                 PYTHON must have Ray, e.g. .venv-ray)
# With --gloo hvdrun serves the rendezvous on the bridge address and starts the workers
# through the rsh agent, as it would over ssh: first test/runner/gloo_worker.py (the workers
# read their places and meet through the store, over the hosts' network), then, when this
# build has Gloo (horovod_cpp.gloo_built()), job_check.py on the library's Gloo World, the
# Python digits job and the C++ multi-rank suite (under ${BUILD_DIR:-build}; about 60 s).
#
# Needs root, `ip` and `unshare`. Environment: PYTHON (a python with horovod_cpp importable;
# default .venv/bin/python, else python3), SUBNET_PREFIX (default 10.77.0; only <prefix>.1,
# .11, .12 are used), TIMEOUT_S (default 300). The hosts are made by hosts.sh (beside this
# script).
# Exit: 0 passed, 1 failed, 77 skipped (not root / no network namespaces here). Everything
# made here (namespaces, veth pairs, bridge, /etc/hosts lines) is removed on exit, pass or fail.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
MODE=mpi
case "${1:-}" in
  --gloo) MODE=gloo ;; --elastic) MODE=elastic ;; --elastic-timings) MODE=timings ;;
  --ray) MODE=ray ;; --torchrun) MODE=torchrun ;;
esac
WHO=multihost
[ "$MODE" = mpi ] || WHO=multihost-$MODE
PFX=${SUBNET_PREFIX:-10.77.0}
TIMEOUT_S=${TIMEOUT_S:-300}
if [ -z "${PYTHON:-}" ]; then
  if [ -x "$root/.venv/bin/python" ]; then PYTHON="$root/.venv/bin/python"; else PYTHON=python3; fi
fi
MH_BR=hvdmhbr0
MH_NS=hvdmh_
MH_PFX=$PFX
MH_HOSTS=(h1 h2)
MH_MARK="# horovod_cpp multihost test $$"
MH_LOCK=/run/lock/horovod_cpp_multihost.lock
# shellcheck source=test/multihost/hosts.sh
. "$here/hosts.sh"  # mh_require, mh_start (and the rest)

mh_require "$WHO"
"$PYTHON" -c "import horovod_cpp.runner" 2>/dev/null || { echo "$WHO: $PYTHON cannot import horovod_cpp"; exit 1; }
if [ "$MODE" = ray ]; then
  "$PYTHON" -c "import ray" 2>/dev/null || { echo "$WHO: SKIPPED: $PYTHON has no Ray"; exit 77; }
fi
if [ "$MODE" = torchrun ]; then
  "$PYTHON" -c "import sys, torch, horovod_cpp as h; sys.exit(0 if h.gloo_built() else 1)" \
    2>/dev/null || { echo "$WHO: SKIPPED: $PYTHON has no torch or this build no Gloo"; exit 77; }
fi
if [ "$MODE" = elastic ] || [ "$MODE" = timings ] || [ "$MODE" = ray ]; then
  "$PYTHON" -c "import sys, horovod_cpp as h; from horovod_cpp import _C; sys.exit(0 if h.gloo_built() and hasattr(_C, 'elastic_hosts_updated') else 1)" ||
    { echo "$WHO: SKIPPED: this build has no Gloo or no elastic primitives"; exit 77; }
fi
# One multi-host test at a time on this machine (other checkouts may run theirs).
mh_start "$WHO" 600
tmp=$MH_TMP

echo "$WHO: hosts ${MH_HOSTS[*]} at $PFX.11, $PFX.12 (bridge $MH_BR, $PFX.1)"
cd "$root"

if [ "$MODE" = ray ]; then
  timeout --kill-after=30 "$TIMEOUT_S" "$PYTHON" "$here/ray_hosts.py" "$MH_NS" "$PFX" h1 h2 \
    2>&1 | tee "$tmp/out.ray"
  rc=${PIPESTATUS[0]}
  # Every Ray process this test started ran in a host's namespace or is the driver's head:
  # none may outlive it (mh_down removes the namespaces, not their processes).
  for h in "${MH_HOSTS[@]}"; do ip netns pids "$MH_NS$h" 2>/dev/null | xargs -r kill -9; done
  [ "$rc" = 0 ] && grep -q "^RAY_HOSTS OK" "$tmp/out.ray" && { echo "$WHO: PASSED"; exit 0; }
  echo "$WHO: FAILED (exit $rc)"
  exit 1
fi
if [ "$MODE" = torchrun ]; then
  # torchrun_job LOG ARGS...: one torchrun agent per host (node ranks 0 and 1, 2 workers each,
  # torchrun's static rendezvous on h1), each started in its host through the rsh agent; 0
  # when both agents exit 0. Debian's torch 1.13 on Python 3.11 needs --redirects/--tee named.
  torchrun_job() {
    local log=$1; shift
    local port=$((29000 + RANDOM % 1000)) i rc=0 pids=()
    for i in 0 1; do
      timeout --kill-after=30 "$TIMEOUT_S" "$tmp/agent" "h$((i + 1))" \
        "cd $root && HOROVOD_GLOO_TIMEOUT_SECONDS=60 $PYTHON -m torch.distributed.run" \
        "--redirects 1 --tee 1 --monitor_interval 0.5 --nnodes 2 --node_rank $i" \
        "--master_addr h1 --master_port $port --nproc_per_node 2 $*" > "$log.$i" 2>&1 &
      pids+=($!)
    done
    for i in "${pids[@]}"; do wait "$i" || rc=1; done
    cat "$log.0" "$log.1"
    return "$rc"
  }
  mkdir -p "$tmp/oks"
  # torch.distributed's horovod_cpp backend starts horovod_cpp (its collectives and torch's
  # DDP checked), then every collective of horovod_cpp itself is checked.
  torchrun_job "$tmp/out.check" test/runner/torchrun_worker.py backend "$tmp/oks" ||
    { echo "$WHO: FAILED (torchrun_worker.py backend)"; exit 1; }
  # Every rank got through, ranks 0-1 on h1 and 2-3 on h2, and all met through rank 0's
  # store at h1's address (not loopback).
  for r in 0 1 2 3; do
    h=h1; [ "$r" -ge 2 ] && h=h2
    grep -q "host=$h/node.* store=h1:" "$tmp/oks/ok.0.$r" 2>/dev/null ||
      { echo "$WHO: FAILED (rank $r: $(cat "$tmp/oks/ok.0.$r" 2>&1))"; exit 1; }
  done
  echo "$WHO: torchrun job PASSED (4 workers on h1:2,h2:2, every collective checked, through torch.distributed's horovod_cpp backend too)"
  torchrun_job "$tmp/out.digits" examples/python/train_digits.py --ddp --min-accuracy 0.95 ||
    { echo "$WHO: FAILED (train_digits.py --ddp under torchrun)"; exit 1; }
  grep -h "final test accuracy" "$tmp/out.digits.0"
  echo "$WHO: PASSED (torchrun, 4 ranks on h1:2,h2:2)"
  exit 0
fi
if [ "$MODE" = elastic ] || [ "$MODE" = timings ]; then
  if [ "$MODE" = timings ]; then
    timeout --kill-after=30 900 "$PYTHON" scripts/elastic_recovery.py --agent "$tmp/agent" \
      --nics "$PFX.0/24" --hosts h1,h2
  else
    timeout --kill-after=30 "$TIMEOUT_S" "$PYTHON" "$here/elastic_netcut.py" "$tmp/agent" \
      "$PFX.0/24" ip link set "${MH_NS}h2" down
  fi
  rc=$?
  [ "$rc" = 0 ] && echo "$WHO: PASSED" || echo "$WHO: FAILED (exit $rc)"
  exit "$rc"
fi

# job LOG ARGS...: hvdrun -np 4 on h1:2,h2:2 in this mode, output in LOG; hvdrun's status.
job() {
  local log=$1; shift
  local launch=(--mpi --mpi-args "--mca plm_rsh_agent $tmp/agent --mca btl self,vader,tcp")
  [ "$MODE" = gloo ] && launch=(--gloo --rsh-agent "$tmp/agent")
  timeout --kill-after=30 "$TIMEOUT_S" "$PYTHON" -m horovod_cpp.runner -np 4 -H h1:2,h2:2 \
    --verbose --start-timeout 60 --network-interface "$PFX.0/24" "${launch[@]}" "$@" 2>&1 |
    tee "$log"
  return "${PIPESTATUS[0]}"
}

if [ "$MODE" = gloo ]; then
  job "$tmp/out.launcher" "$PYTHON" test/runner/gloo_worker.py; rc=$?
  ok=1
  [ "$rc" = 0 ] && grep -q "GLOO_WORKER OK size=4" "$tmp/out.launcher" &&
    grep -q "rendezvous store on $PFX.1:" "$tmp/out.launcher" || ok=0
  for r in 2 3; do  # ranks 2 and 3 were placed on h2
    grep -q "^\[1,$r\]<stdout>:GLOO_ENV .*\"host\": \"h2\"" "$tmp/out.launcher" || ok=0
  done
  [ "$ok" = 1 ] || { echo "$WHO: FAILED (launcher job, exit $rc)"; exit 1; }
  echo "$WHO: launcher job PASSED (4 workers on h1:2,h2:2 met through the store)"
  if ! "$PYTHON" -c "import sys, horovod_cpp; sys.exit(0 if horovod_cpp.gloo_built() else 1)"; then
    echo "$WHO: this build has no Gloo; the library job is skipped"
    exit 0
  fi
fi
job "$tmp/out" "$PYTHON" test/runner/job_check.py --local-size 2 --cross-size 2; rc=$?
if [ "$rc" != 0 ] || ! grep -q "JOB_CHECK OK size=4 hosts=\['h1', 'h2'\]" "$tmp/out"; then
  echo "$WHO: FAILED (exit $rc)"
  exit 1
fi
# horovod_cpp.run (Horovod's horovod.run) from a Python driver, on the same hosts.
timeout --kill-after=30 "$TIMEOUT_S" "$PYTHON" "$here/run_func_hosts.py" "$tmp/agent" \
  "$PFX.0/24" "$MODE" 2>&1 | tee "$tmp/out.run_func"
if [ "${PIPESTATUS[0]}" != 0 ] || ! grep -q "^RUN_FUNC OK" "$tmp/out.run_func"; then
  echo "$WHO: FAILED (horovod_cpp.run across the hosts)"
  exit 1
fi
if [ "$MODE" = gloo ]; then
  # The digits job (it checks its accuracy and that every rank ends with the same weights) and
  # the C++ multi-rank suite, with MPI_Init ending any process that calls it: the hierarchical
  # paths with Gloo between the hosts.
  job "$tmp/out.digits" "$PYTHON" examples/python/train_digits.py ||
    { echo "$WHO: FAILED (examples/python/train_digits.py)"; exit 1; }
  build=${BUILD_DIR:-build}
  [ "${build#/}" = "$build" ] && build="$root/$build"
  dir="$build/test/unit/gloo/multirank"
  if [ -x "$dir/hvd_gloo_multirank_tests" ] && [ -f "$dir/libhvd_no_mpi_init.so" ]; then
    job "$tmp/out.suite" env -u HOROVOD_CPP_WORKER_ID LD_PRELOAD="$dir/libhvd_no_mpi_init.so" \
      "$dir/hvd_gloo_multirank_tests" || { echo "$WHO: FAILED (the C++ multi-rank suite)"; exit 1; }
  else
    echo "$WHO: the C++ multi-rank suite is not built under ${BUILD_DIR:-build}; skipped"
  fi
fi
echo "$WHO: PASSED (4 ranks on h1:2,h2:2$([ "$MODE" = gloo ] && echo ", Gloo controller"))"
exit 0
