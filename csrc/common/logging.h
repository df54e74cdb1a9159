// Copyright horovod_cpp authors. Logging: one line per message, tagged host:pid:tid and rank.
//
// The level comes from HOROVOD_LOG_LEVEL through Config (set_log_level is called by init());
// messages go to stderr. Usage: HVD_LOG(kWarning) << "tensor " << name << " stalled";
#pragma once

#include <sstream>
#include <string>

namespace hvd {

enum class LogLevel : int { kTrace = 0, kDebug = 1, kInfo = 2, kWarning = 3, kError = 4, kFatal = 5 };

/// Parses "trace", "debug", "info", "warning", "error", "fatal" (case-insensitive); false if
/// `text` is none of them.
bool parse_log_level(const std::string& text, LogLevel* out);

void set_log_level(LogLevel level);
LogLevel log_level();
/// The rank printed in every line from now on (-1 before init).
void set_log_rank(int rank);

/// A duration for messages, as short as it is exact: 5 -> "5 s", 0.25 -> "0.25 s".
std::string seconds_str(double seconds);

namespace detail {
class LogLine {
 public:
  LogLine(LogLevel level, const char* file, int line);
  ~LogLine();
  std::ostringstream& stream() { return stream_; }

 private:
  LogLevel level_;
  std::ostringstream stream_;
};
}  // namespace detail

}  // namespace hvd

#define HVD_LOG(level)                                                  \
  if (::hvd::LogLevel::level < ::hvd::log_level()) {                    \
  } else                                                                \
    ::hvd::detail::LogLine(::hvd::LogLevel::level, __FILE__, __LINE__).stream()
