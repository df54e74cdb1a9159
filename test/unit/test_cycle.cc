// Copyright horovod_cpp authors. One cycle (core/cycle.h) on its own: N ranks' tables and
// cycles over in-process planes, with no scheduler and no background thread. The test's own
// threads submit and run the cycles, so the negotiation and execution of a set are tested
// without the thread that usually runs them.
#include <catch2/catch.hpp>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/cycle.h"
#include "core/tensor_table.h"
#include "in_process_data_plane.h"

using namespace hvd;
using namespace hvd::testing;

namespace {

// One rank of a set whose cycles the caller runs: planes, table, cycle.
struct Member {
  Member(int r, const std::vector<int>& ranks, InProcessHub* control_hub, InProcessHub* data_hub,
         const Config& config)
      : table(r, r) {
    planes.control = std::make_unique<InProcessControlPlane>(control_hub, r);
    planes.transports = std::make_unique<TransportRegistry>();
    SetLayout layout{r, static_cast<int>(ranks.size()), ranks};
    planes.transports->add(
        std::make_unique<CpuTransport>(std::make_unique<InProcessDataPlane>(data_hub, r), layout));
    cycle = std::make_unique<Cycle>(0, ranks, r, &planes, &table, config, nullptr);
  }
  SetPlanes planes;
  TensorTable table;
  std::unique_ptr<Cycle> cycle;
};

Config cycle_config() {
  Config c;
  c.stall_check_seconds = 60;
  return c;
}

}  // namespace

TEST_CASE("cycle: run alone by the caller's threads, it negotiates and executes every tensor",
          "[cycle]") {
  const int n = GENERATE(2, 3);
  std::vector<int> ranks(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) ranks[static_cast<size_t>(r)] = r;
  InProcessHub control_hub(n), data_hub(n);
  std::vector<std::unique_ptr<Member>> members;
  for (int r = 0; r < n; ++r) {
    members.push_back(std::make_unique<Member>(r, ranks, &control_hub, &data_hub, cycle_config()));
  }
  constexpr int kTensors = 5, kLen = 7, kSteps = 3;
  const std::string err = on_ranks(n, [&](int rank) {
    Member& m = *members[static_cast<size_t>(rank)];
    std::vector<std::vector<float>> bufs(kTensors, std::vector<float>(kLen));
    for (int step = 0; step < kSteps; ++step) {
      // Tensors 0..2 one by one, 3 and 4 as a group, in a different order on every rank.
      std::vector<std::shared_ptr<detail::HandleState>> hs;
      std::vector<std::string> names(kTensors);
      std::vector<TensorView> views(kTensors);
      for (int t = 0; t < kTensors; ++t) {
        auto& b = bufs[static_cast<size_t>(t)];
        for (int i = 0; i < kLen; ++i)
          b[static_cast<size_t>(i)] = rank * 100.0f + t * 10 + i + step;
        names[static_cast<size_t>(t)] = "c." + std::to_string(t);
        views[static_cast<size_t>(t)] = TensorView(b.data(), DataType::kFloat32, {kLen});
      }
      for (int k = 0; k < 3; ++k) {
        const int t = (k + rank) % 3;
        TensorSubmit one(OpType::kAllreduce, &names[static_cast<size_t>(t)],
                         &views[static_cast<size_t>(t)], nullptr);
        SubmitCommon c;
        c.handle = std::make_shared<detail::HandleState>(names[static_cast<size_t>(t)], 1);
        hs.push_back(c.handle);
        throw_if_error(m.table.enqueue(&one, 1, c));
      }
      TensorSubmit group[2] = {TensorSubmit(OpType::kAllreduce, &names[3], &views[3], nullptr),
                               TensorSubmit(OpType::kAllreduce, &names[4], &views[4], nullptr)};
      const std::string key = "g34";
      SubmitCommon c;
      c.handle = std::make_shared<detail::HandleState>("group", 2);
      c.group = &key;
      hs.push_back(c.handle);
      throw_if_error(m.table.enqueue(group, 2, c));
      // Every rank runs cycles until its handles are done: the same cycles on every rank,
      // since every rank runs the same agreed responses in each.
      int cycles = 0;
      const auto all_done = [&] {
        for (auto& h : hs) {
          if (!h->done()) return false;
        }
        return true;
      };
      while (!all_done()) {
        if (++cycles > 1000) throw std::runtime_error("no completion after 1000 cycles");
        if (!m.cycle->run()) throw std::runtime_error("the set stopped: " + m.table.stop_reason());
      }
      for (auto& h : hs) throw_if_error(h->status());
      for (int t = 0; t < kTensors; ++t) {
        for (int i = 0; i < kLen; ++i) {
          float expect = 0;
          for (int r = 0; r < n; ++r) expect += r * 100.0f + t * 10 + i + step;
          const float got = bufs[static_cast<size_t>(t)][static_cast<size_t>(i)];
          if (got != expect) {
            throw std::runtime_error("step " + std::to_string(step) + " tensor " +
                                     std::to_string(t) + " element " + std::to_string(i) + ": " +
                                     std::to_string(got) + ", expected " + std::to_string(expect));
          }
        }
      }
    }
    // A shutdown asked on one rank is agreed in a cycle: every rank's cycle then says stop.
    if (rank == n - 1) m.table.request_shutdown();
    int cycles = 0;
    while (m.cycle->run()) {
      if (++cycles > 1000) throw std::runtime_error("no agreed shutdown after 1000 cycles");
    }
    if (!m.table.stopped()) throw std::runtime_error("the table did not stop");
  });
  INFO(err);
  CHECK(err.empty());
  // A stopped table refuses new work, taking nothing.
  std::vector<float> late(3, 1.0f);
  const std::string name = "late";
  TensorView v(late.data(), DataType::kFloat32, {3});
  TensorSubmit t(OpType::kAllreduce, &name, &v, nullptr);
  SubmitCommon c;
  c.handle = std::make_shared<detail::HandleState>(name, 1);
  CHECK(members[0]->table.enqueue(&t, 1, c).code() == ErrorCode::kShutdown);
  CHECK(v.shape == Shape{3});
  CHECK(c.handle != nullptr);
}
