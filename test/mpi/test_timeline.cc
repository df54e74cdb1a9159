// Copyright horovod_cpp authors. The timeline file: valid JSON while and after it is written,
// with every tensor's phases.
#include <mpi.h>
#include <unistd.h>

#include <cstdio>

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "test_util.h"
#include "timeline_util.h"

using hvd::DataType;
using namespace hvdtest;

TEST_CASE("timeline: HOROVOD_TIMELINE writes a Chrome trace with every phase", "[timeline]") {
  const std::string path = "/tmp/hvd_timeline_test_" + std::to_string(getppid()) + ".json";
  {
    // The MPI path, whose fused reductions show the copy-in/out phases.
    ScopedEnv env({{"HOROVOD_TIMELINE", path}, {"HOROVOD_TIMELINE_MARK_CYCLES", "1"},
                   {"HOROVOD_CPP_SHM", "0"}});
    Session s;
    const int me = hvd::rank();
    std::vector<std::vector<float>> data(4, std::vector<float>(16, 1.0f));
    for (int step = 0; step < 2; ++step) {
      // A group runs in one cycle, so its tensors are fused: every phase appears.
      std::vector<std::string> names;
      std::vector<hvd::TensorView> views;
      for (int k = 0; k < 4; ++k) {
        names.push_back("tl.t" + std::to_string(k));
        views.emplace_back(data[k].data(), DataType::kFloat32, std::vector<int64_t>{16});
      }
      wait_ok(hvd::grouped_allreduce_async(names, views));
    }
    int64_t x = me;
    hvd::allgather("tl.gather", hvd::TensorView(&x, DataType::kInt64, {1}));
    if (me == 0) {
      // Valid JSON while it is still being written.
      usleep(300 * 1000);
      CHECK_NOTHROW(read_json(path));
    }
  }
  int world_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  if (world_rank == 0) {
    nlohmann::json events;
    REQUIRE_NOTHROW(events = read_json(path));
    REQUIRE(events.is_array());
    for (int k = 0; k < 4; ++k) {
      const auto p = phases_of(events, "tl.t" + std::to_string(k));
      INFO("phases of tl.t" << k << ": " << p.size());
      CHECK(p.count("QUEUE") == 1);
      CHECK(p.count("NEGOTIATE") == 1);
      CHECK(p.count("MEMCPY_IN_FUSION_BUFFER") == 1);
      CHECK(p.count("MPI_ALLREDUCE") == 1);
      CHECK(p.count("MEMCPY_OUT_FUSION_BUFFER") == 1);
      bool rank_ready = false;
      for (const auto& name : p) rank_ready = rank_ready || name.find("ready") != std::string::npos;
      CHECK(rank_ready);
    }
    CHECK(phases_of(events, "tl.gather").count("MPI_allgather") == 1);
    bool cycles = false;
    for (const auto& e : events) cycles = cycles || e.value("name", "").rfind("CYCLE", 0) == 0;
    CHECK(cycles);
    for (const auto& e : events) {
      if (e.value("ph", "") == "X") {
        CHECK(e["dur"].get<int64_t>() >= 0);
      }
    }
    std::remove(path.c_str());
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_CASE("timeline: start_timeline / stop_timeline at run time", "[timeline]") {
  const std::string path = "/tmp/hvd_timeline_rt_" + std::to_string(getppid()) + ".json";
  Session s;
  hvd::start_timeline(path);
  float x = 1.0f;
  hvd::allreduce("tl.rt", hvd::TensorView(&x, DataType::kFloat32, {1}));
  hvd::stop_timeline();
  // Rank 0 records the other ranks' requests as they arrive: no rank may submit the next
  // tensor before rank 0 has stopped its timeline.
  MPI_Barrier(MPI_COMM_WORLD);
  float y = 1.0f;
  hvd::allreduce("tl.after_stop", hvd::TensorView(&y, DataType::kFloat32, {1}));
  if (hvd::rank() == 0) {
    nlohmann::json events;
    REQUIRE_NOTHROW(events = read_json(path));
    const auto p = phases_of(events, "tl.rt");
    CHECK(p.count("MPI_allreduce") + p.count("SHM_ALLREDUCE") + p.count("HIER_allreduce") == 1);  // whichever path ran
    CHECK(p.count("NEGOTIATE") == 1);
    CHECK(phases_of(events, "tl.after_stop").empty());
    std::remove(path.c_str());
  }
}
