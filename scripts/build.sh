#!/usr/bin/env bash
# Configures and builds horovod_cpp with tests and examples into ${BUILD_DIR:-build}.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-RelWithDebInfo} \
  -DHOROVOD_CPP_BUILD_TESTS=ON -DHOROVOD_CPP_BUILD_EXAMPLES=ON ${CMAKE_ARGS:-}
cmake --build "$BUILD_DIR" -j"${JOBS:-$(nproc)}"
