// Copyright horovod_cpp authors. Runs a fuzz target over files without libFuzzer.
//
// Linked with each target in ordinary (gcc, sanitizer or not) builds, so CTest replays the
// checked-in seed corpus and every past crash on each test run: `<target>_replay DIR|FILE...`.
// A failing input aborts (the target's invariant checks) and the test fails.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

int run_file(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) {
    std::fprintf(stderr, "cannot read %s\n", p.c_str());
    return 1;
  }
  std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::fprintf(stderr, "running %s (%zu bytes)\n", p.c_str(), bytes.size());
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int failures = 0, runs = 0;
  for (int i = 1; i < argc; ++i) {
    std::filesystem::path arg(argv[i]);
    if (std::filesystem::is_directory(arg)) {
      for (const auto& e : std::filesystem::directory_iterator(arg)) {
        if (e.is_regular_file() && e.path().filename().string()[0] != '.') {
          failures += run_file(e.path());
          ++runs;
        }
      }
    } else if (std::filesystem::exists(arg)) {
      failures += run_file(arg);
      ++runs;
    }
  }
  std::printf("%d inputs ran, %d unreadable\n", runs, failures);
  return failures == 0 && runs > 0 ? 0 : 1;
}
