#!/usr/bin/env bash
# Builds the libFuzzer targets of test/fuzz with clang (ASan + UBSan + coverage) and runs
# each for FUZZ_SECONDS (default 6) from the checked-in seed corpus (called by
# scripts/run_tests.sh; docs/testing.md). New inputs go to a scratch corpus, not into the
# tree. A crash fails the run and leaves the input in $FUZZ_WORK/crashes/<target>/: add it to
# test/fuzz/regressions/<target>/ (replayed by CTest on every run), fix the bug, and add a
# unit test with the input.
#   bash scripts/run_fuzzers.sh [target...]     (default: every target)
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${FUZZ_BUILD_DIR:-build-fuzz}
SECONDS_PER_TARGET=${FUZZ_SECONDS:-6}
WORK=${FUZZ_WORK:-$DIR/fuzz-work}
TARGETS=("$@")
[ ${#TARGETS[@]} -eq 0 ] && TARGETS=(fuzz_wire fuzz_controller fuzz_config fuzz_json_escape fuzz_execute)
CC=${FUZZ_CC:-clang-14} CXX=${FUZZ_CXX:-clang++-14} cmake -S . -B "$DIR" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHOROVOD_CPP_BUILD_FUZZERS=ON -DHOROVOD_CPP_BUILD_TESTS=ON \
  -DHOROVOD_CPP_BUILD_EXAMPLES=OFF -DHOROVOD_CPP_BUILD_PYTHON=OFF -DHOROVOD_CPP_WITH_CUDA=OFF \
  -DHOROVOD_CPP_WITH_TORCH=OFF >/dev/null
cmake --build "$DIR" -j"${JOBS:-$(nproc)}" --target "${TARGETS[@]}"
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1"
export UBSAN_OPTIONS="halt_on_error=1:abort_on_error=1:print_stacktrace=1"
status=0
for t in "${TARGETS[@]}"; do
  mkdir -p "$WORK/corpus/$t" "$WORK/crashes/$t"
  log="$WORK/$t.log"
  if "$DIR/test/fuzz/$t" -max_total_time="$SECONDS_PER_TARGET" -timeout=10 -rss_limit_mb=2048 \
      -max_len=4096 -print_final_stats=1 -artifact_prefix="$WORK/crashes/$t/" \
      "$WORK/corpus/$t" "test/fuzz/corpus/$t" >"$log" 2>&1; then
    echo "# fuzz $t: $(grep -m1 'number_of_executed_units' "$log" | awk '{print $2}') inputs in" \
         "${SECONDS_PER_TARGET} s, no crash"
  else
    echo "# fuzz $t: FAILED (input in $WORK/crashes/$t/):"
    tail -n 40 "$log"
    status=1
  fi
done
exit $status
