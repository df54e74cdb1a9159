// Copyright horovod_cpp authors. save_checkpoint / load_checkpoint of the training API.
//
// Format (native byte order): "HVDCKPT1", uint64 entry count, then per entry: uint32 name
// length, name, uint8 dtype, uint32 ndim, int64 dims[ndim], raw data. Entry names are
// "param:<name>", "state:<name>" and "hyper:<name>" (a float64 of shape [1]).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "horovod_cpp/training.h"

namespace hvd {
namespace {

const char kMagic[8] = {'H', 'V', 'D', 'C', 'K', 'P', 'T', '1'};

struct Entry {
  DataType dtype;
  Shape shape;
  std::vector<unsigned char> data;
};

// Writes into a FILE* (one opened on a fresh temporary file): every failure is kept by the
// stream's error flag and checked once at the end.
template <typename T>
void put(std::FILE* f, const T& v) {
  std::fwrite(&v, sizeof(T), 1, f);
}

template <typename T>
void get(std::ifstream& f, T& v, const std::string& path) {
  f.read(reinterpret_cast<char*>(&v), sizeof(T));
  if (!f) throw std::runtime_error("load_checkpoint: '" + path + "' is truncated or malformed");
}

void write_entry(std::FILE* f, const std::string& name, DataType dtype, const Shape& shape,
                 const void* data) {
  put<uint32_t>(f, static_cast<uint32_t>(name.size()));
  std::fwrite(name.data(), 1, name.size(), f);
  put<uint8_t>(f, static_cast<uint8_t>(dtype));
  put<uint32_t>(f, static_cast<uint32_t>(shape.size()));
  for (int64_t d : shape) put<int64_t>(f, d);
  std::fwrite(data, 1, static_cast<size_t>(num_elements(shape)) * dtype_size(dtype), f);
}

std::string io_error(const std::string& what, const std::string& path) {
  return "save_checkpoint: " + what + " '" + path + "' failed: " + std::strerror(errno);
}

// The folder of `path` ("." when it names none), whose entry the rename changes.
std::string folder_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace

// Written to a fresh temporary file in the same folder (mkstemp: O_EXCL, so never through a
// link someone placed there), flushed to disk, then renamed over `path`: a crash or a failed
// write at any point leaves the previous checkpoint whole, and a link at `path` is replaced,
// not followed.
void save_checkpoint(const std::string& path, const ParameterList& params, Optimizer* optimizer) {
  std::string tmp = path + ".tmp.XXXXXX";
  const int fd = ::mkstemp(&tmp[0]);
  if (fd < 0) throw std::runtime_error(io_error("creating a temporary file next to", path));
  std::FILE* f = ::fdopen(fd, "wb");
  if (!f) {
    const std::string e = io_error("opening a temporary file for", path);
    ::close(fd);
    ::unlink(tmp.c_str());
    throw std::runtime_error(e);
  }
  // mkstemp makes the file 0600: keep the mode of the checkpoint it replaces, else 0644 (what
  // the usual umask 022 gave before).
  struct stat old;
  const bool replaces = ::lstat(path.c_str(), &old) == 0 && S_ISREG(old.st_mode);
  ::fchmod(fd, replaces ? (old.st_mode & 0777) : 0644);
  auto fail = [&](const std::string& what) {
    const std::string e = io_error(what, path);
    if (f) std::fclose(f);
    ::unlink(tmp.c_str());
    throw std::runtime_error(e);
  };
  std::vector<StateEntry> st;
  std::vector<std::pair<std::string, double*>> hp;
  if (optimizer) {
    st = optimizer->state();
    hp = optimizer->hyperparameters();
  }
  std::fwrite(kMagic, 1, 8, f);
  put<uint64_t>(f, static_cast<uint64_t>(params.size() + st.size() + hp.size()));
  for (const auto& p : params) {
    write_entry(f, "param:" + p->name(), DataType::kFloat32, p->shape(), p->value().data());
  }
  for (const auto& e : st) write_entry(f, "state:" + e.name, e.view.dtype, e.view.shape, e.view.data);
  for (const auto& kv : hp) write_entry(f, "hyper:" + kv.first, DataType::kFloat64, Shape{1}, kv.second);
  if (std::fflush(f) != 0 || std::ferror(f)) fail("writing");
  if (::fsync(::fileno(f)) != 0) fail("syncing");
  const int closed = std::fclose(f);
  f = nullptr;
  if (closed != 0) fail("closing");
  if (::rename(tmp.c_str(), path.c_str()) != 0) fail("renaming the temporary file to");
  // The rename itself reaches the disk with the folder's entry.
  const int dir = ::open(folder_of(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    ::fsync(dir);
    ::close(dir);
  }
}

void load_checkpoint(const std::string& path, const ParameterList& params, Optimizer* optimizer) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("load_checkpoint: cannot open '" + path + "'");
  // Every size the file claims is checked against what is left of it before anything is
  // allocated: a truncated or corrupted header cannot make this allocate more than the file.
  f.seekg(0, std::ios::end);
  const std::streamoff file_size = f.tellg();
  f.seekg(0, std::ios::beg);
  if (!f || file_size < 0) throw std::runtime_error("load_checkpoint: cannot open '" + path + "'");
  auto left = [&]() -> uint64_t {
    const std::streamoff at = f.tellg();
    return at < 0 || at > file_size ? 0 : static_cast<uint64_t>(file_size - at);
  };
  auto truncated = [&](const std::string& what) {
    return std::runtime_error("load_checkpoint: '" + path + "' is truncated or malformed: " + what +
                              " (" + std::to_string(left()) + " bytes left of " +
                              std::to_string(file_size) + ")");
  };
  char magic[8];
  f.read(magic, 8);
  if (!f || std::memcmp(magic, kMagic, 8) != 0) {
    throw std::runtime_error("load_checkpoint: '" + path + "' is not a horovod_cpp checkpoint");
  }
  uint64_t count = 0;
  get(f, count, path);
  constexpr uint64_t kMinEntryBytes = 4 + 1 + 4;  // name length, dtype, ndim
  if (count > left() / kMinEntryBytes) {
    throw truncated("the header announces " + std::to_string(count) + " entries");
  }
  std::map<std::string, Entry> entries;
  for (uint64_t i = 0; i < count; ++i) {
    uint32_t nlen = 0;
    get(f, nlen, path);
    if (nlen > (1u << 20)) throw std::runtime_error("load_checkpoint: '" + path + "' is malformed");
    if (nlen > left()) throw truncated("an entry name of " + std::to_string(nlen) + " bytes");
    std::string name(nlen, '\0');
    f.read(&name[0], nlen);
    uint8_t dt = 0;
    uint32_t ndim = 0;
    get(f, dt, path);
    get(f, ndim, path);
    if (dt > static_cast<uint8_t>(kLastDataType) || ndim > 64) {
      throw std::runtime_error("load_checkpoint: '" + path + "' is malformed");
    }
    Entry e;
    e.dtype = static_cast<DataType>(dt);
    e.shape.resize(ndim);
    for (auto& d : e.shape) {
      get(f, d, path);
      if (d < 0) throw std::runtime_error("load_checkpoint: '" + path + "' is malformed");
    }
    // num_elements saturates, so a product past int64 is caught as "more than is left" too.
    const int64_t n = num_elements(e.shape);
    const uint64_t esize = dtype_size(e.dtype);
    if (static_cast<uint64_t>(n) > left() / esize) {
      throw truncated("entry '" + name + "' claims " + dtype_name(e.dtype) + " " +
                      shape_str(e.shape));
    }
    e.data.resize(static_cast<size_t>(n) * esize);
    f.read(reinterpret_cast<char*>(e.data.data()), static_cast<std::streamsize>(e.data.size()));
    if (!f) throw std::runtime_error("load_checkpoint: '" + path + "' is truncated");
    entries[name] = std::move(e);
  }
  auto take = [&](const std::string& key, DataType dtype, const Shape& shape, void* dst) {
    auto it = entries.find(key);
    if (it == entries.end()) throw std::runtime_error("load_checkpoint: '" + path + "' has no entry '" + key + "'");
    if (it->second.dtype != dtype || it->second.shape != shape) {
      throw std::runtime_error("load_checkpoint: entry '" + key + "' is " + dtype_name(it->second.dtype) + " " +
                               shape_str(it->second.shape) + " in '" + path + "', expected " + dtype_name(dtype) +
                               " " + shape_str(shape));
    }
    std::memcpy(dst, it->second.data.data(), it->second.data.size());
  };
  // Unknown parameters in the file are an error (a checkpoint of another model).
  for (const auto& kv : entries) {
    if (kv.first.rfind("param:", 0) != 0) continue;
    bool known = false;
    for (const auto& p : params) known |= ("param:" + p->name()) == kv.first;
    if (!known) {
      throw std::runtime_error("load_checkpoint: '" + path + "' holds parameter '" + kv.first.substr(6) +
                               "' which the model does not have");
    }
  }
  for (const auto& p : params) take("param:" + p->name(), DataType::kFloat32, p->shape(), p->value().data());
  if (optimizer) {
    for (auto& e : optimizer->state()) take("state:" + e.name, e.view.dtype, e.view.shape, e.view.data);
    for (auto& kv : optimizer->hyperparameters()) take("hyper:" + kv.first, DataType::kFloat64, Shape{1}, kv.second);
  }
}

}  // namespace hvd
