// Copyright horovod_cpp authors. Multi-rank tests of semi-synchronous training (bounded
// staleness, local SGD, StepGuard). Every expected value is computed on each rank by a
// single-process reference that simulates all ranks; the step bound is checked on every step
// from step counters the ranks publish in a shared file.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <deque>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "horovod_cpp/horovod_cpp.h"
#include "horovod_cpp/training.h"

namespace {

constexpr std::chrono::milliseconds kTimeout(60000);
constexpr int kN = 7;  // parameter size

struct Session {
  Session() { hvd::init(); }
  ~Session() { hvd::shutdown(); }
};

// Target of rank r at step t: the loss 0.5 |w - target|^2 has the gradient w - target.
std::vector<float> target(int r, int64_t t) {
  std::mt19937 gen(static_cast<uint32_t>(1000 * r + t + 17));
  std::normal_distribution<float> d(1.0f + static_cast<float>(r), 0.5f);
  std::vector<float> v(kN);
  for (auto& x : v) x = d(gen);
  return v;
}

std::vector<float> initial() {
  std::vector<float> v(kN);
  for (int i = 0; i < kN; ++i) v[static_cast<size_t>(i)] = 0.1f * static_cast<float>(i);
  return v;
}

void set_grad(hvd::Parameter& p, const std::vector<float>& tgt) {
  auto& g = p.dense_grad();
  for (size_t i = 0; i < g.size(); ++i) g[i] = p.value()[i] - tgt[i];
}

// True on every rank iff `v` is bit-identical on every rank.
bool identical_everywhere(std::vector<float> v) {
  std::vector<float> root = v;
  hvd::broadcast("semisync.test.identical", hvd::TensorView(root.data(), hvd::DataType::kFloat32,
                                                             {static_cast<int64_t>(root.size())}), 0);
  std::vector<int32_t> differ{root == v ? 0 : 1};
  hvd::AllreduceOptions o;
  o.op = hvd::ReduceOp::kSum;
  hvd::allreduce("semisync.test.differ", hvd::TensorView(differ.data(), hvd::DataType::kInt32, {1}), o);
  return differ[0] == 0;
}

void check_close(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO(what << " element " << i << " rank " << hvd::rank());
    CHECK(got[i] == Approx(want[i]).epsilon(1e-4).margin(1e-5));
  }
}

// Trains `steps` steps with the given options (and a flush after `flush_at` steps if >= 0).
std::vector<float> train(hvd::DistributedOptions o, int steps, int flush_at = -1, hvd::SGDOptions so = {0.1, 0.9}) {
  auto p = hvd::make_parameter("w", {kN}, initial());
  auto sgd = std::make_shared<hvd::SGD>(hvd::ParameterList{p}, so);
  hvd::DistributedOptimizer opt(sgd, o);
  for (int t = 0; t < steps; ++t) {
    opt.zero_grad();
    set_grad(*p, target(hvd::rank(), t));
    opt.mark_ready(*p);
    opt.step();
    if (t + 1 == flush_at) opt.flush();
  }
  return p->value();
}

// Reference for staleness s: every rank's gradient at step t is taken at the same parameters;
// the average of step t - s is applied at step t.
// With `flush`, the pending updates are applied at the end, oldest first.
std::vector<float> reference_stale(int s, int steps, int n, bool flush = false, hvd::SGDOptions so = {0.1, 0.9}) {
  auto p = hvd::make_parameter("w", {kN}, initial());
  hvd::SGD sgd({p}, so);
  std::deque<std::vector<float>> queue;
  for (int t = 0; t < steps; ++t) {
    std::vector<float> mean(kN, 0.0f);
    for (int r = 0; r < n; ++r) {
      auto tg = target(r, t);
      for (int i = 0; i < kN; ++i) mean[i] += (p->value()[i] - tg[i]) / static_cast<float>(n);
    }
    queue.push_back(mean);
    if (static_cast<int>(queue.size()) > s) {
      p->zero_grad();
      p->dense_grad() = queue.front();
      queue.pop_front();
      sgd.step();
    }
  }
  while (flush && !queue.empty()) {
    p->zero_grad();
    p->dense_grad() = queue.front();
    queue.pop_front();
    sgd.step();
  }
  return p->value();
}

