// Copyright horovod_cpp authors.
#include "transport/mpi/mpi_context.h"

#ifdef __linux__
#include <sched.h>
#endif

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "common/exit_hook.h"
#include "common/logging.h"
#include "kernels/host/cpu_ops.h"

namespace hvd {
namespace {

// MPI_Finalize runs at process exit when horovod_cpp initialized MPI, so that init() may be
// called again after shutdown() (MPI cannot be initialized twice).
std::once_flag g_finalize_once;
void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

// MPI_Finalize deletes MPI_COMM_SELF's attributes before anything else, MPI still working:
// an attribute of ours there shuts horovod_cpp down when the program finalizes MPI first
// (common/exit_hook.h). Set once per process; a no-op once the library is shut down.
std::once_flag g_self_hook_once;
int shutdown_on_self_delete(MPI_Comm, int, void*, void*) {
  run_library_shutdown();
  return MPI_SUCCESS;
}
void set_finalize_hook() {
  int key = MPI_KEYVAL_INVALID;
  if (MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, shutdown_on_self_delete, &key, nullptr) ==
      MPI_SUCCESS) {
    MPI_Comm_set_attr(MPI_COMM_SELF, key, nullptr);
  }
}

template <DataType D, ReduceOp O>
void cpu_op(void* in, void* inout, int* len, MPI_Datatype*) {
  reduce_into(inout, in, *len, D, O);
}

// Open MPI 4.1's vectorized reductions (its op/avx component) saturate the sums of 8- and
// 16-bit integers (open-mpi/ompi#8045, closed as "won't fix"): 200 + 200 in uint8 gives 255,
// not 144, from 16 elements on. The library's integer sums wrap like the type on every other
// path (the shm fold, Gloo, NCCL), and which path a call takes may change from call to call,
// so these sums use an op of ours (cpu_ops' reduce_into). The other ops cannot overflow
// (min, max) or already wrap (product).
// The index of `d` in MpiContext::wrap_sum_ops_, or -1.
int small_int_index(DataType d) {
  switch (d) {
    case DataType::kInt8: return 0;
    case DataType::kUInt8: return 1;
    case DataType::kInt16: return 2;
    case DataType::kUInt16: return 3;
    default: return -1;
  }
}

template <DataType D>
void create_half_ops(MPI_Op* ops) {
  MPI_Op_create(&cpu_op<D, ReduceOp::kSum>, 1, &ops[0]);
  ops[1] = ops[0];  // average reduces as sum
  MPI_Op_create(&cpu_op<D, ReduceOp::kMin>, 1, &ops[2]);
  MPI_Op_create(&cpu_op<D, ReduceOp::kMax>, 1, &ops[3]);
  MPI_Op_create(&cpu_op<D, ReduceOp::kProduct>, 1, &ops[4]);
}

}  // namespace

std::string mpi_error_string(int code) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, buf, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(buf, static_cast<size_t>(len));
}

MpiContext::~MpiContext() { release(); }

Status MpiContext::init(bool use_base, MPI_Fint base_f) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return Status::Backend("MPI was already finalized; horovod_cpp cannot start");
  if (!initialized) {
    int provided = 0;
    HVD_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided));
    std::call_once(g_finalize_once, [] { std::atexit(finalize_at_exit); });
    if (provided < MPI_THREAD_MULTIPLE) {
      return Status::Backend(
          "this MPI library provides thread level " + std::to_string(provided) +
          " only; horovod_cpp needs MPI_THREAD_MULTIPLE (its background threads and the "
          "caller's thread, e.g. in add_process_set, call MPI concurrently)");
    }
  } else {
    // The program initialized MPI: anything below MPI_THREAD_MULTIPLE is unsafe, because
    // every process set's background thread calls MPI while user threads may too.
    int provided = 0;
    MPI_Query_thread(&provided);
    if (provided < MPI_THREAD_MULTIPLE) {
      return Status::Backend(
          "MPI was initialized with thread level " + std::to_string(provided) +
          " (below MPI_THREAD_MULTIPLE = " + std::to_string(MPI_THREAD_MULTIPLE) +
          "); horovod_cpp calls MPI from several threads at once: initialize MPI with "
          "MPI_Init_thread(..., MPI_THREAD_MULTIPLE, ...)");
    }
  }
  std::call_once(g_self_hook_once, set_finalize_hook);
  MPI_Comm base = use_base ? MPI_Comm_f2c(base_f) : MPI_COMM_WORLD;
  HVD_MPI_CHECK(MPI_Comm_dup(base, &base_comm_));
  MPI_Comm_set_errhandler(base_comm_, MPI_ERRORS_RETURN);
  HVD_MPI_CHECK(MPI_Comm_rank(base_comm_, &rank_));
  HVD_MPI_CHECK(MPI_Comm_size(base_comm_, &size_));

  MPI_Comm local = MPI_COMM_NULL, cross = MPI_COMM_NULL;
  HVD_MPI_CHECK(MPI_Comm_split_type(base_comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local));
  MPI_Comm_rank(local, &local_rank_);
  MPI_Comm_size(local, &local_size_);
  HVD_RETURN_IF_ERROR(find_cores_shared(local));
  HVD_MPI_CHECK(MPI_Comm_split(base_comm_, local_rank_, rank_, &cross));
  MPI_Comm_rank(cross, &cross_rank_);
  MPI_Comm_size(cross, &cross_size_);
  MPI_Comm_free(&local);
  MPI_Comm_free(&cross);

  create_half_ops<DataType::kFloat16>(half_ops_[0]);
  create_half_ops<DataType::kBFloat16>(half_ops_[1]);
  MPI_Op_create(&cpu_op<DataType::kInt8, ReduceOp::kSum>, 1, &wrap_sum_ops_[0]);
  MPI_Op_create(&cpu_op<DataType::kUInt8, ReduceOp::kSum>, 1, &wrap_sum_ops_[1]);
  MPI_Op_create(&cpu_op<DataType::kInt16, ReduceOp::kSum>, 1, &wrap_sum_ops_[2]);
  MPI_Op_create(&cpu_op<DataType::kUInt16, ReduceOp::kSum>, 1, &wrap_sum_ops_[3]);
  ops_created_ = true;
  return Status::OK();
}

