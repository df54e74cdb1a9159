// Copyright horovod_cpp authors.
#include "core/timeline.h"

#include <unistd.h>

#include <chrono>
#include <sstream>

#include "common/clock.h"
#include "common/json_escape.h"
#include "common/safe_file.h"

namespace hvd {

int64_t now_us() { return steady_us(); }

Timeline::~Timeline() { stop(); }

Status Timeline::start(const std::string& path, bool mark_cycles) {
  if (rank_ != 0) return Status::OK();
  std::lock_guard<std::mutex> ctl(control_mu_);
  if (enabled()) return Status::InvalidArgument("start_timeline: a timeline is already being written");
  std::string error;
  std::FILE* f = open_for_write_nofollow(path, &error);
  if (!f) return Status::InvalidArgument("start_timeline: " + error);
  std::fputs("[\n]", f);
  std::fflush(f);
  file_ = f;
  first_event_ = true;
  mark_cycles_.store(mark_cycles, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_writer_ = false;
    tracks_.clear();
    pending_.clear();
  }
  thread_ = std::thread([this] { writer(); });
  enabled_ = true;
  return Status::OK();
}

void Timeline::stop() {
  std::lock_guard<std::mutex> ctl(control_mu_);
  if (!thread_.joinable()) return;
  enabled_ = false;
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_writer_ = true;
    cv_.notify_one();
  }
  thread_.join();
  std::fclose(file_);
  file_ = nullptr;
}

int Timeline::track_of(const std::string& tensor) {
  auto it = tracks_.find(tensor);
  if (it != tracks_.end()) return it->second;
  const int id = static_cast<int>(tracks_.size()) + 1;
  tracks_.emplace(tensor, id);
  pending_.push_back("{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":" + std::to_string(id) +
                     ",\"args\":{\"name\":\"" + json_escape(tensor) + "\"}}");
  return id;
}

void Timeline::phase(const std::string& tensor, const char* phase, int64_t begin_us,
                     int64_t end_us, const std::string& args) {
  if (!enabled()) return;
  std::lock_guard<std::mutex> lk(mu_);
  const int tid = track_of(tensor);
  std::string e = "{\"name\":\"" + std::string(phase) + "\",\"ph\":\"X\",\"pid\":0,\"tid\":" +
                  std::to_string(tid) + ",\"ts\":" + std::to_string(begin_us) +
                  ",\"dur\":" + std::to_string(end_us > begin_us ? end_us - begin_us : 0);
  if (!args.empty()) e += ",\"args\":{" + args + "}";
  e += "}";
  pending_.push_back(std::move(e));
  cv_.notify_one();
}

void Timeline::instant(const std::string& tensor, const std::string& what, int64_t at_us) {
  if (!enabled()) return;
  std::lock_guard<std::mutex> lk(mu_);
  const int tid = track_of(tensor);
  pending_.push_back("{\"name\":\"" + json_escape(what) + "\",\"ph\":\"i\",\"s\":\"t\",\"pid\":0,\"tid\":" +
                     std::to_string(tid) + ",\"ts\":" + std::to_string(at_us) + "}");
  cv_.notify_one();
}

void Timeline::cycle(int process_set, uint64_t cycle, int64_t at_us) {
  if (!enabled() || !mark_cycles()) return;
  std::lock_guard<std::mutex> lk(mu_);
  const int tid = track_of("cycles (process set " + std::to_string(process_set) + ")");
  pending_.push_back("{\"name\":\"CYCLE " + std::to_string(cycle) +
                     "\",\"ph\":\"i\",\"s\":\"t\",\"pid\":0,\"tid\":" + std::to_string(tid) +
                     ",\"ts\":" + std::to_string(at_us) + "}");
  cv_.notify_one();
}

void Timeline::writer() {
  std::vector<std::string> batch;
  while (true) {
    bool last;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait_for(lk, std::chrono::milliseconds(100), [this] { return !pending_.empty() || stop_writer_; });
      batch.swap(pending_);
      last = stop_writer_;
    }
    if (!batch.empty()) {
      // Overwrite the closing "]", append, close again: valid JSON after every flush.
      std::fseek(file_, -1, SEEK_END);
      std::string out;
      for (auto& e : batch) {
        out += first_event_ ? "" : ",\n";
        out += e;
        first_event_ = false;
      }
      out += "\n]";
      std::fwrite(out.data(), 1, out.size(), file_);
      std::fflush(file_);
      batch.clear();
    }
    if (last) return;
  }
}

}  // namespace hvd
