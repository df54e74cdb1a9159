// Copyright horovod_cpp authors.
#include "transport/shm/shm_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace hvd {

Status create_segment(const std::string& name, size_t bytes, const std::string& enospc_hint,
                      void** out) {
  const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) return Status::Backend("shm_open(" + name + "): " + std::strerror(errno));
  if (const int e = posix_fallocate(fd, 0, static_cast<off_t>(bytes)); e != 0) {
    close(fd);
    shm_unlink(name.c_str());
    return Status::Backend("reserving " + std::to_string(bytes) + " bytes for " + name +
                           " in /dev/shm failed: " + std::strerror(e) +
                           (e == ENOSPC ? enospc_hint : std::string()));
  }
  // MAP_POPULATE: every page is mapped now, not at its first touch in a collective (rounds
  // move through the whole segment; a first touch costs a fault per page and process).
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  const int mmap_errno = errno;
  close(fd);
  if (p == MAP_FAILED) {
    shm_unlink(name.c_str());
    return Status::Backend("mmap(" + name + "): " + std::strerror(mmap_errno));
  }
  *out = p;
  return Status::OK();
}

Status open_segment(const std::string& name, size_t bytes, void** out) {
  const int fd = shm_open(name.c_str(), O_RDWR, 0600);
  if (fd < 0) return Status::Backend("shm_open(" + name + "): " + std::strerror(errno));
  // Checked before mapping: pages past the end of a short file would be a SIGBUS at their
  // first touch, and an object of another user's is not the one our rank created.
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const int e = errno;
    close(fd);
    return Status::Backend("fstat(" + name + "): " + std::strerror(e));
  }
  if (st.st_uid != geteuid() || static_cast<uint64_t>(st.st_size) < bytes) {
    close(fd);
    return Status::Backend("the shared-memory object " + name + " is not the one expected (" +
                           std::to_string(static_cast<long long>(st.st_size)) + " bytes of uid " +
                           std::to_string(st.st_uid) + ", expected at least " +
                           std::to_string(bytes) + " bytes of uid " + std::to_string(geteuid()) +
                           ")");
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  const int mmap_errno = errno;
  close(fd);
  if (p == MAP_FAILED) return Status::Backend("mmap(" + name + "): " + std::strerror(mmap_errno));
  *out = p;
  return Status::OK();
}

}  // namespace hvd