// Reference for local SGD with period k and warmup w (no overlap), momentum state local.
std::vector<float> reference_local(int k, int w, int steps, int n, bool avg_state, bool overlap) {
  std::vector<hvd::ParameterPtr> ps;
  std::vector<std::unique_ptr<hvd::SGD>> opts;
  for (int r = 0; r < n; ++r) {
    ps.push_back(hvd::make_parameter("w", {kN}, initial()));
    opts.push_back(std::make_unique<hvd::SGD>(hvd::ParameterList{ps.back()}, hvd::SGDOptions{0.1, 0.9}));
  }
  auto average = [&](std::vector<std::vector<float>*> vs) {
    std::vector<float> m(kN, 0.0f);
    for (auto* v : vs)
      for (int i = 0; i < kN; ++i) m[i] += (*v)[i];
    for (auto& x : m) x /= static_cast<float>(n);
    return m;
  };
  std::vector<float> snap_mean;
  std::vector<std::vector<float>> snaps;
  bool pending = false;
  for (int t = 0; t < steps; ++t) {
    if (t < w) {
      std::vector<float> mean(kN, 0.0f);
      for (int r = 0; r < n; ++r) {
        auto tg = target(r, t);
        for (int i = 0; i < kN; ++i) mean[i] += (ps[r]->value()[i] - tg[i]) / static_cast<float>(n);
      }
      for (int r = 0; r < n; ++r) {
        ps[r]->zero_grad();
        ps[r]->dense_grad() = mean;
        opts[r]->step();
      }
      continue;
    }
    for (int r = 0; r < n; ++r) {  // gradients at the parameters before the fold-in
      ps[r]->zero_grad();
      set_grad(*ps[r], target(r, t));
    }
    if (pending) {
      for (int r = 0; r < n; ++r)
        for (int i = 0; i < kN; ++i) ps[r]->value()[i] = snap_mean[i] + (ps[r]->value()[i] - snaps[r][i]);
      pending = false;
    }
    for (int r = 0; r < n; ++r) opts[r]->step();
    if ((t + 1 - w) % k == 0) {
      std::vector<std::vector<float>*> vs;
      for (auto& p : ps) vs.push_back(&p->value());
      auto m = average(vs);
      if (overlap) {
        snaps.clear();
        for (auto& p : ps) snaps.push_back(p->value());
        snap_mean = m;
        pending = true;
      } else {
        for (auto& p : ps) p->value() = m;
      }
      if (avg_state) {
        // The momentum buffers: state() entry 0 of each optimizer.
        std::vector<std::vector<float>> bufs;
        for (auto& o : opts) {
          auto e = o->state()[0];
          const float* d = static_cast<const float*>(e.view.data);
          bufs.emplace_back(d, d + kN);
        }
        std::vector<std::vector<float>*> bp;
        for (auto& b : bufs) bp.push_back(&b);
        auto bm = average(bp);
        for (auto& o : opts) {
          float* d = static_cast<float*>(o->state()[0].view.data);
          std::copy(bm.begin(), bm.end(), d);
        }
      }
    }
  }
  return ps[static_cast<size_t>(hvd::rank())]->value();
}

// Step counters of every rank, in a file mapped by all of them (same host under mpirun).
class SharedCounters {
 public:
  SharedCounters() {
    std::vector<int64_t> id{static_cast<int64_t>(getpid())};
    hvd::broadcast("semisync.test.pid", hvd::TensorView(id.data(), hvd::DataType::kInt64, {1}), 0);
    path_ = "/tmp/hvd_semisync_counters_" + std::to_string(id[0]);
    const size_t bytes = sizeof(std::atomic<int64_t>) * static_cast<size_t>(hvd::size());
    if (hvd::rank() == 0) {
      int fd = open(path_.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
      REQUIRE(fd >= 0);
      REQUIRE(ftruncate(fd, static_cast<off_t>(bytes)) == 0);
      close(fd);
    }
    hvd::barrier();
    int fd = open(path_.c_str(), O_RDWR);
    REQUIRE(fd >= 0);
    void* m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    REQUIRE(m != MAP_FAILED);
    c_ = static_cast<std::atomic<int64_t>*>(m);
    bytes_ = bytes;
  }
  ~SharedCounters() {
    munmap(c_, bytes_);
    if (hvd::rank() == 0) unlink(path_.c_str());
  }
  void publish(int64_t started) { c_[hvd::rank()].store(started); }
  int64_t slowest() const {
    int64_t m = INT64_MAX;
    for (int r = 0; r < hvd::size(); ++r) m = std::min(m, c_[r].load());
    return m;
  }

 private:
  std::string path_;
  std::atomic<int64_t>* c_ = nullptr;
  size_t bytes_ = 0;
};

// The last rank straggles: a pause on some of its steps.
void maybe_pause(int64_t t) {
  if (hvd::rank() == hvd::size() - 1 && t % 4 == 1) std::this_thread::sleep_for(std::chrono::milliseconds(15));
}

}  // namespace

TEST_CASE("staleness 0 is the synchronous optimizer, bit for bit", "[semisync]") {
  Session s;
  hvd::DistributedOptions sync;
  hvd::DistributedOptions zero;
  zero.staleness = 0;
  zero.name_prefix = "zero";
  auto a = train(sync, 9);
  auto b = train(zero, 9);
  CHECK(a == b);
  check_close(a, reference_stale(0, 9, hvd::size()), "sync");
}

