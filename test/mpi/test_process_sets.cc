// Copyright horovod_cpp authors. Process sets under mpirun.
#include <thread>

#include "test_util.h"

using hvd::DataType;
using hvd::ReduceOp;
using namespace hvdtest;

TEST_CASE("process sets: collectives over subsets, added at run time and at init", "[process_sets]") {
  const int n_world = [] { hvd::init(); int n = hvd::size(); hvd::shutdown(); return n; }();
  hvd::InitOptions opts;
  opts.process_sets = {{0, n_world - 1}};  // declared at init: id 1
  hvd::init(opts);
  const int n = hvd::size(), me = hvd::rank();
  hvd::ProcessSet ends{1};
  CHECK(hvd::process_set_ranks(ends) == (n == 2 ? std::vector<int>{0, 1} : std::vector<int>{0, n - 1}));
  // Added at run time: even ranks and odd ranks.
  std::vector<int> evens, odds;
  for (int r = 0; r < n; ++r) (r % 2 ? odds : evens).push_back(r);
  hvd::ProcessSet even = hvd::add_process_set(evens);
  hvd::ProcessSet odd = hvd::add_process_set(odds);
  CHECK(even.id == 2);
  CHECK(odd.id == 3);
  hvd::ProcessSet mine = me % 2 ? odd : even;
  const auto& my_ranks = me % 2 ? odds : evens;
  CHECK(hvd::process_set_size(mine) == static_cast<int>(my_ranks.size()));
  CHECK(hvd::process_set_rank(mine) == me / 2);
  CHECK(hvd::process_set_rank(me % 2 ? even : odd) == -1);

  for (int step = 0; step < 3; ++step) {
    double v = me + 1;
    hvd::AllreduceOptions o;
    o.op = ReduceOp::kSum;
    o.process_set = mine;
    wait_ok(hvd::allreduce_async("ps.sum", hvd::TensorView(&v, DataType::kFloat64, {1}), o));
    double want = 0;
    for (int r : my_ranks) want += r + 1;
    CHECK(v == want);
  }
  // Allgather and broadcast inside the set; the broadcast root is a global rank.
  int64_t x = me;
  hvd::Tensor g = hvd::allgather("ps.gather", hvd::TensorView(&x, DataType::kInt64, {1}), mine);
  REQUIRE(g.numel() == static_cast<int64_t>(my_ranks.size()));
  for (size_t i = 0; i < my_ranks.size(); ++i) CHECK(g.data_as<int64_t>()[i] == my_ranks[i]);
  int64_t b = me * 10;
  hvd::broadcast("ps.bcast", hvd::TensorView(&b, DataType::kInt64, {1}), my_ranks.back(), mine);
  CHECK(b == my_ranks.back() * 10);
  hvd::barrier(mine);

  // The set declared at init.
  if (me == 0 || me == n - 1) {
    float f = 1.0f;
    hvd::AllreduceOptions o;
    o.op = ReduceOp::kSum;
    o.process_set = ends;
    wait_ok(hvd::allreduce_async("ends", hvd::TensorView(&f, DataType::kFloat32, {1}), o));
    CHECK(f == 2.0f);
  }

  // Misuse: a set this rank is not in; a root outside the set; an unknown set.
  float f = 0;
  hvd::AllreduceOptions other;
  other.process_set = me % 2 ? even : odd;
  if (!(me % 2 == 0 && odds.empty())) {
    CHECK_THROWS_WITH(hvd::allreduce_async("ps.other", hvd::TensorView(&f, DataType::kFloat32, {1}), other),
                      Catch::Contains("not a member of process set"));
  }
  if (n > 2) {
    const int outsider = me % 2 ? 0 : 1;
    CHECK_THROWS_WITH(hvd::broadcast_async("ps.badroot", hvd::TensorView(&f, DataType::kFloat32, {1}), outsider, mine),
                      Catch::Contains("is not a rank of process set"));
  }
  hvd::AllreduceOptions unknown;
  unknown.process_set = hvd::ProcessSet{42};
  CHECK_THROWS_WITH(hvd::allreduce_async("ps.unknown", hvd::TensorView(&f, DataType::kFloat32, {1}), unknown),
                    Catch::Contains("does not exist"));
  CHECK_THROWS_AS(hvd::add_process_set({0, n}), hvd::InvalidArgumentError);
  CHECK_THROWS_AS(hvd::remove_process_set(hvd::ProcessSet{0}), hvd::InvalidArgumentError);

  hvd::remove_process_set(even);
  hvd::remove_process_set(odd);
  CHECK_THROWS_AS(hvd::allreduce_async("ps.removed", hvd::TensorView(&f, DataType::kFloat32, {1}), unknown),
                  hvd::InvalidArgumentError);
  // The global set is unaffected.
  float y = 1.0f;
  hvd::AllreduceOptions sum;
  sum.op = ReduceOp::kSum;
  wait_ok(hvd::allreduce_async("ps.global", hvd::TensorView(&y, DataType::kFloat32, {1}), sum));
  CHECK(y == static_cast<float>(n));
  hvd::shutdown();
}

