// Copyright horovod_cpp authors. The whole background loop in one process: N ranks are N
// process sets on in-process control and data planes (in_process_data_plane.h), each with its
// own background thread, fed by the test's threads as users' threads would. Negotiation,
// ordering, the response cache, fusion, the executor, the transport registry, join, stalls,
// shutdown and error paths run exactly as under mpirun, without MPI (and under TSan).
#include <algorithm>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "common/fatal.h"
#include "core/handle_state.h"
#include "in_process_data_plane.h"
#include "loop_support.h"

using namespace hvd;
using namespace hvd::testing;


TEST_CASE("loop: allreduces submitted in different orders complete with the right sums", "[loop]") {
  const int n = GENERATE(1, 2, 3, 4);
  InProcessSets sets(n, test_config());
  const int kTensors = 12, kLen = 37;
  const std::string err = on_ranks(n, [&](int rank) {
    std::vector<std::vector<float>> bufs(kTensors);
    std::vector<std::shared_ptr<detail::HandleState>> hs(kTensors);
    std::vector<int> order(kTensors);
    for (int t = 0; t < kTensors; ++t) order[static_cast<size_t>(t)] = t;
    if (rank % 2) std::reverse(order.begin(), order.end());  // every rank its own order
    for (int t : order) {
      auto& b = bufs[static_cast<size_t>(t)];
      b.resize(kLen);
      for (int i = 0; i < kLen; ++i) b[static_cast<size_t>(i)] = value(rank, t, i);
      Entry e = entry(rank, OpType::kAllreduce, "grad." + std::to_string(t), b.data(),
                            DataType::kFloat32, {kLen}, nullptr);
      e.request.reduce_op = t % 3 == 0 ? ReduceOp::kAverage : ReduceOp::kSum;
      hs[static_cast<size_t>(t)] = submit(sets.set(rank), std::move(e));
    }
    for (int t = 0; t < kTensors; ++t) {
      require_ok(hs[static_cast<size_t>(t)]);
      check_all("grad." + std::to_string(t), bufs[static_cast<size_t>(t)].data(), kLen, [&](int64_t i) {
        float s = 0;
        for (int r = 0; r < n; ++r) s += value(r, t, static_cast<int>(i));
        return t % 3 == 0 ? s / static_cast<float>(n) : s;
      });
    }
  });
  INFO(err);
  CHECK(err.empty());
}

TEST_CASE("loop: a caller waiting without a deadline runs the cycles itself", "[loop]") {
  const int n = GENERATE(2, 3);
  InProcessSets sets(n, test_config());
  const int kRounds = 40, kLen = 9;
  const std::string err = on_ranks(n, [&](int rank) {
    int on_caller = 0;
    for (int round = 0; round < kRounds; ++round) {
      std::vector<float> b(kLen);
      for (int i = 0; i < kLen; ++i) b[static_cast<size_t>(i)] = value(rank, round, i);
      auto h = std::make_shared<detail::HandleState>("step", 1);
      h->set_driver(sets.shared(rank));
      // Ranks submit out of step, so some cycles find the tensor ready on this rank only and
      // the caller must run more than one.
      if ((round + rank) % 4 == 0) std::this_thread::sleep_for(std::chrono::microseconds(300));
      submit(sets.set(rank), entry(rank, OpType::kAllreduce, "step", b.data(),
                                   DataType::kFloat32, {kLen}, h));
      h->wait();  // untimed: may drive
      throw_if_error(h->status());
      if (sets.data(rank).last_allreduce_thread() == std::this_thread::get_id()) ++on_caller;
      check_all("step " + std::to_string(round), b.data(), kLen, [&](int64_t i) {
        float s = 0;
        for (int r = 0; r < n; ++r) s += value(r, round, static_cast<int>(i));
        return s;
      });
    }
    // The point of driving: the collective ran on the waiting thread, not the set's thread
    // (which may still win the race now and then).
    if (on_caller == 0) {
      throw std::runtime_error("rank " + std::to_string(rank) +
                               ": no allreduce ran on the waiting thread");
    }
  });
  INFO(err);
  CHECK(err.empty());
}

