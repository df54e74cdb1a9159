// Copyright horovod_cpp authors. Helpers of the timed-out-wait tests (test/training/test_errors.cc,
// test/torch/test_torch_timeout.cc): rank kStalled submits kLate after the others, whose waits
// time out after kShort.
#pragma once

#include <catch2/catch.hpp>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "horovod_cpp/horovod_cpp.h"
#include "training/in_flight.h"

namespace stalled_peer {

constexpr std::chrono::milliseconds kShort(300);   ///< the timed-out ranks' deadline
constexpr std::chrono::milliseconds kLate(1500);   ///< how late rank kStalled comes
constexpr std::chrono::milliseconds kLong(60000);  ///< waits that must succeed
constexpr int kStalled = 1;

/// An allreduce after the stalled one completes on every rank with every rank's contribution.
inline void check_next_collective_works(const std::string& name) {
  std::vector<float> v(64, static_cast<float>(hvd::rank() + 1));
  hvd::AllreduceOptions o;
  o.op = hvd::ReduceOp::kSum;
  hvd::allreduce_async(name, hvd::TensorView(v.data(), hvd::DataType::kFloat32, {64}), o).wait(kLong);
  const float n = static_cast<float>(hvd::size());
  for (float x : v) REQUIRE(x == n * (n + 1) / 2);
}

/// Runs `wait`, which must throw TimeoutError after kShort naming a collective that contains
/// `name_part` (e.g. "'prefix.").
template <class F>
void require_timeout(F&& wait, const std::string& name_part) {
  std::string msg;
  try {
    wait();
  } catch (const hvd::TimeoutError& e) {
    msg = e.what();
  }
  INFO(msg);
  REQUIRE(msg.find(name_part) != std::string::npos);
  REQUIRE(msg.find("did not complete within " + std::to_string(kShort.count()) + " ms") != std::string::npos);
}

/// Every parked buffer is released once its collective has finished (shortly after the
/// stalled rank's).
inline void check_parking_drains() {
  const auto deadline = std::chrono::steady_clock::now() + kLong;
  while (hvd::detail::parked_pending() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  REQUIRE(hvd::detail::parked_pending() == 0);
}

}  // namespace stalled_peer
