// Copyright horovod_cpp authors.
#include "common/logging.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdio>
#include <cstring>

namespace hvd {
namespace {
std::atomic<int> g_level{static_cast<int>(LogLevel::kWarning)};
std::atomic<int> g_rank{-1};

const char* level_tag(LogLevel l) {
  switch (l) {
    case LogLevel::kTrace: return "TRACE";
    case LogLevel::kDebug: return "DEBUG";
    case LogLevel::kInfo: return "INFO";
    case LogLevel::kWarning: return "WARNING";
    case LogLevel::kError: return "ERROR";
    case LogLevel::kFatal: return "FATAL";
  }
  return "?";
}
}  // namespace

bool parse_log_level(const std::string& text, LogLevel* out) {
  std::string t = text;
  std::transform(t.begin(), t.end(), t.begin(), [](unsigned char c) { return std::tolower(c); });
  static const struct { const char* name; LogLevel level; } kNames[] = {
      {"trace", LogLevel::kTrace}, {"debug", LogLevel::kDebug},     {"info", LogLevel::kInfo},
      {"warning", LogLevel::kWarning}, {"warn", LogLevel::kWarning}, {"error", LogLevel::kError},
      {"fatal", LogLevel::kFatal}};
  for (const auto& n : kNames) {
    if (t == n.name) {
      *out = n.level;
      return true;
    }
  }
  return false;
}

void set_log_level(LogLevel level) { g_level = static_cast<int>(level); }
LogLevel log_level() { return static_cast<LogLevel>(g_level.load()); }
void set_log_rank(int rank) { g_rank = rank; }

std::string seconds_str(double seconds) {
  std::ostringstream os;
  os << seconds << " s";  // default precision: 6 significant digits, no trailing zeros
  return os.str();
}

namespace detail {
LogLine::LogLine(LogLevel level, const char* file, int line) : level_(level) {
  static const std::string host = [] {
    char buf[256] = {0};
    gethostname(buf, sizeof(buf) - 1);
    return std::string(buf);
  }();
  const char* base = std::strrchr(file, '/');
  stream_ << "[horovod_cpp " << level_tag(level) << " " << host << ":" << getpid() << ":"
          << static_cast<long>(syscall(SYS_gettid)) << " rank " << g_rank.load() << " "
          << (base ? base + 1 : file) << ":" << line << "] ";
}
LogLine::~LogLine() {
  stream_ << '\n';
  const std::string s = stream_.str();
  std::fwrite(s.data(), 1, s.size(), stderr);
  (void)level_;
}
}  // namespace detail
}  // namespace hvd
