#!/usr/bin/env bash
# Makes the Ray virtual environment (${RAY_VENV:-.venv-ray} in the repository root) for
# horovod_cpp.ray and its tests (test/ray). Ray comes from PyPI; the venv sees the system
# site-packages (Debian's numpy, torch and pytest, which Ray's wheel works with), so only Ray
# and its own dependencies land in it. scripts/run_tests.sh installs horovod_cpp into it and
# runs test/ray with it. Set HOROVOD_CPP_NO_RAY=1 to skip.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib_venv.sh
skip_env HOROVOD_CPP_NO_RAY "Ray environment"
RAY_VENV=$(realpath -m "${RAY_VENV:-.venv-ray}")
make_venv "$RAY_VENV" --system-site-packages
"$RAY_VENV/bin/python" -m pip install -q --upgrade "ray>=2.9"
# Ray must not have replaced what the torch tests run on.
"$RAY_VENV/bin/python" -c "import ray, numpy, torch; print('install_ray_env: Ray', ray.__version__, 'numpy', numpy.__version__, 'torch', torch.__version__, 'in', '$RAY_VENV')"
