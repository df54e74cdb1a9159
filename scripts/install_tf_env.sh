#!/usr/bin/env bash
# Makes the TensorFlow virtual environment (${TF_VENV:-.venv-tf} in the repository root):
# tensorflow-cpu (Keras 3) needs a newer numpy than Debian's torch, so it gets its own venv,
# without the system site-packages. scripts/run_tests.sh installs horovod_cpp into it and runs
# the TensorFlow tests with it. Set HOROVOD_CPP_NO_TF=1 to skip.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib_venv.sh
skip_env HOROVOD_CPP_NO_TF "TensorFlow environment"
TF_VENV=$(realpath -m "${TF_VENV:-.venv-tf}")
make_venv "$TF_VENV"
"$TF_VENV/bin/python" -m pip install -q --upgrade "tensorflow-cpu>=2.16" pytest
"$TF_VENV/bin/python" -c "import tensorflow as tf, keras; print('install_tf_env: TensorFlow', tf.__version__, 'Keras', keras.__version__, 'in', '$TF_VENV')" 2>/dev/null