TEST_CASE("process sets: lists that differ across ranks fail on every rank", "[process_sets][errors]") {
  Session s;
  const int n = hvd::size(), me = hvd::rank();
  std::vector<int> ranks = {0};
  if (me == n - 1) ranks.push_back(n - 1);
  try {
    hvd::add_process_set(ranks);
    FAIL_CHECK("accepted different lists");
  } catch (const hvd::InvalidArgumentError& e) {
    CHECK(std::string(e.what()).find("every rank must pass the same ranks") != std::string::npos);
  }
  // And a proper one works afterwards.
  hvd::ProcessSet all = hvd::add_process_set([&] { std::vector<int> v; for (int r = 0; r < n; ++r) v.push_back(r); return v; }());
  float x = 1.0f;
  hvd::AllreduceOptions o;
  o.op = ReduceOp::kSum;
  o.process_set = all;
  wait_ok(hvd::allreduce_async("ps.all", hvd::TensorView(&x, DataType::kFloat32, {1}), o));
  CHECK(x == static_cast<float>(n));
}

TEST_CASE("process sets: a stall in one set does not block another", "[process_sets]") {
  Session s;
  const int n = hvd::size(), me = hvd::rank();
  std::vector<int> all;
  for (int r = 0; r < n; ++r) all.push_back(r);
  hvd::ProcessSet other = hvd::add_process_set(all);
  // Rank 0 submits "blocked" in the global set; the others submit it only after a whole round
  // of work in the other set has completed, which therefore must not wait for it.
  float a = 1.0f;
  hvd::AllreduceOptions sum;
  sum.op = ReduceOp::kSum;
  hvd::Handle blocked;
  if (me == 0) blocked = hvd::allreduce_async("blocked", hvd::TensorView(&a, DataType::kFloat32, {1}), sum);
  for (int k = 0; k < 5; ++k) {
    float b = 1.0f;
    hvd::AllreduceOptions o = sum;
    o.process_set = other;
    wait_ok(hvd::allreduce_async("free." + std::to_string(k), hvd::TensorView(&b, DataType::kFloat32, {1}), o));
    CHECK(b == static_cast<float>(n));
  }
  if (me == 0) CHECK_FALSE(blocked.poll());
  {
    // Only once rank 0 has looked may the others submit "blocked": right after the loop, a
    // fast rank could submit it and the global set complete it before rank 0 polls.
    float c = 1.0f;
    hvd::AllreduceOptions o = sum;
    o.process_set = other;
    wait_ok(hvd::allreduce_async("free.checked", hvd::TensorView(&c, DataType::kFloat32, {1}), o));
  }
  if (me != 0) blocked = hvd::allreduce_async("blocked", hvd::TensorView(&a, DataType::kFloat32, {1}), sum);
  wait_ok(blocked);
  CHECK(a == static_cast<float>(n));
}
