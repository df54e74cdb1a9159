// Copyright horovod_cpp authors. Adasum allreduce under mpirun (2, 3, 4 ranks): every rank
// rebuilds every rank's input, combines them itself in double by the pairwise tree
// in the documented order (../adasum_reference.h) and checks every element of the result, single tensors and fused
// batches.
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "../adasum_reference.h"
#include "test_util.h"

using hvd::DataType;
using hvd::ReduceOp;
using namespace hvdtest;

namespace {

// Rank r's element i of tensor `seed`: deterministic, in [-1, 1), different per rank.
double value(int r, int seed, int64_t i) {
  uint64_t x = static_cast<uint64_t>(r + 1) * 0x9E3779B97F4A7C15ull ^
               static_cast<uint64_t>(seed + 7) * 0xBF58476D1CE4E5B9ull ^
               static_cast<uint64_t>(i + 3) * 0x94D049BB133111EBull;
  x ^= x >> 31;
  x *= 0xD6E8FEB86779B3F1ull;
  x ^= x >> 29;
  return static_cast<double>(x >> 11) / static_cast<double>(1ull << 53) * 2.0 - 1.0;
}

std::vector<double> tree(const std::vector<std::vector<double>>& slots) {
  return adasum_ref(slots);
}

// Every rank's input of tensor `seed` as the dtype holds it (half types rounded).
std::vector<std::vector<double>> inputs(DataType d, int seed, int64_t len, int n) {
  std::vector<std::vector<double>> all(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    Buffer b(d, {len});
    for (int64_t i = 0; i < len; ++i) b.set(i, value(r, seed, i));
    for (int64_t i = 0; i < len; ++i) all[static_cast<size_t>(r)].push_back(b.get(i));
  }
  return all;
}

int check_all(const std::string& what, const Buffer& got, const std::vector<double>& want) {
  int bad = 0;
  for (int64_t i = 0; i < got.n(); ++i) {
    const double w = want[static_cast<size_t>(i)];
    if (std::fabs(got.get(i) - w) > adasum_tolerance(got.dtype, w) && bad++ < 3) {
      FAIL_CHECK(what << "[" << i << "]: got " << got.get(i) << ", expected " << w);
    }
  }
  return bad;
}

const std::vector<DataType> kFloats = {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16,
                                       DataType::kBFloat16};
const std::vector<int64_t> kLengths = {1, 7, 1000, 4097};

hvd::AllreduceOptions adasum() {
  hvd::AllreduceOptions o;
  o.op = ReduceOp::kAdasum;
  return o;
}

}  // namespace

TEST_CASE("adasum allreduce of single tensors matches the pairwise tree", "[adasum]") {
  Session s;
  const int n = hvd::size(), me = hvd::rank();
  int seed = 0;
  for (DataType d : kFloats) {
    for (int64_t len : kLengths) {
      ++seed;
      const auto all = inputs(d, seed, len, n);
      Buffer b(d, {len});
      for (int64_t i = 0; i < len; ++i)
        b.set(i, all[static_cast<size_t>(me)][static_cast<size_t>(i)]);
      const std::string name =
          std::string("adasum.one.") + hvd::dtype_name(d) + "." + std::to_string(len);
      // Waited one by one: never fused.
      if (!wait_ok(hvd::allreduce_async(name, b.view(), adasum()))) continue;
      CHECK(check_all(name, b, tree(all)) == 0);
    }
  }
}

TEST_CASE("adasum of a fused batch combines each tensor on its own", "[adasum]") {
  Session s;
  const int n = hvd::size(), me = hvd::rank();
  for (DataType d : kFloats) {
    std::vector<std::unique_ptr<Buffer>> bufs;
    std::vector<std::vector<std::vector<double>>> all;
    std::vector<hvd::TensorView> views;
    std::vector<std::string> names;
    for (size_t k = 0; k < kLengths.size() + 2; ++k) {
      const int64_t len = k < kLengths.size() ? kLengths[k] : 33 + static_cast<int64_t>(k);
      const int seed = 100 + static_cast<int>(k);
      all.push_back(inputs(d, seed, len, n));
      auto b = std::make_unique<Buffer>(d, hvd::Shape{len});
      for (int64_t i = 0; i < len; ++i)
        b->set(i, all.back()[static_cast<size_t>(me)][static_cast<size_t>(i)]);
      views.push_back(b->view());
      names.push_back(std::string("adasum.fused.") + hvd::dtype_name(d) + "." + std::to_string(k));
      bufs.push_back(std::move(b));
    }
    if (!wait_ok(hvd::grouped_allreduce_async(names, views, adasum()))) continue;
    for (size_t k = 0; k < bufs.size(); ++k)
      CHECK(check_all(names[k], *bufs[k], tree(all[k])) == 0);
  }
}