TEST_CASE("loop: a driving caller and a shutdown from another rank: the handle fails, nobody hangs", "[loop]") {
  const int n = 2;
  InProcessSets sets(n, test_config());
  std::vector<float> b(4, 1.0f);
  auto h = std::make_shared<detail::HandleState>("never", 1);
  h->set_driver(sets.shared(0));
  submit(sets.set(0), entry(0, OpType::kAllreduce, "never", b.data(), DataType::kFloat32, {4}, h));
  std::thread other([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    sets.set(1).request_shutdown();
  });
  h->wait();  // runs rank 0's cycles until the shutdown arrives
  other.join();
  CHECK(h->status().code() == ErrorCode::kShutdown);
  INFO(h->status().message());
  CHECK(h->status().message().find("'never'") != std::string::npos);
  sets.shutdown();
  CHECK_FALSE(sets.set(0).running());
}

TEST_CASE("loop: allgather, broadcast, alltoall, reducescatter, barrier through the registry", "[loop]") {
  const int n = GENERATE(2, 3);
  InProcessSets sets(n, test_config());
  const std::string err = on_ranks(n, [&](int rank) {
    ProcessSetState& set = sets.set(rank);
    // allgather: rank r contributes r+1 rows of 3 int32s.
    std::vector<int32_t> mine(static_cast<size_t>((rank + 1) * 3));
    for (size_t i = 0; i < mine.size(); ++i) mine[i] = rank * 100 + static_cast<int32_t>(i);
    auto hg = submit(set, entry(rank, OpType::kAllgather, "ag", mine.data(), DataType::kInt32,
                                {rank + 1, 3}, nullptr));
    // broadcast from the last rank.
    std::vector<double> bc(5, rank);
    Entry eb = entry(rank, OpType::kBroadcast, "bc", bc.data(), DataType::kFloat64, {5}, nullptr);
    eb.request.root = n - 1;
    auto hb = submit(set, std::move(eb));
    // alltoall: one row of 2 floats to each rank.
    std::vector<float> a2a(static_cast<size_t>(n * 2));
    for (size_t i = 0; i < a2a.size(); ++i) a2a[i] = static_cast<float>(rank * 10 + static_cast<int>(i));
    Entry ea = entry(rank, OpType::kAlltoall, "a2a", a2a.data(), DataType::kFloat32, {n, 2}, nullptr);
    ea.request.splits.assign(static_cast<size_t>(n), 1);
    auto ha = submit(set, std::move(ea));
    // reducescatter (sum) of 2n rows of 1.
    std::vector<float> rs(static_cast<size_t>(2 * n));
    for (size_t i = 0; i < rs.size(); ++i) rs[i] = static_cast<float>(rank + static_cast<int>(i));
    auto hr = submit(set, entry(rank, OpType::kReducescatter, "rs", rs.data(), DataType::kFloat32,
                                {2 * n, 1}, nullptr));
    auto hbar = submit(set, entry(rank, OpType::kBarrier, "bar", nullptr, DataType::kUInt8, {0}, nullptr));
    for (auto* h : {&hg, &hb, &ha, &hr, &hbar}) require_ok(*h);

    const Tensor& g = hg->results().at(0);
    int64_t row = 0;
    for (int r = 0; r < n; ++r) {
      check_all("allgather block of rank " + std::to_string(r), g.data_as<int32_t>() + row * 3,
                (r + 1) * 3, [&](int64_t i) { return static_cast<int32_t>(r * 100 + i); });
      row += r + 1;
    }
    check_all("broadcast", bc.data(), 5, [&](int64_t) { return static_cast<double>(n - 1); });
    const Tensor& a = ha->results().at(0);
    for (int r = 0; r < n; ++r) {  // row r came from rank r: its elements 2*rank, 2*rank+1
      check_all("alltoall row from rank " + std::to_string(r), a.data_as<float>() + 2 * r, 2,
                [&](int64_t i) { return static_cast<float>(r * 10 + 2 * rank + static_cast<int>(i)); });
    }
    // (No Catch macro here: this runs on a rank's thread, and Catch is not thread-safe.)
    if (ha->splits().at(0).size() != static_cast<size_t>(n)) {
      throw std::runtime_error("alltoall: " + std::to_string(ha->splits().at(0).size()) +
                               " received splits, want " + std::to_string(n));
    }
    const Tensor& s = hr->results().at(0);
    check_all("reducescatter", s.data_as<float>(), 2, [&](int64_t i) {
      float sum = 0;
      for (int r = 0; r < n; ++r) sum += static_cast<float>(r + 2 * rank + static_cast<int>(i));
      return sum;
    });
  });
  INFO(err);
  CHECK(err.empty());
}

