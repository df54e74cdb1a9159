// Copyright horovod_cpp authors. The size sweep of hvd_bench, shared by its two modes: what each
// rank sends and expects at one size of one collective (the same for ours and the baseline),
// and the driver that checks, times (interleaved) and reports every size. The CPU mode
// (sweep.cc) compares with raw MPI on host buffers, the GPU mode (gpu_sweep.cc) with raw NCCL
// on device buffers.
//
// Sizes follow nccl-tests: allreduce and broadcast move `size` bytes per rank; allgather's
// size is its output (size/n per rank in); alltoall's and reducescatter's size is the input of
// one rank. Every collective is float32, seeded by rank with small integers, so that each rank
// can compute the exact expected result itself (sums of small integers are exact in float).
#pragma once

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <string>

#include "bench_util.h"

namespace bench {

/// True for allreduce, allgather, broadcast, alltoall and reducescatter.
bool is_sweep_op(const std::string& op);

/// nccl-tests' busbw / algbw of `op` on `n` ranks, and its formula for the table header.
double bus_factor(const std::string& op, int n);
const char* bus_factor_formula(const std::string& op);

/// The value rank r contributes at element i: small integers, exact when summed.
inline float seed(int r, int64_t i) { return static_cast<float>((r * 7 + i * 3) % 31); }
/// alltoall: what rank r sends to peer p at element i of that peer's block.
inline float seed_a2a(int r, int p, int64_t i) {
  return static_cast<float>((r * 5 + p * 3 + i) % 29);
}

/// Elements of got[0, n) that differ from want(i).
int64_t count_wrong(const float* got, int64_t n, const std::function<float(int64_t)>& want);

/// One collective at one size, seen from one rank. Allreduce and reducescatter sum; broadcast
/// is from rank 0; alltoall sends `per` elements to every rank.
struct SweepLayout {
  std::string op;
  int64_t bytes = 0;  ///< the size column (nccl-tests meaning)
  int64_t count = 0;  ///< float32 elements of that size
  int64_t per = 0;    ///< elements of one rank's block (allgather, alltoall, reducescatter)
  int64_t in_n = 0;   ///< elements of this rank's input (allreduce, broadcast: in place)
  int64_t out_n = 0;  ///< elements of this rank's output
  std::function<void(float*)> fill;    ///< writes this rank's input (in_n elements)
  std::function<float(int64_t)> want;  ///< the expected output element i
};

/// The layout of `op` at about `bytes` bytes (rounded down to whole float blocks, at least one).
SweepLayout sweep_layout(const std::string& op, int64_t bytes, int rank, int n);

/// One collective at one size: ours and the baseline's timed step, and their checks (each
/// fills its input, runs once and returns its wrong elements on this rank). `ours` is empty
/// where horovod_cpp lacks the collective.
struct SweepCase {
  SweepLayout layout;
  std::function<void()> ours, base;
  std::function<int64_t()> check_ours, check_base;
};

/// What the sweep compares ours with.
struct SweepBaseline {
  std::string label;  ///< column headers: "MPI", "NCCL"
  std::string key;    ///< JSON member of each row: "mpi", "nccl"
  std::string note;   ///< printed once above the tables ("" for none)
  std::function<SweepCase(const SweepLayout&)> make_case;
};

/// The sweep over opts.ops and sizes opts.min_bytes .. opts.max_bytes: for each size, checks
/// ours and the baseline (when opts.check), times them interleaved (measure_interleaved on
/// `comm`), prints a row on rank 0 and records it in `out`. Returns the wrong elements summed
/// over ranks.
int64_t run_sweep_with(const Options& opts, MPI_Comm comm, const SweepBaseline& baseline,
                       Json* out);

}  // namespace bench
