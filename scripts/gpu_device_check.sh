#!/bin/bash
# gpu_device_check.sh OUTDIR -- on a GPU machine with the kit of ../shared/gpu (made inside the
# checkout as build-gpukit, docs/gpu.md): builds the project with CUDA + NCCL (and the pybind11
# module, and the LibTorch adapter unless WITH_TORCH=0) and runs every GPU check, each under a
# timeout, logging to OUTDIR:
#   build     device_build.sh (NCCL 2.30.7 from source unless build-gpukit/nccl exists)
#   cpp       the C++ GPU tests (test/gpu) at np $NPS, ranks sharing cuda:0
#   torchcpp  the LibTorch CUDA tests (test/torch/test_torch_cuda.cc) at np $NPS
#   py        horovod_cpp.torch on CUDA tensors (test/python/test_torch_cuda.py and the CUDA
#             Adasum cases of test_adasum.py) at np $NPS
#   examples  the digits job on GPUs, C++ (LibTorch) and Python, np 1 and 2 (Python with
#             --adasum too at np 2)
#   hang      test/gpu/no_hang_cases.py: misconfigurations end with an error on every rank
#   bench     hvd_bench --gpu against raw NCCL (np 1 timings; $BENCH_ARGS)
# STAGES (default: all of the above, in that order) picks some. summary.txt has one line each.
set -u
OUT=$(mkdir -p "$1" && cd "$1" && pwd)
cd "$(dirname "$0")/.."
KIT=$PWD/build-gpukit
BUILD=$PWD/build-gpu
STAGES=${STAGES:-build cpp torchcpp py examples hang bench}
NPS=${NPS:-1 2 3}
export PYTHONUNBUFFERED=1
SUMMARY=$OUT/summary.txt
: > "$SUMMARY"
note() { echo "$*" | tee -a "$SUMMARY"; }
# verdict NAME RC: PASSED / SKIPPED / TIMEOUT / FAILED into the summary.
verdict() {
  case $2 in
    0) note "$1: PASSED";;
    77) note "$1: SKIPPED (77)";;
    124|137) note "$1: TIMEOUT";;
    *) note "$1: FAILED (exit $2)";;
  esac
}
has() { [[ " $STAGES " == *" $1 "* ]]; }

if has build; then
  WITH_PYTHON=1 WITH_TORCH=${WITH_TORCH:-1} bash "$KIT/device_build.sh" . "$BUILD" > "$OUT/build.txt" 2>&1
  rc=$?
  verdict build $rc
  [ $rc -eq 0 ] || { tail -40 "$OUT/build.txt"; exit 1; }
  # libhorovod_cpp must use the shared libstdc++ (csrc/CMakeLists.txt explains why).
  ninja -C "$BUILD" -t commands 2>/dev/null | grep -m1 -- "-o csrc/libhorovod_cpp.so" > "$OUT/link_command.txt"
  note "libstdc++ of libhorovod_cpp: $(ldd "$BUILD/csrc/libhorovod_cpp.so" | grep -o 'libstdc++[^ ]* => [^ ]*' || echo 'NOT the shared one')"
fi

source "$KIT/env.sh"
export LD_LIBRARY_PATH=$KIT/nccl/lib:$LD_LIBRARY_PATH
export PYTHONPATH=$BUILD/bindings/python
export NCCL_DEBUG=${NCCL_DEBUG:-WARN} HOROVOD_CPP_NCCL_TIMEOUT_SECONDS=60
MPI=(mpirun --oversubscribe --bind-to none -x LD_LIBRARY_PATH -x PYTHONPATH -x PATH -x NCCL_DEBUG
     -x HOROVOD_CPP_NCCL_TIMEOUT_SECONDS)
# Several ranks on the one GPU (NCCL >= 2.30).
SHARE=(-x NCCL_MULTI_RANK_GPU_ENABLE=1)
# Python: pip's torch brings its own, older NCCL (2.28, which refuses to share a GPU) and,
# imported first, it would be the process's libnccl.so.2; preload the kit's.
PYSHARE=("${SHARE[@]}" -x LD_PRELOAD=$KIT/nccl/lib/libnccl.so.2)

if has cpp; then
  NPS="$NPS" bash "$KIT/device_test.sh" "$OUT/cpp" "$BUILD" > /dev/null 2>&1
  sed 's/^/cpp /' "$OUT/cpp/summary.txt" | tee -a "$SUMMARY"
fi

if has torchcpp; then
  T=$BUILD/test/torch/hvd_torch_cuda_tests
  if [ -x "$T" ]; then
    for np in $NPS; do
      timeout -k 10 240 "${MPI[@]}" "${SHARE[@]}" -np "$np" "$T" > "$OUT/torchcpp_np$np.txt" 2>&1
      verdict "torchcpp np $np" $?
      grep -aE "All tests passed|test cases:" "$OUT/torchcpp_np$np.txt" | sort | uniq -c | tee -a "$SUMMARY"
    done
  else
    note "torchcpp: not built"
  fi
fi

