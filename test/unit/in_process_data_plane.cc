// Copyright horovod_cpp authors.
#include "in_process_data_plane.h"

#include <cstring>
#include <exception>
#include <mutex>
#include <new>
#include <stdexcept>
#include <thread>

#include "kernels/host/cpu_ops.h"
#include "transport/shm/shm_control_plane.h"
#include "core/handle_state.h"

namespace hvd {
namespace testing {
namespace {

std::string bytes_of(const void* p, int64_t n) {
  return n > 0 ? std::string(static_cast<const char*>(p), static_cast<size_t>(n)) : std::string();
}

void copy_out(const std::string& s, void* out) {
  if (!s.empty()) std::memcpy(out, s.data(), s.size());
}

}  // namespace

Status InProcessDataPlane::allreduce(void* buf, int64_t count, DataType dtype, ReduceOp op) {
  ++calls_;
  last_thread_ = std::this_thread::get_id();
  if (++allreduces_ == fail_at_) return Status::Backend(fail_why_);
  if (allreduces_ == throw_at_) throw std::bad_alloc();
  const int64_t bytes = count * static_cast<int64_t>(dtype_size(dtype));
  std::string out;
  HVD_RETURN_IF_ERROR(hub_->exchange(
      rank_, "data allreduce " + std::to_string(bytes), bytes_of(buf, bytes),
      [&](std::vector<std::string>& in, std::vector<std::string>* outs) {
        std::string acc = in[0];
        for (size_t r = 1; r < in.size(); ++r) reduce_into(&acc[0], in[r].data(), count, dtype, op);
        for (auto& o : *outs) o = acc;
        return Status::OK();
      },
      &out));
  copy_out(out, buf);
  return Status::OK();
}

Status InProcessDataPlane::allgatherv(const void* in, void* out, const std::vector<int64_t>& bytes) {
  ++calls_;
  std::string result;
  HVD_RETURN_IF_ERROR(hub_->exchange(
      rank_, "data allgatherv", bytes_of(in, bytes[static_cast<size_t>(rank_)]),
      [&](std::vector<std::string>& ins, std::vector<std::string>* outs) {
        std::string all;
        for (const auto& s : ins) all += s;
        for (auto& o : *outs) o = all;
        return Status::OK();
      },
      &result));
  copy_out(result, out);
  return Status::OK();
}

Status InProcessDataPlane::alltoallv(const void* in, const std::vector<int64_t>& send_bytes,
                                     void* out, const std::vector<int64_t>& recv_bytes) {
  ++calls_;
  // Payload: every destination's block size, then the blocks.
  const size_t n = send_bytes.size();
  int64_t total = 0;
  for (int64_t b : send_bytes) total += b;
  std::string payload(reinterpret_cast<const char*>(send_bytes.data()), n * sizeof(int64_t));
  payload += bytes_of(in, total);
  std::string result;
  HVD_RETURN_IF_ERROR(hub_->exchange(
      rank_, "data alltoallv", std::move(payload),
      [n](std::vector<std::string>& ins, std::vector<std::string>* outs) {
        for (size_t src = 0; src < n; ++src) {
          const int64_t* sizes = reinterpret_cast<const int64_t*>(ins[src].data());
          size_t off = n * sizeof(int64_t);
          for (size_t dst = 0; dst < n; ++dst) {
            (*outs)[dst] += ins[src].substr(off, static_cast<size_t>(sizes[dst]));
            off += static_cast<size_t>(sizes[dst]);
          }
        }
        return Status::OK();
      },
      &result));
  int64_t expect = 0;
  for (int64_t b : recv_bytes) expect += b;
  if (static_cast<int64_t>(result.size()) != expect) {
    return Status::Backend("in-process alltoallv: received " + std::to_string(result.size()) +
                           " bytes, expected " + std::to_string(expect));
  }
  copy_out(result, out);
  return Status::OK();
}

Status InProcessDataPlane::reducescatter(const void* in, void* out,
                                         const std::vector<int64_t>& counts, DataType dtype,
                                         ReduceOp op) {
  ++calls_;
  const int64_t esize = static_cast<int64_t>(dtype_size(dtype));
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  std::string result;
  HVD_RETURN_IF_ERROR(hub_->exchange(
      rank_, "data reducescatter", bytes_of(in, total * esize),
      [&](std::vector<std::string>& ins, std::vector<std::string>* outs) {
        std::string acc = ins[0];
        for (size_t r = 1; r < ins.size(); ++r) reduce_into(&acc[0], ins[r].data(), total, dtype, op);
        int64_t off = 0;
        for (size_t r = 0; r < outs->size(); ++r) {
          (*outs)[r] = acc.substr(static_cast<size_t>(off * esize), static_cast<size_t>(counts[r] * esize));
          off += counts[r];
        }
        return Status::OK();
      },
      &result));
  copy_out(result, out);
  return Status::OK();
}

Status InProcessDataPlane::broadcast(void* buf, int64_t bytes, int root) {
  ++calls_;
  std::string result;
  HVD_RETURN_IF_ERROR(hub_->exchange(
      rank_, "data broadcast from " + std::to_string(root), bytes_of(buf, bytes),
      [root](std::vector<std::string>& ins, std::vector<std::string>* outs) {
        for (auto& o : *outs) o = ins[static_cast<size_t>(root)];
        return Status::OK();
      },
      &result));
  copy_out(result, buf);
  return Status::OK();
}

Status InProcessDataPlane::barrier() {
  ++calls_;
  std::string result;
  return hub_->exchange(
      rank_, "data barrier", "", [](std::vector<std::string>&, std::vector<std::string>*) {
        return Status::OK();
      },
      &result);
}

namespace {

std::vector<int> first_ranks(int n) {
  std::vector<int> ranks(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) ranks[static_cast<size_t>(r)] = r;
  return ranks;
}

}  // namespace

std::unique_ptr<ControlPlane> InProcessSets::new_control(int r) {
  auto control = std::make_unique<InProcessControlPlane>(&control_hub_, r);
  control_.push_back(control.get());
  return control;
}

void InProcessSets::add_inproc(int r, TransportRegistry* registry) {
  auto data = std::make_unique<InProcessDataPlane>(&data_hub_, r);
  data_.push_back(data.get());
  registry->add(std::make_unique<CpuTransport>(std::move(data), SetLayout{r, n_, first_ranks(n_)}));
}

InProcessSets::InProcessSets(int n, const Config& config, bool small_first, int64_t small_bytes)
    : n_(n), control_hub_(n), data_hub_(n), small_hub_(n) {
  const std::vector<int> ranks = first_ranks(n);
  for (int r = 0; r < n; ++r) {
    SetLayout layout{r, n, ranks};
    auto planes = std::make_unique<SetPlanes>();
    planes->control = new_control(r);
    planes->transports = std::make_unique<TransportRegistry>();
    if (small_first) {
      auto small = std::make_unique<InProcessDataPlane>(&small_hub_, r);
      small_.push_back(small.get());
      planes->transports->add(std::make_unique<FilteredTransport>(
          std::make_unique<CpuTransport>(std::move(small), layout), "small",
          [small_bytes](const Batch& b) {
            return b.op == OpType::kAllreduce && b.device.is_cpu() && b.bytes < small_bytes;
          }));
    }
    add_inproc(r, planes->transports.get());
    sets_.push_back(ProcessSetState::create(0, ranks, r, std::move(planes), config, nullptr));
  }
}

InProcessSets::InProcessSets(int n, const Config& config, const TransportMaker& maker)
    : n_(n), control_hub_(n), data_hub_(n), small_hub_(n) {
  bootstraps_ = InProcessBootstrap::group_of(n, "process set 0");
  const std::vector<int> ranks = first_ranks(n);
  std::vector<std::unique_ptr<SetPlanes>> planes(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    planes[static_cast<size_t>(r)] = std::make_unique<SetPlanes>();
    planes[static_cast<size_t>(r)]->control = new_control(r);
    planes[static_cast<size_t>(r)]->transports = std::make_unique<TransportRegistry>();
  }
  // Collective over the ranks, like MpiWorld::make_set(): every rank on its own thread.
  const std::string err = on_ranks(n, [&](int r) {
    TransportContext ctx;
    ctx.layout = SetLayout{r, n, ranks};
    ctx.bootstrap = bootstraps_[static_cast<size_t>(r)].get();
    ctx.config = &config;
    ctx.world_size = n;
    ctx.local_rank = r;
    ctx.local_size = n;
    ctx.cores_shared = true;  // the ranks' threads outnumber a test machine's cores
    SetPlanes& p = *planes[static_cast<size_t>(r)];
    if (config.shm_enabled && config.shm_control) {
      p.control = make_shm_control_plane(*ctx.bootstrap, 0, test_host(ctx),
                                         max_and_words(config.cache_capacity),
                                         ctx.cores_shared, std::move(p.control));
    }
    maker(ctx, p.transports.get());
  });
  if (!err.empty()) throw std::runtime_error("building the in-process sets: " + err);
  for (int r = 0; r < n; ++r) {
    add_inproc(r, planes[static_cast<size_t>(r)]->transports.get());
    sets_.push_back(ProcessSetState::create(0, ranks, r, std::move(planes[static_cast<size_t>(r)]),
                                            config, nullptr));
  }
}

void InProcessSets::shutdown() {
  for (auto& s : sets_) s->request_shutdown();
  for (auto& s : sets_) s->shutdown();
}

InProcessSets::~InProcessSets() {
  shutdown();
  sets_.clear();
}

std::string on_ranks(int n, const std::function<void(int rank)>& body) {
  std::mutex mu;
  std::string first;
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      std::string err;
      try {
        body(r);
      } catch (const std::exception& e) {
        err = "rank " + std::to_string(r) + ": " + e.what();
      } catch (...) {
        err = "rank " + std::to_string(r) + ": unknown exception";
      }
      if (!err.empty()) {
        std::lock_guard<std::mutex> lk(mu);
        if (first.empty()) first = err;
      }
    });
  }
  for (auto& t : threads) t.join();
  return first;
}

}  // namespace testing
}  // namespace hvd