TEST_CASE("loop: a group is fused into one reduction; threshold 0 runs one per tensor", "[loop]") {
  const int n = GENERATE(2, 3);
  const bool fuse = GENERATE(true, false);
  Config cfg = test_config();
  if (!fuse) cfg.fusion_threshold_bytes = 0;
  const int kTensors = 20;
  InProcessSets sets(n, cfg);
  const std::string err = on_ranks(n, [&](int rank) {
    std::vector<std::vector<float>> bufs(kTensors);
    auto h = std::make_shared<detail::HandleState>("group", kTensors);
    std::vector<Entry> es;
    for (int t = 0; t < kTensors; ++t) {
      auto& b = bufs[static_cast<size_t>(t)];
      b.resize(static_cast<size_t>(t + 1));
      for (int i = 0; i <= t; ++i) b[static_cast<size_t>(i)] = value(rank, t, i);
      Entry e = entry(rank, OpType::kAllreduce, "f." + std::to_string(t), b.data(),
                      DataType::kFloat32, {t + 1}, h);
      e.request.group = "g";
      e.request.group_size = kTensors;
      es.push_back(std::move(e));
    }
    throw_if_error(enqueue(sets.set(rank), es));
    require_ok(h);
    for (int t = 0; t < kTensors; ++t) {
      check_all("f." + std::to_string(t), bufs[static_cast<size_t>(t)].data(), t + 1, [&](int64_t i) {
        float s = 0;
        for (int r = 0; r < n; ++r) s += value(r, t, static_cast<int>(i));
        return s;
      });
    }
  });
  INFO(err);
  CHECK(err.empty());
  sets.shutdown();
  for (int r = 0; r < n; ++r) CHECK(sets.data(r).allreduces() == (fuse ? 1u : uint64_t(kTensors)));
}

TEST_CASE("loop: the registry gives each batch to the first transport that takes it", "[loop]") {
  const int n = 2;
  InProcessSets sets(n, test_config(), /*small_first=*/true, /*small_bytes=*/1024);
  const std::string err = on_ranks(n, [&](int rank) {
    std::vector<float> small(16, static_cast<float>(rank + 1)), large(1024, static_cast<float>(rank + 1));
    require_ok(submit(sets.set(rank), entry(rank, OpType::kAllreduce, "small", small.data(),
                                            DataType::kFloat32, {16}, nullptr)));
    require_ok(submit(sets.set(rank), entry(rank, OpType::kAllreduce, "large", large.data(),
                                            DataType::kFloat32, {1024}, nullptr)));
    check_all("small", small.data(), 16, [](int64_t) { return 3.0f; });
    check_all("large", large.data(), 1024, [](int64_t) { return 3.0f; });
  });
  INFO(err);
  CHECK(err.empty());
  sets.shutdown();
  for (int r = 0; r < n; ++r) {
    CHECK(sets.small(r).allreduces() == 1);
    CHECK(sets.data(r).allreduces() == 1);
  }
  CHECK(sets.set(0).transports().describe() == "small, inproc");
}

