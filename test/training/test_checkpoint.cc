// Copyright horovod_cpp authors. save_checkpoint / load_checkpoint (local, no MPI): a save
// that dies or fails halfway keeps the previous checkpoint, a link at the path is replaced
// and not followed, and a file whose header claims more than it holds is refused before
// anything is allocated.
#include <dirent.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "horovod_cpp/training.h"

namespace {

// A fresh folder, removed with everything in it at the end.
struct Folder {
  std::string dir;
  Folder() {
    char tmpl[] = "/tmp/hvd_ckpt.XXXXXX";
    REQUIRE(mkdtemp(tmpl) != nullptr);
    dir = tmpl;
  }
  ~Folder() {
    for (const std::string& name : names()) std::remove((dir + "/" + name).c_str());
    rmdir(dir.c_str());
  }
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    if (DIR* d = opendir(dir.c_str())) {
      while (dirent* e = readdir(d)) {
        if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) {
          out.push_back(e->d_name);
        }
      }
      closedir(d);
    }
    return out;
  }
};

// A model of one parameter of `n` floats, every element `value` + its index.
hvd::ParameterList model(int64_t n, float value) {
  std::vector<float> init(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) init[static_cast<size_t>(i)] = value + static_cast<float>(i);
  return {hvd::make_parameter("w", {n}, init)};
}

void check_loaded(const std::string& path, int64_t n, float value) {
  hvd::ParameterList got = model(n, -1.0f);
  hvd::load_checkpoint(path, got);
  const std::vector<float>& v = got[0]->value();
  for (int64_t i = 0; i < n; ++i) {
    if (v[static_cast<size_t>(i)] != value + static_cast<float>(i)) {
      FAIL("element " << i << " is " << v[static_cast<size_t>(i)] << ", expected "
                      << value + static_cast<float>(i));
    }
  }
}

// Runs `save` in a child process whose files may not grow past 64 KiB (RLIMIT_FSIZE): with
// SIGXFSZ at its default the child dies mid-write (a crash); ignored, the write fails.
int save_limited(bool die, const std::string& path, const hvd::ParameterList& params) {
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    signal(SIGXFSZ, die ? SIG_DFL : SIG_IGN);
    rlimit lim{64 << 10, 64 << 10};
    setrlimit(RLIMIT_FSIZE, &lim);
    try {
      hvd::save_checkpoint(path, params);
    } catch (const std::runtime_error& e) {
      const bool named = std::string(e.what()).find("'" + path + "'") != std::string::npos;
      _exit(named ? 3 : 4);  // 3: failed with an error naming the path
    }
    _exit(0);
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  return status;
}

}  // namespace

TEST_CASE("a save that dies or fails halfway keeps the previous checkpoint", "[checkpoint]") {
  Folder d;
  const std::string path = d.dir + "/model.ckpt";
  const int64_t small = 1000, big = 1 << 20;  // 4 MiB: far past the child's 64 KiB
  hvd::save_checkpoint(path, model(small, 1.0f));
  check_loaded(path, small, 1.0f);

  SECTION("killed mid-write (SIGXFSZ)") {
    const int status = save_limited(true, path, model(big, 2.0f));
    REQUIRE(WIFSIGNALED(status));
    CHECK(WTERMSIG(status) == SIGXFSZ);
  }
  SECTION("the write fails (EFBIG): an error naming the path, no temporary file left") {
    const int status = save_limited(false, path, model(big, 2.0f));
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 3);
    CHECK(d.names() == std::vector<std::string>{"model.ckpt"});
  }
  check_loaded(path, small, 1.0f);
  // A save that completes replaces it.
  hvd::save_checkpoint(path, model(small, 5.0f));
  check_loaded(path, small, 5.0f);
}

TEST_CASE("a save through a symbolic link replaces the link, not its target", "[checkpoint]") {
  Folder d;
  const std::string target = d.dir + "/victim", link = d.dir + "/model.ckpt";
  std::ofstream(target) << "precious";
  REQUIRE(symlink(target.c_str(), link.c_str()) == 0);
  hvd::save_checkpoint(link, model(10, 3.0f));
  std::ifstream t(target);
  std::stringstream s;
  s << t.rdbuf();
  CHECK(s.str() == "precious");
  struct stat st;
  REQUIRE(lstat(link.c_str(), &st) == 0);
  CHECK(S_ISREG(st.st_mode));
  check_loaded(link, 10, 3.0f);
}

namespace {

// A checkpoint header of one float32 entry "param:w" with `dims`, then `data_bytes` zeros.
std::string crafted(uint64_t count, const std::vector<int64_t>& dims, size_t data_bytes) {
  std::string b("HVDCKPT1", 8);
  auto put = [&](const void* p, size_t n) { b.append(static_cast<const char*>(p), n); };
  put(&count, 8);
  const std::string name = "param:w";
  const uint32_t nlen = static_cast<uint32_t>(name.size());
  put(&nlen, 4);
  b += name;
  const uint8_t dtype = static_cast<uint8_t>(hvd::DataType::kFloat32);
  put(&dtype, 1);
  const uint32_t ndim = static_cast<uint32_t>(dims.size());
  put(&ndim, 4);
  for (int64_t x : dims) put(&x, 8);
  b.append(data_bytes, '\0');
  return b;
}

}  // namespace

TEST_CASE("load refuses sizes past the file's end before allocating", "[checkpoint]") {
  Folder d;
  const std::string path = d.dir + "/bad.ckpt";
  auto load_error = [&](const std::string& bytes) {
    std::ofstream(path, std::ios::binary) << bytes;
    try {
      hvd::load_checkpoint(path, model(4, 0.0f));
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string("(loaded)");
  };
  // A shape of 2^40 x 2^20 floats (2^62 bytes), with 16 bytes behind it.
  std::string m = load_error(crafted(1, {1ll << 40, 1ll << 20}, 16));
  CHECK_THAT(m, Catch::Contains("'" + path + "' is truncated or malformed"));
  CHECK_THAT(m, Catch::Contains("entry 'param:w' claims float32 [1099511627776,1048576]"));
  CHECK_THAT(m, Catch::Contains("16 bytes left"));
  // A product past int64.
  m = load_error(crafted(1, {1ll << 62, 1ll << 62}, 0));
  CHECK_THAT(m, Catch::Contains("entry 'param:w' claims"));
  // 2^60 entries announced.
  m = load_error(crafted(1ull << 60, {4}, 16));
  CHECK_THAT(m, Catch::Contains("the header announces 1152921504606846976 entries"));
  // A real checkpoint cut short.
  hvd::save_checkpoint(path, model(4, 1.0f));
  std::ifstream whole(path, std::ios::binary);
  std::stringstream s;
  s << whole.rdbuf();
  const std::string full = s.str();
  for (size_t cut : {full.size() - 1, full.size() - 16, size_t{20}}) {
    INFO("cut to " << cut << " of " << full.size() << " bytes");
    CHECK_THAT(load_error(full.substr(0, cut)), Catch::Contains("truncated"));
  }
  CHECK(load_error(full) == "(loaded)");
}
