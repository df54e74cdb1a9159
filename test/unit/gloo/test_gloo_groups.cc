// Copyright horovod_cpp authors. GlooControlPlane and GlooBootstrap (exchanges, split,
// split_host) with thread-ranks over real Gloo TCP pairs.
#include <catch2/catch.hpp>
#include <cstring>
#include <functional>

#include "gloo_threads.h"
#include "transport/gloo/gloo_control_plane.h"
#include "transport/gloo/gloo_exchange.h"

namespace hvd {
namespace testing {
namespace {

// Runs fn(job, rank, plane) on every rank of a threaded job of `n`, each with a control plane
// over a group of every rank under `prefix`, first without direct links and then with them
// (as the Gloo world makes it); then checks that no rank recorded a failure.
void with_control_planes(int n, const std::string& prefix,
                         const std::function<void(ThreadedGlooJob&, int, GlooControlPlane&)>& fn) {
  for (bool with_direct : {false, true}) {
    const std::string p = prefix + (with_direct ? "d" : "");
    ThreadedGlooJob job(n);
    job.run(p, [&](int r, GlooBootstrap&) {
      std::shared_ptr<gloo::Context> ctx;
      std::unique_ptr<DirectLinks> direct;
      Status s = connect_group(*job.job(r), p + "/control", r, n, p, &ctx);
      if (s.ok() && with_direct && n > 1) {
        s = connect_direct_links(*job.job(r), p + "/control/direct", r, n, p, &direct);
      }
      if (!s.ok()) return job.fail(r, s.message());
      GlooControlPlane plane(std::move(ctx), "test set", std::move(direct));
      fn(job, r, plane);
    });
    INFO("ranks: " << n << (with_direct ? ", direct links" : ""));
    CHECK(job.failures() == std::vector<std::string>{});
  }
}

}  // namespace

TEST_CASE("gloo control plane: allreduce_and, gather, broadcast on 2, 3 and 4 ranks", "[gloo]") {
  for (int n : {2, 3, 4}) {
    with_control_planes(
        n, "cp" + std::to_string(n), [&](ThreadedGlooJob& job, int r, GlooControlPlane& plane) {
          Status s;
          for (int round = 0; round < 3; ++round) {
            // Word w has bit b set on rank q unless (w + b + round) % (q + 2) == 0.
            std::vector<uint64_t> words(5), want(5, ~0ull);
            for (int q = 0; q < n; ++q) {
              for (size_t w = 0; w < words.size(); ++w) {
                uint64_t v = 0;
                for (int b = 0; b < 64; ++b) {
                  if ((static_cast<int>(w) + b + round) % (q + 2) != 0) v |= 1ull << b;
                }
                if (q == r) words[w] = v;
                want[w] &= v;
              }
            }
            s = plane.allreduce_and(&words);
            if (!s.ok() || words != want)
              job.fail(r, "allreduce_and round " + std::to_string(round) + " " + s.message());
            // Over DirectLinks::kMaxBytes: through Gloo's device thread, with or without links.
            // Word w has bit (w + q) % 64 clear on rank q.
            std::vector<uint64_t> big(DirectLinks::kMaxBytes / 8 + 3), big_want(big.size(), ~0ull);
            for (size_t w = 0; w < big.size(); ++w) {
              for (int q = 0; q < n; ++q) big_want[w] &= ~(1ull << ((w + q) % 64));
              big[w] = ~(1ull << ((w + static_cast<size_t>(r)) % 64));
            }
            s = plane.allreduce_and(&big);
            if (!s.ok() || big != big_want) job.fail(r, "large allreduce_and " + s.message());
            // Rank q's message: q * round characters 'a' + q (empty for rank 0 or round 0).
            auto message = [&](int q) {
              return std::string(static_cast<size_t>(q * round * 100), static_cast<char>('a' + q));
            };
            std::vector<std::string> all;
            s = plane.gather(message(r), &all);
            if (!s.ok()) job.fail(r, "gather: " + s.message());
            if (r == 0) {
              bool same = all.size() == static_cast<size_t>(n);
              for (int q = 0; q < n && same; ++q) same = all[static_cast<size_t>(q)] == message(q);
              if (!same) job.fail(r, "gather round " + std::to_string(round) + " differs");
            }
            std::string blob = r == 0 ? "responses of round " + std::to_string(round) : "stale";
            if (round == 1 && r == 0) blob.clear();
            s = plane.broadcast(&blob);
            const std::string want_blob =
                round == 1 ? "" : "responses of round " + std::to_string(round);
            if (!s.ok() || blob != want_blob)
              job.fail(r, "broadcast round " + std::to_string(round) + " " + s.message());
          }
        });
  }
}

TEST_CASE("gloo control plane: blobs around the inline size, 1, 5 and 6 ranks", "[gloo]") {
  // Lengths about kInlineBytes (one message, or a first one and the rest) and far over it.
  const size_t lengths[] = {0, 1, kInlineBytes - 1, kInlineBytes, kInlineBytes + 1, 100000};
  for (int n : {1, 5, 6}) {  // 5 and 6: recursive doubling folds one and two ranks in
    with_control_planes(
        n, "cpl" + std::to_string(n), [&](ThreadedGlooJob& job, int r, GlooControlPlane& plane) {
          Status s;
          // Rank q's text in round k: lengths[(k + q) % 6] bytes, byte i = q * 13 + i + k.
          const auto text = [&](int q, size_t k) {
            std::string t(lengths[(k + static_cast<size_t>(q)) % 6], '\0');
            for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<char>(q * 13 + i + k);
            return t;
          };
          for (size_t k = 0; k < 6; ++k) {
            // One word: bit q clear on rank q, bit 63 clear on rank (k % n) only.
            std::vector<uint64_t> word{~(1ull << r) &
                                       ~(r == static_cast<int>(k) % n ? 1ull << 63 : 0)};
            uint64_t want = ~(1ull << 63);
            for (int q = 0; q < n; ++q) want &= ~(1ull << q);
            s = plane.allreduce_and(&word);
            if (!s.ok() || word[0] != want) job.fail(r, "allreduce_and round " + std::to_string(k));
            std::vector<std::string> all;
            s = plane.gather(text(r, k), &all);
            if (!s.ok()) job.fail(r, "gather: " + s.message());
            if (r == 0) {
              bool same = all.size() == static_cast<size_t>(n);
              for (int q = 0; q < n && same; ++q) same = all[static_cast<size_t>(q)] == text(q, k);
              if (!same) job.fail(r, "gather round " + std::to_string(k) + " differs");
            }
            std::string blob = r == 0 ? text(n, k) : "stale";
            s = plane.broadcast(&blob);
            if (!s.ok() || blob != text(n, k))
              job.fail(r, "broadcast round " + std::to_string(k) + " " + s.message());
          }
        });
  }
}

TEST_CASE("gloo bootstrap: allgather, broadcast, barrier, split and split_host", "[gloo]") {
  const int n = 4;
  // Ranks 0 and 2 on host "a", 1 and 3 on host "b".
  ThreadedGlooJob job(n, std::chrono::seconds(10), [](int r) { return r % 2 ? "b" : "a"; });
  job.run("bs", [&](int r, GlooBootstrap& world) {
    const int32_t mine = 100 + r;
    int32_t all[n] = {};
    Status s = world.allgather(&mine, sizeof(mine), all);
    for (int q = 0; q < n && s.ok(); ++q) {
      if (all[q] != 100 + q) s = Status::Backend("allgather differs at " + std::to_string(q));
    }
    if (!s.ok()) job.fail(r, s.message());
    char text[16] = {};
    if (r == 3) std::strcpy(text, "from three");
    s = world.broadcast(text, sizeof(text), 3);
    if (!s.ok() || std::string(text) != "from three") job.fail(r, "broadcast " + s.message());
    if (!(s = world.barrier()).ok()) job.fail(r, "barrier " + s.message());
    // split: color r % 2, ordered by key -r (reversed).
    std::unique_ptr<Bootstrap> half;
    s = world.split(r % 2, -r, &half);
    if (!s.ok()) return job.fail(r, "split: " + s.message());
    const int want_rank = r < 2 ? 1 : 0;  // {2, 0} and {3, 1}
    if (half->size() != 2 || half->rank() != want_rank) job.fail(r, "split placed it wrongly");
    int32_t pair[2] = {};
    s = half->allgather(&mine, sizeof(mine), pair);
    const int first = r % 2 + 2, second = r % 2;
    if (!s.ok() || pair[0] != 100 + first || pair[1] != 100 + second)
      job.fail(r, "split allgather " + s.message());
    // split_host: the same members as the split (hosts a, b), in world order.
    std::unique_ptr<Bootstrap> host;
    s = world.split_host(&host);
    if (!s.ok()) return job.fail(r, "split_host: " + s.message());
    if (host->size() != 2 || host->rank() != r / 2) job.fail(r, "split_host placed it wrongly");
    s = host->allgather(&mine, sizeof(mine), pair);
    if (!s.ok() || pair[0] != 100 + r % 2 || pair[1] != 102 + r % 2)
      job.fail(r, "host allgather " + s.message());
    // A second split of the same group gets keys of its own.
    std::unique_ptr<Bootstrap> whole;
    s = world.split(0, r, &whole);
    if (!s.ok() || whole->size() != n || whole->rank() != r)
      job.fail(r, "second split " + s.message());
    std::unique_ptr<DataPlane> plane;
    if (s.ok() && whole->make_data_plane(&plane).ok()) {
      int64_t v = r;
      s = plane->allreduce(&v, 1, DataType::kInt64, ReduceOp::kSum);
      if (!s.ok() || v != 6) job.fail(r, "allreduce over the split " + s.message());
    }
  });
  CHECK(job.failures() == std::vector<std::string>{});
}

}  // namespace testing
}  // namespace hvd
