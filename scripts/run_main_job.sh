#!/usr/bin/env bash
# Builds horovod_cpp and runs the main job under mpirun with ${NP:-2} ranks: the digits
# classifier (LibTorch) when it is built, else the plain C++ demo.
set -euo pipefail
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
BUILD_DIR=${BUILD_DIR:-build}
BUILD_DIR=$BUILD_DIR bash scripts/build.sh
NP=${NP:-2}
if [ -x "$BUILD_DIR/examples/train_digits" ]; then
  exec mpirun --oversubscribe --bind-to none -np "$NP" "$BUILD_DIR/examples/train_digits" "$@"
fi
exec mpirun --oversubscribe --bind-to none -np "$NP" "$BUILD_DIR/examples/hello_allreduce"