TEST_CASE("staleness s applies the average of step t - s; parameters identical on every rank", "[semisync]") {
  Session s;
  for (int st : {1, 2, 4}) {
    for (bool fp16 : {false, true}) {
      hvd::DistributedOptions o;
      o.staleness = st;
      o.timeout = kTimeout;
      o.compression = fp16 ? hvd::Compression::kFP16 : hvd::Compression::kNone;
      auto got = train(o, 15);
      INFO("staleness " << st << (fp16 ? " fp16" : ""));
      CHECK(identical_everywhere(got));
      if (!fp16) check_close(got, reference_stale(st, 15, hvd::size()), "staleness");
    }
  }
}

TEST_CASE("staleness: flush applies the pending updates; checkpoint and broadcast resume exactly", "[semisync]") {
  Session s;
  hvd::DistributedOptions o;
  o.staleness = 2;
  o.timeout = kTimeout;
  // Uninterrupted: 12 steps with a flush after step 6.
  auto whole = train(o, 12, 6);
  // Interrupted: 6 steps, flush, checkpoint on rank 0, fresh model loaded on rank 0 and
  // broadcast, 6 more steps.
  const std::string path = "/tmp/hvd_semisync_ckpt_" + std::to_string(getpid());
  {
    auto p = hvd::make_parameter("w", {kN}, initial());
    auto sgd = std::make_shared<hvd::SGD>(hvd::ParameterList{p}, hvd::SGDOptions{0.1, 0.9});
    hvd::DistributedOptimizer opt(sgd, o);
    for (int t = 0; t < 6; ++t) {
      opt.zero_grad();
      set_grad(*p, target(hvd::rank(), t));
      opt.step();
    }
    opt.flush();
    CHECK(identical_everywhere(p->value()));
    if (hvd::rank() == 0) hvd::save_checkpoint(path, {p}, sgd.get());
  }
  auto p = hvd::make_parameter("w", {kN}, std::vector<float>(kN, 42.0f + static_cast<float>(hvd::rank())));
  auto sgd = std::make_shared<hvd::SGD>(hvd::ParameterList{p}, hvd::SGDOptions{0.1, 0.9});
  if (hvd::rank() == 0) {
    hvd::load_checkpoint(path, {p}, sgd.get());
    std::remove(path.c_str());
  }
  hvd::broadcast_parameters({p}, 0, kTimeout);
  hvd::broadcast_optimizer_state(*sgd, 0, kTimeout);
  hvd::DistributedOptimizer opt(sgd, o);
  for (int t = 6; t < 12; ++t) {
    opt.zero_grad();
    set_grad(*p, target(hvd::rank(), t));
    opt.step();
  }
  CHECK(p->value() == whole);
}

TEST_CASE("staleness with a straggler: no rank ever more than s steps ahead", "[semisync][straggler]") {
  Session s;
  for (int st : {1, 2}) {
    SharedCounters counters;
    auto p = hvd::make_parameter("w", {kN}, initial());
    auto sgd = std::make_shared<hvd::SGD>(hvd::ParameterList{p}, hvd::SGDOptions{0.1, 0.9});
    hvd::DistributedOptions o;
    o.staleness = st;
    o.timeout = kTimeout;
    hvd::DistributedOptimizer opt(sgd, o);
    const int steps = 24;
    int64_t worst = 0;
    for (int t = 0; t < steps; ++t) {
      maybe_pause(t);
      opt.zero_grad();
      set_grad(*p, target(hvd::rank(), t));
      counters.publish(t + 1);  // t + 1 steps submitted (published before submitting)
      opt.step();
      // step() t returned: every rank has submitted step t - s.
      const int64_t lead = static_cast<int64_t>(t + 1) - counters.slowest();
      worst = std::max(worst, lead);
      CHECK(lead <= st);
    }
    opt.flush();
    INFO("staleness " << st << ": largest lead seen by rank " << hvd::rank() << " = " << worst);
    CHECK(worst <= st);
    CHECK(identical_everywhere(p->value()));
    check_close(p->value(), reference_stale(st, steps, hvd::size(), true), "straggler");
    hvd::barrier();
  }
}