if has py; then
  for np in $NPS; do
    timeout -k 10 300 "${MPI[@]}" "${PYSHARE[@]}" -np "$np" \
      bash -c 'cd test/python && exec python3 -m pytest -p no:cacheprovider -q -x test_torch_cuda.py \
               test_adasum.py::test_torch_cuda_allreduce test_adasum.py::test_torch_cuda_grouped_is_per_tensor' \
      > "$OUT/py_np$np.txt" 2>&1
    verdict "py np $np" $?
    grep -aE "passed|failed|error" "$OUT/py_np$np.txt" | tail -"$np" | tee -a "$SUMMARY"
  done
fi

if has examples; then
  for np in 1 2; do
    if [ -x "$BUILD/examples/train_digits" ]; then
      timeout -k 10 240 "${MPI[@]}" "${SHARE[@]}" -np "$np" "$BUILD/examples/train_digits" --cuda \
        --epochs 10 --checkpoint "/tmp/digits_cpp_np$np.pt" > "$OUT/example_cpp_np$np.txt" 2>&1
      verdict "example C++ --cuda np $np" $?
      tail -3 "$OUT/example_cpp_np$np.txt" | tee -a "$SUMMARY"
    fi
    timeout -k 10 240 "${MPI[@]}" "${PYSHARE[@]}" -np "$np" python3 examples/python/train_digits.py \
      --cuda --epochs 10 --checkpoint "/tmp/digits_py_np$np.pt" --min-accuracy 0.95 \
      > "$OUT/example_py_np$np.txt" 2>&1
    verdict "example Python --cuda np $np" $?
    tail -2 "$OUT/example_py_np$np.txt" | tee -a "$SUMMARY"
    ls -la "/tmp/digits_py_np$np.pt" >> "$OUT/example_py_np$np.txt" 2>&1
    if [ "$np" = 1 ]; then  # hvd.DistributedDataParallel with its module on the GPU
      timeout -k 10 240 "${MPI[@]}" "${PYSHARE[@]}" -np 1 python3 examples/python/train_digits.py \
        --cuda --ddp --epochs 10 --min-accuracy 0.95 > "$OUT/example_py_ddp_np1.txt" 2>&1
      verdict "example Python --cuda --ddp np 1" $?
      tail -2 "$OUT/example_py_ddp_np1.txt" | tee -a "$SUMMARY"
      # torch's own DDP on torch.distributed's horovod_cpp backend (CUDA futures, NCCL path)
      timeout -k 10 240 "${MPI[@]}" "${PYSHARE[@]}" -np 1 python3 examples/python/train_digits.py \
        --cuda --torch-ddp --epochs 10 --min-accuracy 0.95 > "$OUT/example_py_torch_ddp_np1.txt" 2>&1
      verdict "example Python --cuda --torch-ddp np 1" $?
      tail -2 "$OUT/example_py_torch_ddp_np1.txt" | tee -a "$SUMMARY"
    fi
    if [ "$np" -gt 1 ]; then  # Adasum of CUDA gradients (host-staged), default 20 epochs
      timeout -k 10 240 "${MPI[@]}" "${PYSHARE[@]}" -np "$np" python3 examples/python/train_digits.py \
        --cuda --adasum --min-accuracy 0.95 > "$OUT/example_py_adasum_np$np.txt" 2>&1
      verdict "example Python --cuda --adasum np $np" $?
      tail -2 "$OUT/example_py_adasum_np$np.txt" | tee -a "$SUMMARY"
    fi
  done
fi

if has hang; then
  # No sharing asked for: rank 1's local rank has no GPU of its own.
  timeout -k 10 120 "${MPI[@]}" -np 2 python3 test/gpu/no_hang_cases.py default-device \
    > "$OUT/hang_default_device.txt" 2>&1
  verdict "no hang: default device, 2 ranks on 1 GPU" $?
  grep -a "^rank" "$OUT/hang_default_device.txt" | cut -c1-300 | tee -a "$SUMMARY"
  # Sharing asked for (HOROVOD_CPP_CUDA_DEVICE=0) with an NCCL older than 2.30 (pip's), if any.
  OLD=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null)
  if [ -n "$OLD" ] && [ -e "$OLD/libnccl.so.2" ]; then
    LD_LIBRARY_PATH=$OLD:$LD_LIBRARY_PATH timeout -k 10 120 "${MPI[@]}" -x HOROVOD_CPP_CUDA_DEVICE=0 \
      -np 2 python3 test/gpu/no_hang_cases.py refused-sharing > "$OUT/hang_refused_sharing.txt" 2>&1
    verdict "no hang: sharing refused by NCCL < 2.30 ($OLD)" $?
    grep -a "^rank" "$OUT/hang_refused_sharing.txt" | cut -c1-300 | tee -a "$SUMMARY"
  fi
fi

if has bench; then
  B=$BUILD/examples/benchmark/hvd_bench
  timeout -k 10 300 "${MPI[@]}" -np 1 "$B" --gpu ${BENCH_ARGS:-} > "$OUT/bench_np1.txt" 2>&1
  verdict "bench np 1" $?
  tail -40 "$OUT/bench_np1.txt"
  if [ -n "${BENCH2_ARGS:-}" ]; then
    timeout -k 10 120 "${MPI[@]}" "${SHARE[@]}" -np 2 "$B" --gpu $BENCH2_ARGS > "$OUT/bench_np2.txt" 2>&1
    verdict "bench np 2 (correctness)" $?
    tail -15 "$OUT/bench_np2.txt"
  fi
fi
cat "$SUMMARY"
