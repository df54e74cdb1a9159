// Copyright horovod_cpp authors. The "left" mark of the shared-memory collectives
// (ShmAllreduce::leave()): a rank that leaves after an error of its own, while its process goes
// on, must fail the waits of the peers that wait for it in moments, not at the 300 s deadline;
// and a rank whose collective fails that way marks itself in turn. Three ranks as three
// ShmAllreduce objects of one process, over real segments, each rank a thread.
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "transport/shm/shm_allreduce.h"

namespace hvd {
namespace {

constexpr int kRanks = 3;

std::vector<std::unique_ptr<ShmAllreduce>> make_ranks(ErrorCode lost_code) {
  static std::atomic<int> calls{0};
  const std::string tag = "leave." + std::to_string(getpid()) + "." + std::to_string(calls++);
  std::vector<std::unique_ptr<ShmAllreduce>> ranks(kRanks);
  for (int r = 0; r < kRanks; ++r) {
    REQUIRE(ShmAllreduce::create(tag, r, kRanks, 64 * 1024, &ranks[static_cast<size_t>(r)]).ok());
  }
  for (auto& s : ranks) REQUIRE(s->attach().ok());
  for (auto& s : ranks) {
    s->unlink();
    s->peer_watch().set_lost_code(lost_code);
  }
  return ranks;
}

// Runs `op(rank)` on ranks 0 and 1 (threads) while rank 2 calls leave() after 200 ms instead
// of joining (or, `close`, destroys its ShmAllreduce, as a rank that shuts down or resets);
// returns the two statuses and how long the slower took.
template <typename Op>
std::vector<Status> run_without_rank2(std::vector<std::unique_ptr<ShmAllreduce>>& ranks, Op op,
                                      double* seconds, bool close = false) {
  std::vector<Status> got(2);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) threads.emplace_back([&, r] { got[static_cast<size_t>(r)] = op(r); });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  if (close) {
    ranks[2].reset();
  } else {
    ranks[2]->leave();
  }
  for (auto& t : threads) t.join();
  *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return got;
}

void check_failed(const std::vector<Status>& got, ErrorCode code, double seconds,
                  const char* how = "after an error on its side") {
  INFO("took " << seconds << " s");
  CHECK(seconds < 10);  // the deadline is 300 s; the marks are checked every ~50 ms
  for (size_t r = 0; r < got.size(); ++r) {
    INFO("rank " << r << ": " << got[r].message());
    CHECK_FALSE(got[r].ok());
    CHECK(got[r].code() == code);
    CHECK(got[r].message().find(std::string("rank 2 of this host left the collective ") + how) !=
          std::string::npos);
  }
}

TEST_CASE("shm leave: a rank that leaves fails its peers' allreduce, chunked or whole",
          "[shm_leave]") {
  for (int64_t count : {int64_t{1000}, int64_t{200 * 1000}}) {  // one round; many chunks
    INFO(count << " floats");
    auto ranks = make_ranks(ErrorCode::kInternal);
    std::vector<std::vector<float>> data(2, std::vector<float>(static_cast<size_t>(count), 1.0f));
    double seconds = 0;
    const auto got = run_without_rank2(ranks, [&](int r) {
      return ranks[static_cast<size_t>(r)]->allreduce({{data[static_cast<size_t>(r)].data(), count}},
                                                      DataType::kFloat32, ReduceOp::kSum, 1.0, 1);
    }, &seconds);
    check_failed(got, ErrorCode::kInternal, seconds);
    // Each failed rank marked itself: a peer that came later would not wait for it either.
    CHECK(ranks[2]->has_left(0));
    CHECK(ranks[2]->has_left(1));
  }
}

TEST_CASE("shm leave: the root's leaving fails a broadcast; a member's fails an allgather",
          "[shm_leave]") {
  SECTION("broadcast from rank 2") {
    auto ranks = make_ranks(ErrorCode::kBackend);
    std::vector<std::vector<char>> buf(2, std::vector<char>(300 * 1000, 0));
    double seconds = 0;
    const auto got = run_without_rank2(ranks, [&](int r) {
      return ranks[static_cast<size_t>(r)]->broadcast(buf[static_cast<size_t>(r)].data(),
                                                      static_cast<int64_t>(buf[0].size()), 2);
    }, &seconds);
    check_failed(got, ErrorCode::kBackend, seconds);
  }
  SECTION("allgather") {
    auto ranks = make_ranks(ErrorCode::kBackend);
    const std::vector<int64_t> bytes(kRanks, 4096);
    std::vector<std::vector<char>> in(2, std::vector<char>(4096, 7)),
        out(2, std::vector<char>(kRanks * 4096));
    double seconds = 0;
    const auto got = run_without_rank2(ranks, [&](int r) {
      return ranks[static_cast<size_t>(r)]->allgatherv(in[static_cast<size_t>(r)].data(),
                                                       out[static_cast<size_t>(r)].data(), bytes);
    }, &seconds);
    check_failed(got, ErrorCode::kBackend, seconds);
  }
}

TEST_CASE("shm leave: a rank that closes its segment mid-collective fails its peers' waits",
          "[shm_leave]") {
  auto ranks = make_ranks(ErrorCode::kInternal);
  const int64_t count = 200 * 1000;
  std::vector<std::vector<float>> data(2, std::vector<float>(static_cast<size_t>(count), 1.0f));
  double seconds = 0;
  const auto got = run_without_rank2(ranks, [&](int r) {
    return ranks[static_cast<size_t>(r)]->allreduce({{data[static_cast<size_t>(r)].data(), count}},
                                                    DataType::kFloat32, ReduceOp::kSum, 1.0, 1);
  }, &seconds, /*close=*/true);
  check_failed(got, ErrorCode::kInternal, seconds, "and closed its shared memory");
}

TEST_CASE("shm leave: peers that close after a broadcast fail no one", "[shm_leave]") {
  // Rank 2 is the root: it publishes its last round, returns and closes at once; the others,
  // who may read that round after the close, still complete with its bytes (the mark comes
  // after the counter). Every round but the last waits for the others, who start late.
  auto ranks = make_ranks(ErrorCode::kInternal);
  const int64_t bytes = 300 * 1000;
  std::vector<std::vector<unsigned char>> buf(kRanks, std::vector<unsigned char>(bytes, 0));
  for (int64_t i = 0; i < bytes; ++i) buf[2][static_cast<size_t>(i)] = static_cast<unsigned char>(i * 7);
  std::vector<Status> got(kRanks);
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      if (r < 2) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      got[static_cast<size_t>(r)] =
          ranks[static_cast<size_t>(r)]->broadcast(buf[static_cast<size_t>(r)].data(), bytes, 2);
      if (r == 2) ranks[2].reset();  // while the others may still wait for its last round
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r << ": " << got[static_cast<size_t>(r)].message());
    REQUIRE(got[static_cast<size_t>(r)].ok());
    CHECK(buf[static_cast<size_t>(r)] == buf[2]);
  }
}