TEST_CASE("loop: steady state runs from the response cache (no name gathering)", "[loop]") {
  const int n = GENERATE(2, 3);
  const int kSteps = 30;
  InProcessSets sets(n, test_config());
  const std::string err = on_ranks(n, [&](int rank) {
    for (int step = 0; step < kSteps; ++step) {
      std::vector<float> b(8, static_cast<float>(rank + step));
      require_ok(submit(sets.set(rank), entry(rank, OpType::kAllreduce, "w", b.data(),
                                              DataType::kFloat32, {8}, nullptr)));
      float expect = 0;
      for (int r = 0; r < n; ++r) expect += static_cast<float>(r + step);
      check_all("w step " + std::to_string(step), b.data(), 8, [&](int64_t) { return expect; });
    }
  });
  INFO(err);
  CHECK(err.empty());
  sets.shutdown();
  // A full cycle gathers names; cached cycles only AND bit vectors. The first step and the
  // shutdown need full cycles; the other steps hit the cache.
  INFO("gathers on rank 0: " << sets.control(0).gathers());
  CHECK(sets.control(0).gathers() < static_cast<uint64_t>(kSteps) / 2);
}

TEST_CASE("loop: a name still pending is refused, also once the table's nodes are reused", "[loop]") {
  InProcessSets sets(2, test_config());
  std::vector<float> a0(4), a1(4), b0(4, 9.0f);
  std::vector<float> y0_data(4), y1_data(2);
  for (int step = 0; step < 3; ++step) {
    // Two tensors done first on each rank: their table nodes are spare for the ones below.
    for (const char* name : {"y0", "y1"}) {
      auto y0 = submit(sets.set(0), entry(0, OpType::kAllreduce, name, y0_data.data(),
                                          DataType::kFloat32, {4}, nullptr));
      auto y1 = submit(sets.set(1), entry(1, OpType::kAllreduce, name, y1_data.data(),
                                          DataType::kFloat32, {2}, nullptr));
      CHECK(finish(y0).code() == ErrorCode::kMismatch);  // shapes differ: fails, still taken
      CHECK(finish(y1).code() == ErrorCode::kMismatch);
    }
    std::fill(a0.begin(), a0.end(), 1.0f);
    std::fill(a1.begin(), a1.end(), 2.0f);
    auto h0 = submit(sets.set(0), entry(0, OpType::kAllreduce, "x", a0.data(),
                                        DataType::kFloat32, {4}, nullptr));
    // Rank 1 has not submitted "x": it stays pending on rank 0, so a second "x" is refused.
    std::vector<Entry> again;
    again.push_back(entry(0, OpType::kAllreduce, "x", b0.data(), DataType::kFloat32, {4},
                          std::make_shared<detail::HandleState>("x", 1)));
    const Status s = enqueue(sets.set(0), again);
    CHECK(s.code() == ErrorCode::kInvalidArgument);
    CHECK(s.message().find("still pending") != std::string::npos);
    REQUIRE(again.size() == 1);  // the caller keeps its refused entry, intact
    CHECK(again[0].request.name == "x");
    CHECK(again[0].input.data == b0.data());
    CHECK(again[0].input.shape == Shape{4});
    CHECK(again[0].handle != nullptr);
    auto h1 = submit(sets.set(1), entry(1, OpType::kAllreduce, "x", a1.data(),
                                        DataType::kFloat32, {4}, nullptr));
    require_pending_ran_refused_not(h0, h1, a0, a1, b0);
  }
  sets.shutdown();
}

