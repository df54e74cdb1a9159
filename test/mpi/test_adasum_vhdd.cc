// Copyright horovod_cpp authors. Adasum's distributed schedule (transport/cpu/adasum_vhdd.h)
// under mpirun (2, 3, 4 ranks) and hvdrun --gloo: buffers above the gathered path's limit
// (kAdasumGatherMaxBytes) fused with tensors of 1, 3 and n - 1 elements, odd lengths, a zero
// vector on one rank. Every rank builds every rank's input, computes the documented order in
// double (../adasum_reference.h), checks every element, and checks that all ranks hold the
// same bytes (a Min and a Max allreduce of the result's bytes equal its own).
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "../adasum_reference.h"
#include "test_util.h"
#include "transport/cpu/cpu_transport.h"

using hvd::DataType;
using hvd::ReduceOp;
using namespace hvdtest;

namespace {

// Rank r's element i of tensor `seed`, in [-1, 1); rank `zero_rank`'s are all zero.
double value(int r, int seed, int64_t i, int zero_rank) {
  if (r == zero_rank) return 0.0;
  return std::sin(0.731 * static_cast<double>(i) + 1.9 * r + 0.37 * seed);
}

// The tensors of one case: lengths, inputs as the dtype holds them, references.
struct Case {
  std::vector<std::unique_ptr<Buffer>> bufs;
  std::vector<std::vector<double>> want;
  std::vector<std::string> names;
  std::vector<hvd::TensorView> views;
};

Case make_case(const std::string& tag, DataType d, const std::vector<int64_t>& lengths,
               int zero_rank) {
  const int n = hvd::size(), me = hvd::rank();
  Case c;
  for (size_t k = 0; k < lengths.size(); ++k) {
    const int64_t len = lengths[k];
    std::vector<std::vector<double>> all(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) {
      Buffer b(d, {len});
      for (int64_t i = 0; i < len; ++i) b.set(i, value(r, static_cast<int>(k), i, zero_rank));
      for (int64_t i = 0; i < len; ++i) all[static_cast<size_t>(r)].push_back(b.get(i));
      if (r == me) c.bufs.push_back(std::make_unique<Buffer>(std::move(b)));
    }
    c.want.push_back(adasum_ref(all));
    c.names.push_back("adasum.vhdd." + tag + "." + hvd::dtype_name(d) + "." + std::to_string(k));
    c.views.push_back(c.bufs.back()->view());
  }
  return c;
}

// Every element against the reference, then the same bytes on every rank.
void check_case(const Case& c) {
  for (size_t k = 0; k < c.bufs.size(); ++k) {
    const Buffer& got = *c.bufs[k];
    int bad = 0;
    for (int64_t i = 0; i < got.n(); ++i) {
      const double w = c.want[k][static_cast<size_t>(i)];
      if (std::fabs(got.get(i) - w) > adasum_tolerance(got.dtype, w) && bad++ < 3) {
        FAIL_CHECK(c.names[k] << "[" << i << "]: got " << got.get(i) << ", expected " << w);
      }
    }
    CHECK(bad == 0);
    const int64_t nb = static_cast<int64_t>(got.bytes.size());
    std::vector<uint8_t> lo(got.bytes.begin(), got.bytes.end()), hi = lo;
    hvd::AllreduceOptions o;
    o.op = ReduceOp::kMin;
    REQUIRE(wait_ok(hvd::allreduce_async(c.names[k] + ".min",
                                         hvd::TensorView(lo.data(), DataType::kUInt8, {nb}), o)));
    o.op = ReduceOp::kMax;
    REQUIRE(wait_ok(hvd::allreduce_async(c.names[k] + ".max",
                                         hvd::TensorView(hi.data(), DataType::kUInt8, {nb}), o)));
    CHECK(std::memcmp(lo.data(), got.bytes.data(), got.bytes.size()) == 0);
    CHECK(std::memcmp(hi.data(), got.bytes.data(), got.bytes.size()) == 0);
  }
}

hvd::AllreduceOptions adasum() {
  hvd::AllreduceOptions o;
  o.op = ReduceOp::kAdasum;
  return o;
}

// Elements of `d` that make a buffer just above the gathered path's limit, odd.
int64_t above_limit(DataType d) {
  return hvd::kAdasumGatherMaxBytes / static_cast<int64_t>(hvd::dtype_size(d)) + 1001;
}

const std::vector<DataType> kFloats = {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16,
                                       DataType::kBFloat16};

}  // namespace

TEST_CASE("adasum vhdd: single odd-length tensors above the gathered limit", "[adasum]") {
  Session s;
  for (DataType d : kFloats) {
    Case c = make_case("one", d, {above_limit(d)}, -1);
    if (!wait_ok(hvd::allreduce_async(c.names[0], c.views[0], adasum()))) continue;
    check_case(c);
  }
}

TEST_CASE("adasum vhdd: fused tensors of 1, 3 and n - 1 elements cut by the pieces", "[adasum]") {
  Session s;
  const int64_t n1 = std::max(1, hvd::size() - 1);
  for (DataType d : kFloats) {
    // The large tensor first and last: the pieces' boundaries fall inside and between them.
    Case c = make_case("fused", d, {above_limit(d) / 2, 1, 3, n1, 5, above_limit(d) / 2 + 7}, -1);
    if (!wait_ok(hvd::grouped_allreduce_async(c.names, c.views, adasum()))) continue;
    check_case(c);
  }
}

TEST_CASE("adasum vhdd: a zero vector on one rank contributes nothing", "[adasum]") {
  Session s;
  const int n = hvd::size();
  for (int zero : {0, n - 1}) {
    Case c = make_case("zero" + std::to_string(zero), DataType::kFloat64,
                       {above_limit(DataType::kFloat64), 3}, zero);
    if (!wait_ok(hvd::grouped_allreduce_async(c.names, c.views, adasum()))) continue;
    check_case(c);
  }
}