TEST_CASE("shm leave: without a mark, the same collective completes on every rank",
          "[shm_leave]") {
  auto ranks = make_ranks(ErrorCode::kInternal);
  const int64_t count = 200 * 1000;
  std::vector<std::vector<float>> data(kRanks);
  for (int r = 0; r < kRanks; ++r) {
    data[static_cast<size_t>(r)].resize(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) {
      data[static_cast<size_t>(r)][static_cast<size_t>(i)] = static_cast<float>((r + 1) * (i % 17));
    }
  }
  std::vector<Status> got(kRanks);
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      got[static_cast<size_t>(r)] = ranks[static_cast<size_t>(r)]->allreduce(
          {{data[static_cast<size_t>(r)].data(), count}}, DataType::kFloat32, ReduceOp::kSum, 1.0, 1);
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < kRanks; ++r) {
    INFO("rank " << r << ": " << got[static_cast<size_t>(r)].message());
    REQUIRE(got[static_cast<size_t>(r)].ok());
    CHECK_FALSE(ranks[0]->has_left(r));
    const std::vector<float>& v = data[static_cast<size_t>(r)];
    int64_t wrong = 0;
    for (int64_t i = 0; i < count; ++i) wrong += v[static_cast<size_t>(i)] != static_cast<float>(6 * (i % 17));
    CHECK(wrong == 0);
  }
}

}  // namespace
}  // namespace hvd