TEST_CASE("loop: names in a changing order each find their own place", "[loop]") {
  // A set tries, for each submitted name, the place that followed the previous one last
  // time before it looks the name up. Steps repeat an order (the guess holds), then rotate
  // it, drop a name, add one and swap two (the guess is wrong and must be checked): every
  // tensor's sum must still land in its own buffer, on every rank.
  const int n = GENERATE(2, 3);
  InProcessSets sets(n, test_config());
  const int kLen = 5;
  const std::vector<std::vector<int>> orders = {
      {0, 1, 2, 3, 4, 5}, {0, 1, 2, 3, 4, 5}, {2, 3, 4, 5, 0, 1},   {2, 3, 5, 0, 1},
      {2, 3, 6, 5, 0, 1}, {3, 2, 6, 5, 1, 0}, {0, 1, 2, 3, 4, 5, 6}};
  const std::string err = on_ranks(n, [&](int rank) {
    std::vector<std::vector<float>> bufs(7, std::vector<float>(kLen));
    for (size_t step = 0; step < orders.size(); ++step) {
      std::vector<std::shared_ptr<detail::HandleState>> hs;
      for (int t : orders[step]) {
        auto& b = bufs[static_cast<size_t>(t)];
        for (int i = 0; i < kLen; ++i) b[static_cast<size_t>(i)] = value(rank, t, i) + step;
        hs.push_back(
            submit(sets.set(rank), entry(rank, OpType::kAllreduce, "grad." + std::to_string(t),
                                         b.data(), DataType::kFloat32, {kLen}, nullptr)));
      }
      for (size_t k = 0; k < hs.size(); ++k) {
        const int t = orders[step][k];
        require_ok(hs[k]);
        check_all("step " + std::to_string(step) + " grad." + std::to_string(t),
                  bufs[static_cast<size_t>(t)].data(), kLen, [&](int64_t i) {
                    float s = 0;
                    for (int r = 0; r < n; ++r) s += value(r, t, static_cast<int>(i)) + step;
                    return s;
                  });
      }
    }
  });
  INFO(err);
  CHECK(err.empty());
}

TEST_CASE("loop: a name whose place is the guessed one is refused while it is pending", "[loop]") {
  // Two rounds of "a" then "b" on both ranks: each set now guesses "b"'s place after "a".
  // Then rank 0 submits "b" and "a" alone (both stay pending: rank 1 has not), and "b" once
  // more right after "a": the guess points at "b"'s place, which is pending, so the second
  // "b" must be refused and the first one still complete with the right sum.
  InProcessSets sets(2, test_config());
  std::vector<std::vector<float>> bufs(2, std::vector<float>(6));  // [rank][a: 0-2, b: 3-5]
  const auto submit_named = [&](int r, const char* name, float v) {
    float* p = bufs[static_cast<size_t>(r)].data() + (name[0] == 'a' ? 0 : 3);
    std::fill(p, p + 3, v);
    return submit(sets.set(r),
                  entry(r, OpType::kAllreduce, name, p, DataType::kFloat32, {3}, nullptr));
  };
  for (int round = 0; round < 2; ++round) {
    for (const char* name : {"a", "b"}) {
      auto h0 = submit_named(0, name, 1.0f);
      auto h1 = submit_named(1, name, 2.0f);
      require_ok(h0);
      require_ok(h1);
      CHECK(bufs[0][name[0] == 'a' ? 0 : 3] == 3.0f);
    }
  }
  auto b0 = submit_named(0, "b", 10.0f);
  auto a0 = submit_named(0, "a", 20.0f);
  float other[3] = {7, 7, 7};
  std::vector<Entry> again;
  again.push_back(entry(0, OpType::kAllreduce, "b", other, DataType::kFloat32, {3},
                        std::make_shared<detail::HandleState>("b", 1)));
  const Status s = enqueue(sets.set(0), again);
  CHECK(s.code() == ErrorCode::kInvalidArgument);
  CHECK(s.message().find("still pending") != std::string::npos);
  auto b1 = submit_named(1, "b", 1.0f);
  auto a1 = submit_named(1, "a", 2.0f);
  for (auto* h : {&b0, &a0, &b1, &a1}) require_ok(*h);
  for (int r = 0; r < 2; ++r) {
    check_all("a on rank " + std::to_string(r), bufs[static_cast<size_t>(r)].data(), 3,
              [](int64_t) { return 22.0f; });
    check_all("b on rank " + std::to_string(r), bufs[static_cast<size_t>(r)].data() + 3, 3,
              [](int64_t) { return 11.0f; });
  }
  CHECK(other[0] == 7.0f);  // the refused tensor was never run
  sets.shutdown();
}

