// Copyright horovod_cpp authors.
#include "in_process_control_plane.h"

#include <chrono>
#include <cstring>
#include <exception>
#include <sstream>
#include <thread>

namespace hvd {
namespace testing {

using Clock = std::chrono::steady_clock;

InProcessHub::InProcessHub(int size, double timeout_seconds)
    : size_(size),
      timeout_seconds_(timeout_seconds),
      departed_(size),
      kinds_(static_cast<size_t>(size)),
      inputs_(static_cast<size_t>(size)),
      outputs_(static_cast<size_t>(size)) {}

void InProcessHub::abort(const std::string& why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (abort_reason_.empty()) abort_reason_ = why.empty() ? "aborted" : why;
  cv_.notify_all();
}

bool InProcessHub::aborted() const {
  std::lock_guard<std::mutex> lock(mu_);
  return !abort_reason_.empty();
}

Status InProcessHub::exchange(
    int rank, const std::string& kind, std::string payload,
    const std::function<Status(std::vector<std::string>& in, std::vector<std::string>* out)>&
        combine,
    std::string* result) {
  std::unique_lock<std::mutex> lock(mu_);
  const auto deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double>(timeout_seconds_));
  auto wait_until = [&](const std::function<bool()>& pred, const char* what) -> Status {
    while (abort_reason_.empty() && !pred()) {
      if (cv_.wait_until(lock, deadline) == std::cv_status::timeout && !pred()) {
        abort_reason_ = "in-process hub: rank " + std::to_string(rank) + " timed out " + what +
                        " of '" + kind + "'";
        cv_.notify_all();
      }
    }
    if (!abort_reason_.empty()) return Status::Backend(abort_reason_);
    return Status::OK();
  };
  // The previous step's results must all be taken before this step's deposits overwrite them.
  HVD_RETURN_IF_ERROR(wait_until([&] { return departed_ == size_; }, "waiting for the previous step"));
  const uint64_t gen = generation_;
  kinds_[static_cast<size_t>(rank)] = kind;
  inputs_[static_cast<size_t>(rank)] = std::move(payload);
  if (++arrived_ == size_) {
    arrived_ = 0;
    departed_ = 0;
    step_status_ = Status::OK();
    for (int r = 1; r < size_; ++r) {
      if (kinds_[static_cast<size_t>(r)] != kinds_[0]) {
        std::ostringstream os;
        os << "in-process hub: ranks issued different collectives in step " << gen << ":";
        for (int q = 0; q < size_; ++q) os << " rank " << q << " " << kinds_[static_cast<size_t>(q)];
        step_status_ = Status::Backend(os.str());
        break;
      }
    }
    if (step_status_.ok()) {
      for (auto& o : outputs_) o.clear();
      step_status_ = combine(inputs_, &outputs_);
    }
    if (!step_status_.ok() && abort_reason_.empty()) abort_reason_ = step_status_.message();
    ++generation_;
    cv_.notify_all();
  } else {
    HVD_RETURN_IF_ERROR(wait_until([&] { return generation_ > gen; }, "waiting for the others"));
  }
  Status st = step_status_;
  if (st.ok()) *result = outputs_[static_cast<size_t>(rank)];
  ++departed_;
  cv_.notify_all();
  return st;
}

namespace {

std::string words_to_bytes(const std::vector<uint64_t>& w) {
  std::string s(w.size() * sizeof(uint64_t), '\0');
  if (!w.empty()) std::memcpy(&s[0], w.data(), s.size());
  return s;
}

std::vector<uint64_t> bytes_to_words(const std::string& s) {
  std::vector<uint64_t> w(s.size() / sizeof(uint64_t));
  if (!w.empty()) std::memcpy(w.data(), s.data(), w.size() * sizeof(uint64_t));
  return w;
}

// Length-prefixed concatenation, so that gather can hand rank 0 a vector through one string.
std::string pack(const std::vector<std::string>& parts) {
  std::string out;
  for (const auto& p : parts) {
    const uint64_t n = p.size();
    out.append(reinterpret_cast<const char*>(&n), sizeof(n));
    out.append(p);
  }
  return out;
}

std::vector<std::string> unpack(const std::string& s) {
  std::vector<std::string> parts;
  size_t pos = 0;
  while (pos + sizeof(uint64_t) <= s.size()) {
    uint64_t n;
    std::memcpy(&n, s.data() + pos, sizeof(n));
    pos += sizeof(n);
    parts.push_back(s.substr(pos, n));
    pos += n;
  }
  return parts;
}

}  // namespace

Status InProcessControlPlane::allreduce_and(std::vector<uint64_t>* words) {
  ++allreduces_;
  std::string out;
  HVD_RETURN_IF_ERROR(hub_->exchange(
      rank_, "allreduce_and", words_to_bytes(*words),
      [](std::vector<std::string>& in, std::vector<std::string>* outs) {
        for (size_t r = 1; r < in.size(); ++r) {
          if (in[r].size() != in[0].size()) {
            std::ostringstream os;
            os << "in-process hub: allreduce_and lengths differ (the caches diverged):";
            for (size_t q = 0; q < in.size(); ++q) {
              os << " rank " << q << " " << in[q].size() / 8 << " words";
            }
            return Status::Backend(os.str());
          }
        }
        std::vector<uint64_t> acc = bytes_to_words(in[0]);
        for (size_t r = 1; r < in.size(); ++r) {
          std::vector<uint64_t> w = bytes_to_words(in[r]);
          for (size_t i = 0; i < acc.size(); ++i) acc[i] &= w[i];
        }
        const std::string bytes = words_to_bytes(acc);
        for (auto& o : *outs) o = bytes;
        return Status::OK();
      },
      &out));
  *words = bytes_to_words(out);
  return Status::OK();
}

Status InProcessControlPlane::gather(const std::string& mine, std::vector<std::string>* all) {
  ++gathers_;
  std::string out;
  HVD_RETURN_IF_ERROR(hub_->exchange(
      rank_, "gather", mine,
      [](std::vector<std::string>& in, std::vector<std::string>* outs) {
        (*outs)[0] = pack(in);
        return Status::OK();
      },
      &out));
  if (rank_ == 0) {
    *all = unpack(out);
  } else if (all) {
    all->clear();
  }
  return Status::OK();
}

Status InProcessControlPlane::broadcast(std::string* blob) {
  if (filter_ && rank_ == 0) filter_(blob);  // every rank, rank 0 too, gets the changed blob
  std::string out;
  HVD_RETURN_IF_ERROR(hub_->exchange(
      rank_, "broadcast", *blob,
      [](std::vector<std::string>& in, std::vector<std::string>* outs) {
        for (auto& o : *outs) o = in[0];
        return Status::OK();
      },
      &out));
  *blob = std::move(out);
  return Status::OK();
}

// ------------------------------------------------------------------------------------------

std::vector<Response> RunResult::all_responses(int rank) const {
  std::vector<Response> out;
  for (const auto& rec : records[static_cast<size_t>(rank)]) {
    out.insert(out.end(), rec.result.responses.begin(), rec.result.responses.end());
  }
  return out;
}

int RunResult::cycle_of(int rank, const std::string& name) const {
  const auto& recs = records[static_cast<size_t>(rank)];
  for (size_t c = 0; c < recs.size(); ++c) {
    for (const auto& r : recs[c].result.responses) {
      if (r.name == name) return static_cast<int>(c);
    }
  }
  return -1;
}

RunResult run_script(const Script& script) {
  const int n = script.ranks;
  RunResult res;
  res.hub = std::make_unique<InProcessHub>(n);
  res.records.resize(static_cast<size_t>(n));
  std::vector<int> current_cycle(static_cast<size_t>(n), 0);
  for (int r = 0; r < n; ++r) {
    res.planes.push_back(std::make_unique<InProcessControlPlane>(res.hub.get(), r));
    Controller::Clock clock;
    if (script.clock_at) {
      // Each rank reads the time of the cycle it is in: deterministic, no shared state.
      int* cyc = &current_cycle[static_cast<size_t>(r)];
      auto at = script.clock_at;
      clock = [cyc, at] { return at(*cyc); };
    }
    res.controllers.push_back(
        std::make_unique<Controller>(res.planes.back().get(), script.options, clock));
    if (script.response_check) res.controllers.back()->set_response_check(script.response_check(r));
  }
  std::mutex err_mu;
  auto fail = [&](int rank, const std::string& what) {
    {
      std::lock_guard<std::mutex> lock(err_mu);
      res.errors.push_back("rank " + std::to_string(rank) + ": " + what);
    }
    res.hub->abort("rank " + std::to_string(rank) + " failed: " + what);
  };
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      Controller& c = *res.controllers[static_cast<size_t>(r)];
      auto& recs = res.records[static_cast<size_t>(r)];
      try {
        for (int cyc = 0; cyc < script.cycles; ++cyc) {
          current_cycle[static_cast<size_t>(r)] = cyc;
          CycleInput in = script.input ? script.input(r, cyc) : CycleInput();
          for (Request& q : in.requests) q.rank = r;
          CycleRecord rec;
          c.set_votes(in.votes);
          Status st = c.run_cycle(std::move(in.requests), in.shutdown, &rec.result);
          if (!st.ok()) {
            fail(r, "cycle " + std::to_string(cyc) + ": " + st.message());
            return;
          }
          rec.full_cycles = c.full_cycles();
          rec.cache_size = c.cache().size();
          rec.cache_bits = c.cache().num_bits();
          rec.has_pending = c.has_pending();
          rec.stall_report = c.last_stall_report();
          // Hand a copy back, as the runtime hands back the executed responses: the next
          // cycles reuse these (Controller::recycle), and every test checks that reuse.
          c.recycle(std::vector<Response>(rec.result.responses),
                    std::vector<LocalHit>(rec.result.hits));
          const bool stop = script.stop_on_shutdown && rec.result.shutdown;
          recs.push_back(std::move(rec));
          if (stop) return;
        }
      } catch (const std::exception& e) {
        fail(r, std::string("exception: ") + e.what());
      } catch (...) {
        fail(r, "unknown exception");
      }
    });
  }
  for (auto& t : threads) t.join();
  // Ranks must stop together: one that stopped early would have hung the others.
  for (int r = 1; r < n && res.errors.empty(); ++r) {
    if (res.records[static_cast<size_t>(r)].size() != res.records[0].size()) {
      res.errors.push_back("rank " + std::to_string(r) + " ran " +
                           std::to_string(res.records[static_cast<size_t>(r)].size()) +
                           " cycles, rank 0 ran " + std::to_string(res.records[0].size()));
    }
  }
  return res;
}

std::string describe(const std::vector<Response>& responses) {
  std::ostringstream os;
  for (size_t i = 0; i < responses.size(); ++i) {
    const Response& r = responses[i];
    os << (i ? "; " : "") << op_type_name(r.op) << " '" << r.name << "'";
    if (!r.ok()) os << " ERROR(" << r.error << ")";
  }
  return os.str();
}

}  // namespace testing
}  // namespace hvd
