// Copyright horovod_cpp authors. The autotuner: the parameter search (pure) and the sampling
// and agreement of Autotuner, with simulated clocks and an in-process "allreduce" among
// threads standing for ranks.
#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "common/config.h"
#include "in_process_control_plane.h"
#include "tuning/agreement.h"
#include "tuning/autotuner.h"
#include "tuning/parameter_search.h"

using namespace hvd;

namespace {

// A throughput landscape with its peak at 16 MiB and 2 ms.
double landscape(double mb, double ms) {
  return 1000.0 /
         (1.0 + 0.2 * std::fabs(std::log2(mb + 1) - std::log2(17)) + 0.1 * std::fabs(ms - 2));
}

std::vector<TunedKnob> knobs() {
  return {{"fusion_threshold_mb", {0, 1, 4, 16, 32, 64, 128}}, {"cycle_time_ms", {0.5, 1, 2, 5}}};
}

}  // namespace

TEST_CASE("search finds the peak knob by knob and ignores warm-up samples", "[tuning]") {
  SearchOptions o;
  o.warmup_samples = 2;
  o.samples_per_trial = 3;
  ParameterSearch s(knobs(), {64, 1}, o);
  int samples = 0, changes = 0;
  while (!s.done() && samples < 1000) {
    const std::vector<double> v = s.current();
    const int in_trial = samples % 5;  // 2 warm-up + 3 scored samples per trial
    // Warm-up samples are wildly off; they must not count.
    const double score = in_trial < 2 ? 1e9 : landscape(v[0], v[1]) + in_trial;
    ++samples;
    if (s.record(score)) ++changes;
  }
  REQUIRE(s.done());
  CHECK(s.best() == std::vector<double>{16, 2});
  CHECK(s.current() == s.best());
  // 7 thresholds (64 is the start) + 3 new cycle times (1 ms already tried with 16 MiB).
  CHECK(s.trials().size() == 10);
  CHECK(samples == 50);
  CHECK(changes == 10);
  CHECK(s.trials()[0].values == std::vector<double>{64, 1});
  CHECK(s.trials()[0].score == Approx(landscape(64, 1) + 3));  // median of 2, 3, 4 offsets
  CHECK_FALSE(s.record(1.0));  // done: nothing changes any more
}

TEST_CASE("search keeps the starting values unless a candidate clearly beats them", "[tuning]") {
  SearchOptions o;
  o.warmup_samples = 0;
  o.samples_per_trial = 1;
  o.min_gain = 0.05;
  ParameterSearch s({{"fusion_threshold_mb", {1, 4}}}, {64}, o);
  s.record(100);    // 64 MiB (start)
  s.record(104);    // 1 MiB: +4 %, not enough
  s.record(104.5);  // 4 MiB: +4.5 %, not enough
  REQUIRE(s.done());
  CHECK(s.best() == std::vector<double>{64});
  CHECK(s.best_score() == 100);
}

namespace {

// N threads as N ranks: a max-allreduce of two doubles, as the MPI agreement step does.
class InProcessMax {
 public:
  explicit InProcessMax(int n) : n_(n) {}
  void run(double* a, double* b) {
    std::unique_lock<std::mutex> lk(mu_);
    const uint64_t gen = gen_;
    acc_a_ = arrived_ == 0 ? *a : std::max(acc_a_, *a);
    acc_b_ = arrived_ == 0 ? *b : std::max(acc_b_, *b);
    if (++arrived_ == n_) {
      res_a_ = acc_a_;
      res_b_ = acc_b_;
      arrived_ = 0;
      ++gen_;
      cv_.notify_all();
    } else {
      cv_.wait(lk, [&] { return gen_ != gen; });
    }
    *a = res_a_;
    *b = res_b_;
    ++calls_;
  }
  int calls() const { return calls_; }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int n_, arrived_ = 0, calls_ = 0;
  uint64_t gen_ = 0;
  double acc_a_ = 0, acc_b_ = 0, res_a_ = 0, res_b_ = 0;
};

struct SimRank {
  int64_t threshold = 0;
  double cycle_ms = 0;
  std::vector<std::pair<int64_t, double>> applied;
};

}  // namespace

