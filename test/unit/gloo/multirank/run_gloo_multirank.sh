#!/usr/bin/env bash
# Runs the multi-rank C++ suite (test/mpi's MPI-free cases) as a Gloo job under
# `hvdrun --gloo -np N` (no mpirun), with MPI_Init refused in every worker (no_mpi_init.c).
# Usage: run_gloo_multirank.sh BUILD_DIR NP [Catch2 args...]
#   BUILD_DIR holds test/unit/gloo/multirank/ and bindings/python (the module, for hvdrun).
#   HVD_PYTHON: the interpreter (default python3). Extra env (e.g. HOROVOD_CPP_SHM=0) passes
#   through to the workers.
set -euo pipefail
build=$(cd "$1" && pwd)
np_=$2
shift 2
dir="$build/test/unit/gloo/multirank"
export PYTHONPATH="$build/bindings/python${PYTHONPATH:+:$PYTHONPATH}"
export LD_PRELOAD="$dir/libhvd_no_mpi_init.so${LD_PRELOAD:+:$LD_PRELOAD}"
# The suite shuts down and inits again in every case, in step on every rank, as a fixed job
# does: without HOROVOD_CPP_WORKER_ID the places come from the environment each time (with
# it, every init after the first would wait for an assignment in the store).
exec timeout 900 "${HVD_PYTHON:-python3}" -m horovod_cpp.runner --gloo -np "$np_" \
  env -u HOROVOD_CPP_WORKER_ID "$dir/hvd_gloo_multirank_tests" "$@"