TEST_CASE("loop: names used every step keep their places; names used once are swept", "[loop]") {
  // 700 names submitted every step beside 500 used once each: the table is swept as it grows
  // (twice what the last sweep left, from 1,024), and a sweep must drop only names not
  // submitted since the one before: the 700 stay bound, and the table stays bounded.
  InProcessSets sets(2, test_config());
  constexpr int kKept = 700, kOnce = 500, kSteps = 12, kLen = 2;
  std::vector<int> kept_missing(kSteps);
  std::vector<size_t> names_after(kSteps);
  const std::string err = on_ranks(2, [&](int rank) {
    std::vector<std::vector<float>> bufs(kKept + kOnce, std::vector<float>(kLen));
    for (int step = 0; step < kSteps; ++step) {
      // The kept names complete (idle) before the names used once are submitted: a sweep
      // among those sees every kept name idle.
      std::vector<std::shared_ptr<detail::HandleState>> hs;
      for (int k = 0; k < kKept + kOnce; ++k) {
        if (k == kKept) {
          for (auto& h : hs) require_ok(h);
        }
        auto& b = bufs[static_cast<size_t>(k)];
        for (int i = 0; i < kLen; ++i) b[static_cast<size_t>(i)] = value(rank, k, i) + step;
        const std::string name = k < kKept
                                     ? "kept." + std::to_string(k)
                                     : "once." + std::to_string(step) + "." + std::to_string(k);
        hs.push_back(submit(sets.set(rank), entry(rank, OpType::kAllreduce, name, b.data(),
                                                  DataType::kFloat32, {kLen}, nullptr)));
      }
      for (int k = 0; k < kKept + kOnce; ++k) {
        require_ok(hs[static_cast<size_t>(k)]);
        check_all("step " + std::to_string(step) + " tensor " + std::to_string(k),
                  bufs[static_cast<size_t>(k)].data(), kLen, [&](int64_t i) {
                    return value(0, k, static_cast<int>(i)) + value(1, k, static_cast<int>(i)) +
                           2.0f * static_cast<float>(step);
                  });
      }
      if (rank == 0) {
        for (int k = 0; k < kKept; ++k) {
          kept_missing[static_cast<size_t>(step)] +=
              !sets.set(0).is_bound("kept." + std::to_string(k));
        }
        names_after[static_cast<size_t>(step)] = sets.set(0).bound_names();
      }
    }
  });
  INFO(err);
  REQUIRE(err.empty());
  for (int step = 0; step < kSteps; ++step) {
    INFO("step " << step << ": " << names_after[static_cast<size_t>(step)] << " names bound");
    CHECK(kept_missing[static_cast<size_t>(step)] == 0);
    // The names used once are swept: never more than a few steps' worth.
    CHECK(names_after[static_cast<size_t>(step)] <=
          static_cast<size_t>(2 * (kKept + 2 * kOnce) + 1024));
  }
  sets.shutdown();
}

