# shellcheck shell=bash disable=SC2154  # $root is the sourcing script's
# Sourced by the benchmark scripts that run hvd_bench on the Gloo controller: serves a fresh
# rendezvous store (horovod_cpp's own, standard library only) for one run.
#
#   bench_store_start PORTFILE SECRET [HOST]   serves on HOST (default 127.0.0.1), writes the
#                                              port to PORTFILE once listening; sets
#                                              BENCH_STORE_PID; returns 1 if it did not start
#   bench_store_stop                           stops it (safe to call when none runs)
#   bench_secret                               prints a fresh 64-hex-character secret
# Needs $root (the repository) and $PYTHON (any Python 3).
BENCH_STORE_PID=""

bench_secret() { head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n'; }

bench_store_start() {
  rm -f "$1"
  "$PYTHON" - "$1" "$2" "${3:-127.0.0.1}" "$root/bindings/horovod_cpp/runner/rendezvous.py" <<'PY' &
import importlib.util, os, signal, sys, time
spec = importlib.util.spec_from_file_location("rendezvous", sys.argv[4])
rendezvous = importlib.util.module_from_spec(spec)
spec.loader.exec_module(rendezvous)
store = rendezvous.StoreServer(sys.argv[2], host=sys.argv[3]).start()
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(str(store.port))
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
while True:
    time.sleep(1)
PY
  BENCH_STORE_PID=$!
  for _ in $(seq 1 100); do [ -s "$1" ] && return 0; sleep 0.1; done
  echo "bench_store_start: the store did not start"
  return 1
}

bench_store_stop() {
  if [ -n "$BENCH_STORE_PID" ]; then
    kill "$BENCH_STORE_PID" 2>/dev/null
    wait "$BENCH_STORE_PID" 2>/dev/null
    BENCH_STORE_PID=""
  fi
}