TEST_CASE("adasum keeps equal vectors and sums orthogonal ones", "[adasum]") {
  Session s;
  const int n = hvd::size(), me = hvd::rank();
  std::vector<float> same = {1.5f, -2.0f, 0.25f, 3.0f, 0.0f};
  std::vector<float> onehot(static_cast<size_t>(n) + 1, 0.0f);
  onehot[static_cast<size_t>(me)] = static_cast<float>(me + 1);
  std::vector<float> zero(4, 0.0f);
  const hvd::Shape s5{5}, sh{static_cast<int64_t>(onehot.size())}, s4{4};
  REQUIRE(wait_ok(hvd::allreduce_async(
      "adasum.same", hvd::TensorView(same.data(), DataType::kFloat32, s5), adasum())));
  REQUIRE(wait_ok(hvd::allreduce_async(
      "adasum.onehot", hvd::TensorView(onehot.data(), DataType::kFloat32, sh), adasum())));
  REQUIRE(wait_ok(hvd::allreduce_async(
      "adasum.zero", hvd::TensorView(zero.data(), DataType::kFloat32, s4), adasum())));
  const std::vector<float> want_same = {1.5f, -2.0f, 0.25f, 3.0f, 0.0f};
  for (size_t i = 0; i < same.size(); ++i) CHECK(same[i] == Approx(want_same[i]).epsilon(1e-6));
  for (int r = 0; r < n; ++r) CHECK(onehot[static_cast<size_t>(r)] == Approx(r + 1).epsilon(1e-6));
  CHECK(onehot.back() == 0.0f);
  for (float z : zero) CHECK(z == 0.0f);  // zero norms: no division by zero
}

TEST_CASE("adasum applies prescale and postscale to inputs and result", "[adasum]") {
  Session s;
  const int n = hvd::size(), me = hvd::rank();
  const auto all = inputs(DataType::kFloat64, 900, 50, n);
  Buffer in(DataType::kFloat64, {50}), out(DataType::kFloat64, {50});
  for (int64_t i = 0; i < 50; ++i) in.set(i, all[static_cast<size_t>(me)][static_cast<size_t>(i)]);
  hvd::AllreduceOptions o = adasum();
  o.prescale_factor = 0.5;
  o.postscale_factor = 3.0;
  REQUIRE(wait_ok(hvd::allreduce_async("adasum.scaled", in.view(), out.view(), o)));
  std::vector<double> want = tree(all);
  for (double& w : want) w *= 1.5;  // homogeneous: the factors multiply the result
  CHECK(check_all("adasum.scaled", out, want) == 0);
  for (int64_t i = 0; i < 50; ++i)
    CHECK(in.get(i) == all[static_cast<size_t>(me)][static_cast<size_t>(i)]);
}

TEST_CASE("adasum refuses integer tensors and the next allreduce works", "[adasum]") {
  Session s;
  int32_t ints[3] = {1, 2, 3};
  try {
    hvd::allreduce_async("adasum.int", hvd::TensorView(ints, DataType::kInt32, {3}), adasum());
    FAIL_CHECK("an int32 Adasum was accepted");
  } catch (const hvd::InvalidArgumentError& e) {
    const std::string m = e.what();
    CHECK(m.find("adasum.int") != std::string::npos);
    CHECK(m.find("adasum") != std::string::npos);
    CHECK(m.find("int32") != std::string::npos);
  }
  float f[2] = {1.0f, 2.0f};
  hvd::AllreduceOptions sum;
  sum.op = ReduceOp::kSum;
  REQUIRE(wait_ok(
      hvd::allreduce_async("adasum.after", hvd::TensorView(f, DataType::kFloat32, {2}), sum)));
  CHECK(f[0] == Approx(hvd::size()));
  CHECK(f[1] == Approx(2.0 * hvd::size()));
}