TEST_CASE("autotuner: ranks with different clocks agree on every trial and the result",
          "[tuning]") {
  const int n = 3;
  const std::string log = "test_tuning_autotune.csv";
  std::remove(log.c_str());
  Config c;
  c.autotune = true;
  c.autotune_log = log;
  c.autotune_warmup_samples = 1;
  c.autotune_steps_per_sample = 4;
  c.autotune_samples_per_trial = 3;
  InProcessMax agree(n);
  std::vector<SimRank> ranks(n);
  std::vector<std::unique_ptr<Autotuner>> tuners;
  for (int r = 0; r < n; ++r) {
    ranks[r].threshold = c.fusion_threshold_bytes;
    ranks[r].cycle_ms = c.cycle_time_ms;
    tuners.push_back(std::make_unique<Autotuner>(
        c, r == 0, [&agree](double* s, double* b) { agree.run(s, b); return Status::OK(); },
        [&ranks, r](int64_t t, double ms) {
          ranks[r].threshold = t;
          ranks[r].cycle_ms = ms;
          ranks[r].applied.push_back({t, ms});
        }));
  }
  // The rank threads record failures here and the main thread checks them: Catch's macros
  // are not thread-safe.
  std::vector<std::string> failures(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      double now = 100.0 * r;  // unrelated clocks on every rank
      const int64_t step_bytes = 8 << 20;
      for (int cycle = 0; cycle < 2000 && !tuners[r]->done(); ++cycle) {
        if (cycle % 3 == 2) {  // a cycle without allreduce data: ignored
          now += 1e-4;
          Status st = tuners[r]->after_cycle(0, now);
          if (!st.ok()) {
            failures[static_cast<size_t>(r)] = st.message();
            return;
          }
          continue;
        }
        const double mb = static_cast<double>(ranks[r].threshold) / (1 << 20);
        // Time per cycle: slower away from the peak; rank 2 is 10 % slower and jittery.
        double dt = 1.0 / landscape(mb, ranks[r].cycle_ms);
        if (r == 2) dt *= 1.1 + 0.01 * (cycle % 2);
        now += dt;
        Status st = tuners[r]->after_cycle(step_bytes, now);
        if (!st.ok()) {
          failures[static_cast<size_t>(r)] = st.message();
          return;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) {
    INFO("rank " << r << ": " << failures[static_cast<size_t>(r)]);
    CHECK(failures[static_cast<size_t>(r)].empty());
  }
  for (int r = 0; r < n; ++r) {
    INFO("rank " << r);
    REQUIRE(tuners[r]->done());
    CHECK(tuners[r]->search().best() == std::vector<double>{16, 2});
    CHECK(ranks[r].threshold == 16ll << 20);
    CHECK(ranks[r].cycle_ms == 2);
    CHECK(ranks[r].applied == ranks[0].applied);  // the same changes, in the same order
    REQUIRE(tuners[r]->search().trials().size() == tuners[0]->search().trials().size());
    for (size_t i = 0; i < tuners[r]->search().trials().size(); ++i) {
      CHECK(tuners[r]->search().trials()[i].score == tuners[0]->search().trials()[i].score);
    }
  }
  // 10 trials x (1 warm-up + 3) samples, one agreement per sample on each rank.
  CHECK(agree.calls() == n * 40);
  std::ifstream f(log);
  std::vector<std::string> lines;
  for (std::string line; std::getline(f, line);) lines.push_back(line);
  REQUIRE(lines.size() == 12);  // header, 10 trials, best
  CHECK(lines[0] == "trial,fusion_threshold_mb,cycle_time_ms,score_mb_per_s,best");
  CHECK(lines[1].rfind("0,64,1,", 0) == 0);
  CHECK(lines[11].rfind("best,16,2,", 0) == 0);
  std::remove(log.c_str());
}

TEST_CASE("autotune settings are read from the environment", "[tuning]") {
  Config c;
  auto env = [](const char* name) -> std::optional<std::string> {
    const std::string n = name;
    if (n == "HOROVOD_AUTOTUNE") return "1";
    if (n == "HOROVOD_AUTOTUNE_LOG") return "/tmp/x.csv";
    if (n == "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE") return "7";
    if (n == "HOROVOD_AUTOTUNE_WARMUP_SAMPLES") return "0";
    return std::nullopt;
  };
  REQUIRE(Config::from_env(&c, env).ok());
  CHECK(c.autotune);
  CHECK(c.autotune_log == "/tmp/x.csv");
  CHECK(c.autotune_steps_per_sample == 7);
  CHECK(c.autotune_warmup_samples == 0);
  CHECK(c.autotune_samples_per_trial == 3);
  auto bad = [](const char* name) -> std::optional<std::string> {
    if (std::string(name) == "HOROVOD_AUTOTUNE") return "yes";
    return std::nullopt;
  };
  Status s = Config::from_env(&c, bad);
  CHECK_FALSE(s.ok());
  CHECK(s.message().find("HOROVOD_AUTOTUNE='yes'") != std::string::npos);
}

TEST_CASE("autotune agreement: every member gets the slowest sample over the control plane",
          "[tuning]") {
  const int n = GENERATE(2, 3, 4);
  testing::InProcessHub hub(n);
  // Two agreements in a row, each rank's figures different every time, the largest seconds
  // and the largest bytes on different ranks.
  const auto seconds_of = [n](int r, int round) { return 0.25 + ((r + round) % n) * 0.5; };
  const auto bytes_of = [n](int r, int round) { return 1000.0 * ((r + 2 * round + 1) % n + 1); };
  std::vector<std::string> failures(static_cast<size_t>(n));
  std::vector<std::vector<double>> got(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      testing::InProcessControlPlane control(&hub, r);
      for (int round = 0; round < 2; ++round) {
        double s = seconds_of(r, round), b = bytes_of(r, round);
        const Status st = agree_on_slowest(control, &s, &b);
        if (!st.ok()) {
          failures[static_cast<size_t>(r)] = st.message();
          return;
        }
        got[static_cast<size_t>(r)].push_back(s);
        got[static_cast<size_t>(r)].push_back(b);
      }
    });
  }
  for (auto& t : threads) t.join();
  std::vector<double> expect;
  for (int round = 0; round < 2; ++round) {
    double s = 0, b = 0;
    for (int r = 0; r < n; ++r) {
      s = std::max(s, seconds_of(r, round));
      b = std::max(b, bytes_of(r, round));
    }
    expect.push_back(s);
    expect.push_back(b);
  }
  for (int r = 0; r < n; ++r) {
    INFO("rank " << r << ": " << failures[static_cast<size_t>(r)]);
    CHECK(failures[static_cast<size_t>(r)].empty());
    CHECK(got[static_cast<size_t>(r)] == expect);
  }
}

TEST_CASE("autotune agreement: a failed control plane fails it on every member", "[tuning]") {
  const int n = 3;
  testing::InProcessHub hub(n);
  hub.abort("a member is gone");
  std::vector<Status> st(static_cast<size_t>(n));
  std::vector<double> s(static_cast<size_t>(n), 1.0), b(static_cast<size_t>(n), 2.0);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      testing::InProcessControlPlane control(&hub, r);
      st[static_cast<size_t>(r)] =
          agree_on_slowest(control, &s[static_cast<size_t>(r)], &b[static_cast<size_t>(r)]);
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) {
    INFO("rank " << r << ": " << st[static_cast<size_t>(r)].message());
    CHECK_FALSE(st[static_cast<size_t>(r)].ok());
    CHECK(s[static_cast<size_t>(r)] == 1.0);  // left as it was
    CHECK(b[static_cast<size_t>(r)] == 2.0);
  }
}
