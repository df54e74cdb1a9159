// Copyright horovod_cpp authors. The timeline and the autotune log refuse a symbolic link at
// the path they write (common/safe_file.h): a link another user placed at a fixed path in
// /tmp must not make the library overwrite the link's target.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "common/config.h"
#include "core/timeline.h"
#include "tuning/autotuner.h"

using namespace hvd;

namespace {

// A fresh folder holding "victim" (known content) and "link" -> victim; removed at the end.
struct LinkedFolder {
  std::string dir, victim, link;
  LinkedFolder() {
    char tmpl[] = "/tmp/hvd_safe_files.XXXXXX";
    REQUIRE(mkdtemp(tmpl) != nullptr);
    dir = tmpl;
    victim = dir + "/victim";
    link = dir + "/link";
    std::ofstream(victim) << "precious";
    REQUIRE(symlink(victim.c_str(), link.c_str()) == 0);
  }
  ~LinkedFolder() {
    std::remove(link.c_str());
    std::remove(victim.c_str());
    std::remove((dir + "/plain").c_str());
    rmdir(dir.c_str());
  }
  std::string victim_content() const {
    std::ifstream f(victim);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
  }
};

}  // namespace

TEST_CASE("the timeline refuses a symbolic link and leaves its target alone", "[safe_files]") {
  LinkedFolder d;
  Timeline t(0);
  const Status st = t.start(d.link, false);
  REQUIRE_FALSE(st.ok());
  CHECK_THAT(st.message(), Catch::Contains("'" + d.link + "'"));
  CHECK_THAT(st.message(), Catch::Contains("symbolic link"));
  CHECK_FALSE(t.enabled());
  CHECK(d.victim_content() == "precious");
  // A plain path still works.
  REQUIRE(t.start(d.dir + "/plain", false).ok());
  t.stop();
  std::ifstream plain(d.dir + "/plain");
  std::string first;
  plain >> first;
  CHECK(first == "[");
}

TEST_CASE("the autotune log refuses a symbolic link; tuning goes on", "[safe_files]") {
  LinkedFolder d;
  Config c;
  c.autotune = true;
  c.autotune_log = d.link;
  c.autotune_steps_per_sample = 1;
  c.autotune_warmup_samples = 0;
  c.autotune_samples_per_trial = 1;
  int applied = 0;
  Autotuner tuner(
      c, true, [](double*, double*) { return Status::OK(); }, [&](int64_t, double) { ++applied; });
  for (int k = 0; k < 4; ++k) REQUIRE(tuner.after_cycle(1 << 20, 0.01 * k).ok());
  CHECK(applied > 0);  // the search ran without its log
  CHECK(d.victim_content() == "precious");
  // A plain path gets the log.
  c.autotune_log = d.dir + "/plain";
  Autotuner logged(
      c, true, [](double*, double*) { return Status::OK(); }, [](int64_t, double) {});
  std::ifstream plain(d.dir + "/plain");
  std::string header;
  std::getline(plain, header);
  CHECK(header == "trial,fusion_threshold_mb,cycle_time_ms,score_mb_per_s,best");
}