TEST_CASE("loop: a joined rank contributes zeros and join returns the last rank", "[loop]") {
  const int n = GENERATE(2, 3);
  InProcessSets sets(n, test_config());
  std::vector<int64_t> last(static_cast<size_t>(n), -2);
  const std::string err = on_ranks(n, [&](int rank) {
    ProcessSetState& set = sets.set(rank);
    if (rank == 0) {  // joins at once, with no data
      auto hj = submit(set, entry(rank, OpType::kJoin, kJoinName, nullptr, DataType::kUInt8, {0}, nullptr));
      require_ok(hj);
      last[0] = hj->value();
      return;
    }
    std::vector<float> b(10, static_cast<float>(rank));
    require_ok(submit(set, entry(rank, OpType::kAllreduce, "late", b.data(), DataType::kFloat32, {10}, nullptr)));
    float expect = 0;
    for (int r = 1; r < n; ++r) expect += static_cast<float>(r);  // rank 0 adds zeros
    check_all("late", b.data(), 10, [&](int64_t) { return expect; });
    auto hj = submit(set, entry(rank, OpType::kJoin, kJoinName, nullptr, DataType::kUInt8, {0}, nullptr));
    require_ok(hj);
    last[static_cast<size_t>(rank)] = hj->value();
  });
  INFO(err);
  CHECK(err.empty());
  for (int r = 0; r < n; ++r) {
    CHECK(last[static_cast<size_t>(r)] == last[0]);
    CHECK(last[static_cast<size_t>(r)] >= 1);  // rank 0 joined first
  }
}

TEST_CASE("loop: a shape mismatch fails on every rank naming the ranks; the next call works", "[loop]") {
  const int n = GENERATE(2, 3);
  InProcessSets sets(n, test_config());
  const std::string err = on_ranks(n, [&](int rank) {
    std::vector<float> b(static_cast<size_t>(rank + 2), 1.0f);
    Status s = finish(submit(sets.set(rank), entry(rank, OpType::kAllreduce, "bad", b.data(),
                                                   DataType::kFloat32, {rank + 2}, nullptr)));
    if (s.code() != ErrorCode::kMismatch) throw std::runtime_error("expected a mismatch, got: " + s.message());
    if (s.message().find("'bad'") == std::string::npos || s.message().find("rank 1") == std::string::npos) {
      throw std::runtime_error("message names neither tensor nor rank: " + s.message());
    }
    std::vector<float> ok(4, static_cast<float>(rank));
    require_ok(submit(sets.set(rank), entry(rank, OpType::kAllreduce, "after", ok.data(),
                                            DataType::kFloat32, {4}, nullptr)));
    check_all("after", ok.data(), 4, [&](int64_t) { return static_cast<float>(n * (n - 1) / 2); });
  });
  INFO(err);
  CHECK(err.empty());
}

TEST_CASE("loop: a transport failure reaches every rank's handle; the next call works", "[loop]") {
  const int n = 2;
  InProcessSets sets(n, test_config());
  for (int r = 0; r < n; ++r) sets.data(r).fail_allreduce(1, "injected failure on rank " + std::to_string(r));
  const std::string err = on_ranks(n, [&](int rank) {
    std::vector<float> b(4, 1.0f);
    Status s = finish(submit(sets.set(rank), entry(rank, OpType::kAllreduce, "doomed", b.data(),
                                                   DataType::kFloat32, {4}, nullptr)));
    const std::string want = "allreduce 'doomed': injected failure on rank " + std::to_string(rank);
    if (s.ok() || s.message() != want) throw std::runtime_error("got '" + s.message() + "', want '" + want + "'");
    require_ok(submit(sets.set(rank), entry(rank, OpType::kAllreduce, "fine", b.data(),
                                            DataType::kFloat32, {4}, nullptr)));
    check_all("fine", b.data(), 4, [&](int64_t) { return static_cast<float>(n); });
  });
  INFO(err);
  CHECK(err.empty());
}

