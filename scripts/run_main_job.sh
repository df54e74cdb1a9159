#!/usr/bin/env bash
# Builds only what the main job needs (the library, the LibTorch adapter and the digits
# classifier; the plain C++ demo when LibTorch is missing) and runs it through hvdrun with
# ${NP:-2} ranks on this host. Same CMake configuration as scripts/build.sh, so a later
# scripts/run_tests.sh reuses the build.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
NP=${NP:-2}
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-RelWithDebInfo} \
  -DHOROVOD_CPP_BUILD_TESTS=ON -DHOROVOD_CPP_BUILD_EXAMPLES=ON ${CMAKE_ARGS:-} > /dev/null
if cmake --build "$BUILD_DIR" --target help | grep -q '^\.\.\. train_digits$'; then
  job=train_digits
else
  echo "run_main_job: LibTorch not found; running the plain C++ demo instead" >&2
  job=hello_allreduce
fi
cmake --build "$BUILD_DIR" --target "$job" -j"${JOBS:-$(nproc)}"
exec python3 scripts/hvdrun -np "$NP" --no-tag-output "$BUILD_DIR/examples/$job" "$@"
