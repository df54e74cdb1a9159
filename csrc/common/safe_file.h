// Copyright horovod_cpp authors. Opening the files the library writes at a path the user names.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

namespace hvd {

/// Opens `path` for writing like fopen(path, "w") (created with 0666 less the umask, or
/// truncated), but refuses a symbolic link as its last component (O_NOFOLLOW): a path in a
/// folder others can write to (a fixed name in /tmp) that another user created beforehand as
/// a link cannot make this process overwrite the link's target. Returns null and sets `*error`
/// (the path and the reason) when it cannot open it.
inline std::FILE* open_for_write_nofollow(const std::string& path, std::string* error) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0666);
  if (fd < 0) {
    const int e = errno;
    *error = "cannot open '" + path + "' for writing: " +
             (e == ELOOP ? std::string("it is a symbolic link (refused)") : std::strerror(e));
    return nullptr;
  }
  std::FILE* f = ::fdopen(fd, "w");
  if (!f) {
    *error = "cannot open '" + path + "' for writing: " + std::strerror(errno);
    ::close(fd);
  }
  return f;
}

}  // namespace hvd