TEST_CASE("StepGuard with a straggler: bound checked on every step, leads exchanged", "[semisync][straggler]") {
  Session s;
  for (int st : {0, 1, 3}) {
    SharedCounters counters;
    hvd::StepGuard guard(st, "guard" + std::to_string(st), kTimeout);
    const int steps = 30;
    int64_t worst = 0;
    for (int t = 0; t < steps; ++t) {
      counters.publish(t + 1);  // before announcing it
      CHECK(guard.step() == t);
      // Every rank has started step t - s, i.e. t - s + 1 steps.
      const int64_t lead = static_cast<int64_t>(t + 1) - counters.slowest();
      worst = std::max(worst, lead);
      CHECK(lead <= st);
      CHECK(guard.slowest_started() >= t + 1 - st);
      maybe_pause(t);
    }
    // Exchange each rank's largest lead: all within the bound, and a fast rank did run ahead
    // (the guard does not over-block) when s > 0.
    std::vector<int64_t> mine{worst};
    hvd::Tensor all = hvd::allgather("guard.leads." + std::to_string(st),
                                     hvd::TensorView(mine.data(), hvd::DataType::kInt64, {1}));
    int64_t max_lead = 0;
    for (int r = 0; r < hvd::size(); ++r) {
      INFO("staleness " << st << ", rank " << r << " lead " << all.data_as<int64_t>()[r]);
      CHECK(all.data_as<int64_t>()[r] <= st);
      max_lead = std::max(max_lead, all.data_as<int64_t>()[r]);
    }
    if (st > 0) CHECK(max_lead >= 1);
    CHECK(guard.finish() >= 0);
  }
}

TEST_CASE("StepGuard: ranks with fewer steps finish without blocking the others", "[semisync][join]") {
  Session s;
  hvd::StepGuard guard(1, "uneven", kTimeout);
  const int steps = 5 + 4 * hvd::rank();
  for (int t = 0; t < steps; ++t) guard.step();
  const int last = guard.finish();
  CHECK(last == hvd::size() - 1);  // the rank with the most steps joins last
  CHECK(guard.steps() == steps);
}

TEST_CASE("staleness: uneven step counts end with flush() and join()", "[semisync][join]") {
  Session s;
  auto p = hvd::make_parameter("w", {kN}, initial());
  auto sgd = std::make_shared<hvd::SGD>(hvd::ParameterList{p}, hvd::SGDOptions{0.1, 0.0});
  hvd::DistributedOptions o;
  o.staleness = 2;
  o.timeout = kTimeout;
  hvd::DistributedOptimizer opt(sgd, o);
  const int steps = 6 + 3 * hvd::rank();
  for (int t = 0; t < steps; ++t) {
    opt.zero_grad();
    set_grad(*p, target(hvd::rank(), t));
    opt.step();
  }
  opt.flush();
  CHECK(hvd::join() == hvd::size() - 1);
  CHECK(opt.steps_taken() == steps);
}

TEST_CASE("local SGD: periodic averaging, warmup, state averaging, overlap == reference", "[semisync][local_sgd]") {
  Session s;
  struct Case {
    int k, warmup;
    bool state, overlap;
  };
  for (Case c : {Case{3, 0, false, false}, Case{4, 2, false, false}, Case{3, 2, true, false}, Case{2, 1, false, true},
                 Case{4, 3, true, true}}) {
    INFO("k " << c.k << " warmup " << c.warmup << " state " << c.state << " overlap " << c.overlap);
    hvd::DistributedOptions o;
    o.local_sgd_period = c.k;
    o.local_sgd_warmup_steps = c.warmup;
    o.local_sgd_average_state = c.state;
    o.local_sgd_overlap = c.overlap;
    o.timeout = kTimeout;
    const int steps = c.warmup + 3 * c.k;  // ends on an averaging step
    auto got = train(o, steps);
    check_close(got, reference_local(c.k, c.warmup, steps, hvd::size(), c.state, c.overlap), "local SGD");
    if (!c.overlap) CHECK(identical_everywhere(got));
    // flush() makes them identical whatever the mode.
    auto flushed = train(o, steps + 1, steps + 1);
    CHECK(identical_everywhere(flushed));
  }
}

TEST_CASE("semi-synchronous options are validated", "[semisync]") {
  Session s;
  auto p = hvd::make_parameter("w", {kN}, initial());
  auto sgd = std::make_shared<hvd::SGD>(hvd::ParameterList{p});
  hvd::DistributedOptions both;
  both.staleness = 1;
  both.local_sgd_period = 2;
  CHECK_THROWS_AS(hvd::DistributedOptimizer(sgd, both), hvd::InvalidArgumentError);
  hvd::DistributedOptions neg;
  neg.staleness = -1;
  CHECK_THROWS_AS(hvd::DistributedOptimizer(sgd, neg), hvd::InvalidArgumentError);
  CHECK_THROWS_AS(hvd::StepGuard(-2), hvd::InvalidArgumentError);
  hvd::DistributedOptions st;
  st.staleness = 1;
  hvd::DistributedOptimizer opt(sgd, st);
  CHECK_THROWS_AS(opt.synchronize(), hvd::InvalidArgumentError);
  // The next collective works.
  std::vector<float> v{1.0f};
  hvd::allreduce("semisync.after_errors", hvd::TensorView(v.data(), hvd::DataType::kFloat32, {1}));
  CHECK(v[0] == 1.0f);
}