TEST_CASE("loop: a failure of a data plane whose failures are fatal (MPI) reports it; handles say the job ends", "[loop]") {
  const int n = 2;
  InProcessSets sets(n, test_config());
  for (int r = 0; r < n; ++r) {
    sets.data(r).set_failures_fatal(true);
    sets.data(r).fail_allreduce(1, "injected MPI error on rank " + std::to_string(r));
  }
  const std::string err = on_ranks(n, [&](int rank) {
    std::vector<float> b(4, 1.0f);
    Status s = finish(submit(sets.set(rank), entry(rank, OpType::kAllreduce, "broken", b.data(),
                                                   DataType::kFloat32, {4}, nullptr)));
    const std::string want = "allreduce 'broken': injected MPI error on rank " +
                             std::to_string(rank) +
                             "; the job ends (an error inside a collective is fatal)";
    if (s.ok() || s.message() != want) {
      throw std::runtime_error("got '" + s.message() + "', want '" + want + "'");
    }
  });
  INFO(err);
  CHECK(err.empty());
  CHECK_THAT(pending_fatal(), Catch::Contains("allreduce 'broken': injected MPI error on rank") &&
                                  Catch::Contains("(in the inproc data plane)"));
  sets.shutdown();
  clear_fatal();  // this simulated job is over; the rest of the process runs on
}

TEST_CASE("loop: a transport that throws fails the batch's handles by name and stops the set", "[loop]") {
  const int n = 2;
  InProcessSets sets(n, test_config());
  for (int r = 0; r < n; ++r) sets.data(r).throw_bad_alloc_at(1);
  const std::string err = on_ranks(n, [&](int rank) {
    std::vector<float> b(4, 1.0f);
    Status s = finish(submit(sets.set(rank), entry(rank, OpType::kAllreduce, "huge", b.data(),
                                                   DataType::kFloat32, {4}, nullptr)));
    const std::string want = "allreduce 'huge' failed in transport 'inproc': out of memory "
                             "(std::bad_alloc); this process set stops";
    if (s.ok() || s.message() != want) {
      throw std::runtime_error("rank " + std::to_string(rank) + " got '" + s.message() +
                               "', want '" + want + "'");
    }
  });
  INFO(err);
  CHECK(err.empty());
  // Each rank's thread stopped, reported a fatal condition naming the set, the rank and the
  // exception, and refuses new work with the reason.
  for (int r = 0; r < n; ++r) {
    const auto deadline = std::chrono::steady_clock::now() + kDeadline;
    while (sets.set(r).running() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    CHECK_FALSE(sets.set(r).running());
    CHECK_THAT(sets.set(r).stop_reason(), Catch::Contains("allreduce 'huge'") &&
                                              Catch::Contains("std::bad_alloc"));
  }
  CHECK_THAT(pending_fatal(), Catch::Contains("background thread of global rank") &&
                                  Catch::Contains("allreduce 'huge'"));
  std::vector<float> c(4, 1.0f);
  std::vector<Entry> v;
  v.push_back(entry(0, OpType::kAllreduce, "later", c.data(), DataType::kFloat32, {4},
                    std::make_shared<detail::HandleState>("later", 1)));
  CHECK(enqueue(sets.set(0), v).code() == ErrorCode::kShutdown);
  sets.shutdown();
  clear_fatal();  // this simulated job is over; the rest of the process runs on
}

// fuzz_execute's first find (test/fuzz/regressions/fuzz_execute/empty-fused-allreduce): a
// fused batch of empty allreduces copied zero bytes from a null fusion buffer (memcpy's
// pointers must not be null, even for zero bytes: UBSan stopped the rank).
TEST_CASE("loop: empty allreduces fused into one batch complete", "[loop]") {
  const int n = GENERATE(1, 2, 3);
  InProcessSets sets(n, test_config());
  const std::string err = on_ranks(n, [&](int rank) {
    std::vector<float> none, some(3, static_cast<float>(rank));
    std::vector<std::shared_ptr<detail::HandleState>> hs;
    for (int i = 0; i < 4; ++i) {
      hs.push_back(submit(sets.set(rank), entry(rank, OpType::kAllreduce, "empty." + std::to_string(i),
                                                none.data(), DataType::kFloat32, {0}, nullptr)));
    }
    hs.push_back(submit_one(sets.set(rank), "some", some.data(), 3));
    for (const auto& h : hs) require_ok(h);
    check_all("some", some.data(), 3, [&](int64_t) { return static_cast<float>(n * (n - 1) / 2); });
  });
  INFO(err);
  CHECK(err.empty());
}