Status MpiContext::find_cores_shared(MPI_Comm local) {
#ifdef __linux__
  // The cores this host's ranks may use: the union of their affinity masks (mpirun's binding,
  // a container's cpuset), not the machine's count.
  cpu_set_t mine;
  CPU_ZERO(&mine);
  if (sched_getaffinity(0, sizeof(mine), &mine) != 0) return Status::OK();  // keep: shared
  constexpr int kWords = static_cast<int>(sizeof(cpu_set_t) / sizeof(uint64_t));
  uint64_t words[kWords];
  std::memcpy(words, &mine, sizeof(words));
  HVD_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, words, kWords, MPI_UINT64_T, MPI_BOR, local));
  cpu_set_t all;
  std::memcpy(&all, words, sizeof(all));
  cores_shared_ = local_size_ > CPU_COUNT(&all);
#else
  (void)local;
#endif
  return Status::OK();
}

void MpiContext::release() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (base_comm_ != MPI_COMM_NULL) MPI_Comm_free(&base_comm_);
  if (ops_created_) {
    for (auto& row : half_ops_) {
      for (int i : {0, 2, 3, 4}) MPI_Op_free(&row[i]);
    }
    for (MPI_Op& op : wrap_sum_ops_) MPI_Op_free(&op);
    ops_created_ = false;
  }
}

Status MpiContext::make_comms(const std::vector<int>& ranks, MPI_Comm* data,
                              MPI_Comm* control) const {
  *data = *control = MPI_COMM_NULL;
  const bool member = std::binary_search(ranks.begin(), ranks.end(), rank_);
  MPI_Comm sub = MPI_COMM_NULL;
  HVD_MPI_CHECK(MPI_Comm_split(base_comm_, member ? 0 : MPI_UNDEFINED, rank_, &sub));
  if (!member) return Status::OK();
  HVD_MPI_CHECK(MPI_Comm_dup(sub, data));
  HVD_MPI_CHECK(MPI_Comm_dup(sub, control));
  MPI_Comm_free(&sub);
  MPI_Comm_set_errhandler(*data, MPI_ERRORS_RETURN);
  MPI_Comm_set_errhandler(*control, MPI_ERRORS_RETURN);
  return Status::OK();
}

MPI_Datatype MpiContext::datatype(DataType dtype) {
  switch (dtype) {
    case DataType::kUInt8: return MPI_UINT8_T;
    case DataType::kInt8: return MPI_INT8_T;
    case DataType::kInt16: return MPI_INT16_T;
    case DataType::kUInt16: return MPI_UINT16_T;
    case DataType::kInt32: return MPI_INT32_T;
    case DataType::kInt64: return MPI_INT64_T;
    case DataType::kFloat16:
    case DataType::kBFloat16: return MPI_UINT16_T;
    case DataType::kFloat32: return MPI_FLOAT;
    case DataType::kFloat64: return MPI_DOUBLE;
    case DataType::kBool: return MPI_C_BOOL;
  }
  return MPI_BYTE;
}

MPI_Op MpiContext::op(DataType dtype, ReduceOp op) const {
  if (op == ReduceOp::kAdasum) return MPI_SUM;  // gathered, never reduced by MPI (CpuTransport)
  if (dtype == DataType::kFloat16) return half_ops_[0][static_cast<int>(op)];
  if (dtype == DataType::kBFloat16) return half_ops_[1][static_cast<int>(op)];
  if (op == ReduceOp::kSum || op == ReduceOp::kAverage) {
    const int k = small_int_index(dtype);
    if (k >= 0) return wrap_sum_ops_[k];
  }
  if (dtype == DataType::kBool) {
    return (op == ReduceOp::kProduct || op == ReduceOp::kMin) ? MPI_LAND : MPI_LOR;
  }
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage: return MPI_SUM;
    case ReduceOp::kMin: return MPI_MIN;
    case ReduceOp::kMax: return MPI_MAX;
    case ReduceOp::kProduct: return MPI_PROD;
    case ReduceOp::kAdasum: break;  // gathered, never reduced by MPI (CpuTransport)
  }
  return MPI_SUM;
}

}  // namespace hvd
