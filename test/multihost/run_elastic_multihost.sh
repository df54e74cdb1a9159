#!/usr/bin/env bash
# An elastic job on two hosts made of network namespaces (issue 37), one host's network cut
# mid-job: see elastic_netcut.py (beside this script) for what runs and what is checked.
#
#   sudo test/multihost/run_elastic_multihost.sh
#   sudo test/multihost/run_elastic_multihost.sh --timings   (instead: scripts/elastic_recovery.py
#                                                            on these hosts, median of 5)
#
# Needs root, `ip` and `unshare`, and horovod_cpp built with Gloo and the elastic primitives.
# Environment: PYTHON (default .venv/bin/python, else python3), SUBNET_PREFIX (default
# 10.77.0). Exit: 0 passed, 1 failed, 77 skipped. Everything made here is removed on exit.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
WHO=multihost-elastic
PFX=${SUBNET_PREFIX:-10.77.0}
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
. "$here/hosts.sh"

mh_require "$WHO"
if ! "$PYTHON" -c "import sys, horovod_cpp as h; from horovod_cpp import _C; sys.exit(0 if h.gloo_built() and hasattr(_C, 'elastic_hosts_updated') else 1)"; then
  echo "$WHO: SKIPPED: this build has no Gloo or no elastic primitives"
  exit 77
fi
mh_start "$WHO" 600
cd "$root"
if [ "${1:-}" = --timings ]; then
  timeout --kill-after=30 900 "$PYTHON" scripts/elastic_recovery.py --agent "$MH_TMP/agent" \
    --nics "$PFX.0/24" --hosts h1,h2
else
  timeout --kill-after=30 400 "$PYTHON" "$here/elastic_netcut.py" "$MH_TMP/agent" "$PFX.0/24" \
    ip link set "${MH_NS}h2" down
fi
rc=$?
[ "$rc" = 0 ] && echo "$WHO: PASSED" || echo "$WHO: FAILED (exit $rc)"
exit "$rc"
