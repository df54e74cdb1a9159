// Copyright horovod_cpp authors. GlooDataPlane with 2, 3 and 4 thread-ranks over real Gloo TCP
// pairs: every call, every dtype and op, each element checked against a reference each rank
// computes itself.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>

#include "common/half.h"
#include "gloo_threads.h"
#include "transport/gloo/gloo_data_plane.h"

namespace hvd {
namespace testing {
namespace {

const DataType kTypes[] = {DataType::kUInt8,    DataType::kInt8,    DataType::kInt16,
                           DataType::kInt32,    DataType::kInt64,   DataType::kFloat16,
                           DataType::kBFloat16, DataType::kFloat32, DataType::kFloat64,
                           DataType::kBool,     DataType::kUInt16};
const ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax,
                         ReduceOp::kProduct};

// Rank r's element i: small integers, exact in every dtype and in any reduction order.
int64_t input(DataType t, ReduceOp op, int r, int64_t i) {
  if (t == DataType::kBool) return (r + i) % 3 == 0 ? 1 : 0;
  if (op == ReduceOp::kProduct) return 1 + (r + i) % 2;
  const int64_t v = (r * 7 + i * 3) % 5 + 1;
  const bool is_signed = t == DataType::kInt8 || t == DataType::kInt16 || t == DataType::kInt32 ||
                         t == DataType::kInt64 || is_floating_point(t);
  return is_signed ? v - 3 : v;
}

int64_t reference(DataType t, ReduceOp op, int n, int64_t i) {
  int64_t acc = input(t, op, 0, i);
  for (int r = 1; r < n; ++r) {
    const int64_t x = input(t, op, r, i);
    if (t == DataType::kBool) {
      acc = (op == ReduceOp::kMin || op == ReduceOp::kProduct) ? (acc && x) : (acc || x);
    } else if (op == ReduceOp::kMin) {
      acc = std::min(acc, x);
    } else if (op == ReduceOp::kMax) {
      acc = std::max(acc, x);
    } else if (op == ReduceOp::kProduct) {
      acc *= x;
    } else {
      acc += x;  // Average reduces as Sum: the caller divides
    }
  }
  return acc;
}

void put(DataType t, void* p, int64_t i, int64_t v) {
  switch (t) {
    case DataType::kUInt8:
      static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v);
      break;
    case DataType::kBool:
      static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v);
      break;
    case DataType::kInt8:
      static_cast<int8_t*>(p)[i] = static_cast<int8_t>(v);
      break;
    case DataType::kInt16:
      static_cast<int16_t*>(p)[i] = static_cast<int16_t>(v);
      break;
    case DataType::kUInt16:
      static_cast<uint16_t*>(p)[i] = static_cast<uint16_t>(v);
      break;
    case DataType::kInt32:
      static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v);
      break;
    case DataType::kInt64:
      static_cast<int64_t*>(p)[i] = v;
      break;
    case DataType::kFloat16:
      static_cast<uint16_t*>(p)[i] = float_to_fp16(static_cast<float>(v));
      break;
    case DataType::kBFloat16:
      static_cast<uint16_t*>(p)[i] = float_to_bf16(static_cast<float>(v));
      break;
    case DataType::kFloat32:
      static_cast<float*>(p)[i] = static_cast<float>(v);
      break;
    case DataType::kFloat64:
      static_cast<double*>(p)[i] = static_cast<double>(v);
      break;
  }
}

// Byte r*31 + i of what rank r sends (to rank `to` for alltoall).
char byte_of(int r, int to, int64_t i) {
  return static_cast<char>(r * 31 + to * 7 + i);
}

void check_allreduce(ThreadedGlooJob& job, int r, DataPlane& plane, int64_t count) {
  const int n = job.size();
  for (DataType t : kTypes) {
    for (ReduceOp op : kOps) {
      const size_t es = dtype_size(t);
      std::vector<char> buf(static_cast<size_t>(count) * es), want(buf.size());
      for (int64_t i = 0; i < count; ++i) {
        put(t, buf.data(), i, input(t, op, r, i));
        put(t, want.data(), i, reference(t, op, n, i));
      }
      const Status s = plane.allreduce(buf.data(), count, t, op);
      if (!s.ok()) {
        job.fail(r, std::string("allreduce ") + dtype_name(t) + ": " + s.message());
        continue;
      }
      for (int64_t i = 0; i < count; ++i) {
        if (std::memcmp(&buf[static_cast<size_t>(i) * es], &want[static_cast<size_t>(i) * es],
                        es) != 0) {
          job.fail(r, std::string("allreduce ") + dtype_name(t) + " " + reduce_op_name(op) +
                          " element " + std::to_string(i) + " differs");
          break;
        }
      }
    }
  }
}

void check_gathers(ThreadedGlooJob& job, int r, DataPlane& plane) {
  const int n = job.size();
  // allgatherv: rank q sends 3q + 1 bytes, rank 1 none.
  std::vector<int64_t> bytes(static_cast<size_t>(n));
  int64_t total = 0;
  for (int q = 0; q < n; ++q) total += bytes[static_cast<size_t>(q)] = q == 1 ? 0 : 3 * q + 1;
  std::vector<char> mine(static_cast<size_t>(bytes[static_cast<size_t>(r)]));
  for (size_t i = 0; i < mine.size(); ++i) mine[i] = byte_of(r, 0, static_cast<int64_t>(i));
  std::vector<char> all(static_cast<size_t>(total));
  Status s = plane.allgatherv(mine.data(), all.data(), bytes);
  size_t at = 0;
  for (int q = 0; q < n && s.ok(); ++q) {
    for (int64_t i = 0; i < bytes[static_cast<size_t>(q)]; ++i, ++at) {
      if (all[at] != byte_of(q, 0, i)) s = Status::Backend("allgatherv byte differs");
    }
  }
  if (!s.ok()) job.fail(r, s.message());
  // alltoallv: rank r sends r + to + 1 bytes to rank `to` (none to itself when r is 2).
  auto sends = [](int from, int to) -> int64_t { return from == 2 && to == 2 ? 0 : from + to + 1; };
  std::vector<int64_t> send(static_cast<size_t>(n)), recv(static_cast<size_t>(n));
  std::vector<char> in, out;
  for (int q = 0; q < n; ++q) {
    send[static_cast<size_t>(q)] = sends(r, q);
    recv[static_cast<size_t>(q)] = sends(q, r);
    for (int64_t i = 0; i < sends(r, q); ++i) in.push_back(byte_of(r, q, i));
  }
  int64_t recv_total = 0;
  for (int64_t b : recv) recv_total += b;
  out.resize(static_cast<size_t>(recv_total));
  s = plane.alltoallv(in.data(), send, out.data(), recv);
  at = 0;
  for (int q = 0; q < n && s.ok(); ++q) {
    for (int64_t i = 0; i < sends(q, r); ++i, ++at) {
      if (out[at] != byte_of(q, r, i)) s = Status::Backend("alltoallv byte differs");
    }
  }
  if (!s.ok()) job.fail(r, s.message());
}

void check_reducescatter_broadcast(ThreadedGlooJob& job, int r, DataPlane& plane) {
  const int n = job.size();
  for (DataType t : {DataType::kFloat32, DataType::kInt64, DataType::kFloat16}) {
    std::vector<int64_t> counts(static_cast<size_t>(n));
    int64_t total = 0, before = 0;
    for (int q = 0; q < n; ++q) {
      if (q == r) before = total;
      // Uneven blocks, and on 3+ ranks an empty one (rank 1's): the ring skips its messages.
      total += counts[static_cast<size_t>(q)] = (q == 1 && n > 2) ? 0 : q + 2;
    }
    const int64_t mine = counts[static_cast<size_t>(r)];
    const size_t es = dtype_size(t);
    std::vector<char> in(static_cast<size_t>(total) * es), out(static_cast<size_t>(mine) * es),
        want(out.size());
    for (int64_t i = 0; i < total; ++i) put(t, in.data(), i, input(t, ReduceOp::kSum, r, i));
    for (int64_t i = 0; i < mine; ++i)
      put(t, want.data(), i, reference(t, ReduceOp::kSum, n, before + i));
    const Status s = plane.reducescatter(in.data(), out.data(), counts, t, ReduceOp::kSum);
    if (!s.ok() || out != want)
      job.fail(r, std::string("reducescatter ") + dtype_name(t) + " " + s.message());
  }
  for (int root = 0; root < n; ++root) {
    std::vector<char> buf(1000 + static_cast<size_t>(root));
    for (size_t i = 0; i < buf.size(); ++i)
      buf[i] = r == root ? byte_of(root, 1, static_cast<int64_t>(i)) : 0;
    const Status s = plane.broadcast(buf.data(), static_cast<int64_t>(buf.size()), root);
    bool same = s.ok();
    for (size_t i = 0; i < buf.size() && same; ++i)
      same = buf[i] == byte_of(root, 1, static_cast<int64_t>(i));
    if (!same) job.fail(r, "broadcast from " + std::to_string(root) + " " + s.message());
  }
  const Status s = plane.barrier();
  if (!s.ok()) job.fail(r, "barrier: " + s.message());
}

}  // namespace

TEST_CASE("gloo data plane: every call, dtype and op on 2, 3 and 4 ranks", "[gloo]") {
  for (int n : {2, 3, 4}) {
    ThreadedGlooJob job(n);
    job.run("dp" + std::to_string(n), [&](int r, GlooBootstrap& world) {
      std::unique_ptr<DataPlane> plane;
      if (!world.make_data_plane(&plane).ok()) return job.fail(r, "no data plane");
      check_allreduce(job, r, *plane, 37);
      check_gathers(job, r, *plane);
      check_reducescatter_broadcast(job, r, *plane);
    });
    INFO("ranks: " << n);
    CHECK(job.failures() == std::vector<std::string>{});
  }
}

TEST_CASE("gloo data plane: small allreduces agree bit for bit, NaNs included, 3-6 ranks",
          "[gloo]") {
  // std::min(NaN, x) is NaN but std::min(x, NaN) is x: ranks that combined in different
  // orders would end with different values. Element 0 is NaN on rank 1 only.
  const int64_t count = 9;
  for (int n : {3, 4, 5, 6}) {
    ThreadedGlooJob job(n);
    job.run("dpnan" + std::to_string(n), [&](int r, GlooBootstrap& world) {
      std::unique_ptr<DataPlane> plane;
      if (!world.make_data_plane(&plane).ok()) return job.fail(r, "no data plane");
      const auto value = [](int q, int64_t i) {
        return i == 0 && q == 1 ? std::nanf("") : 0.1f * static_cast<float>((q + 1) * (i + 3) % 7);
      };
      for (ReduceOp op : {ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kSum}) {
        std::vector<float> buf(static_cast<size_t>(count));
        for (int64_t i = 0; i < count; ++i) buf[static_cast<size_t>(i)] = value(r, i);
        Status s = plane->allreduce(buf.data(), count, DataType::kFloat32, op);
        if (!s.ok()) return job.fail(r, s.message());
        for (int64_t i = 1; i < count && op != ReduceOp::kSum; ++i) {
          float want = value(0, i);
          for (int q = 1; q < n; ++q) {
            want = op == ReduceOp::kMin ? std::min(want, value(q, i)) : std::max(want, value(q, i));
          }
          if (buf[static_cast<size_t>(i)] != want)
            job.fail(r, std::string(reduce_op_name(op)) + " element " + std::to_string(i));
        }
        std::vector<float> all(buf.size() * static_cast<size_t>(n));
        s = world.allgather(buf.data(), buf.size() * sizeof(float), all.data());
        if (!s.ok()) return job.fail(r, s.message());
        for (int q = 1; q < n; ++q) {
          if (std::memcmp(all.data(), all.data() + buf.size() * static_cast<size_t>(q),
                          buf.size() * sizeof(float)) != 0) {
            job.fail(r, std::string(reduce_op_name(op)) + ": rank " + std::to_string(q) +
                            "'s result differs from rank 0's");
          }
        }
      }
    });
    INFO("ranks: " << n);
    CHECK(job.failures() == std::vector<std::string>{});
  }
}

TEST_CASE("gloo data plane: allreduces and broadcasts about the small-path limits on 3 ranks",
          "[gloo]") {
  ThreadedGlooJob job(3);
  job.run("dpedge", [&](int r, GlooBootstrap& world) {
    std::unique_ptr<DataPlane> plane;
    if (!world.make_data_plane(&plane).ok()) return job.fail(r, "no data plane");
    // 64 KiB is the last size done by recursive doubling; one element more goes to the ring.
    // 16 KiB (4096 elements) is the last over the direct links; one more goes through Gloo's
    // device thread.
    for (int64_t count :
         {int64_t{16384}, int64_t{16385}, int64_t{1}, int64_t{4096}, int64_t{4097}}) {
      std::vector<int32_t> buf(static_cast<size_t>(count));
      for (int64_t i = 0; i < count; ++i) buf[static_cast<size_t>(i)] = (r + 1) * (i % 977);
      const Status s = plane->allreduce(buf.data(), count, DataType::kInt32, ReduceOp::kSum);
      if (!s.ok()) return job.fail(r, s.message());
      for (int64_t i = 0; i < count; ++i) {
        if (buf[static_cast<size_t>(i)] != 6 * (i % 977)) {
          job.fail(r, std::to_string(count) + " elements: element " + std::to_string(i));
          break;
        }
      }
    }
    // 128 KiB to each of two members is the last flat broadcast; one byte more takes Gloo's.
    // 16 KiB is the last over the direct links.
    for (size_t bytes : {size_t{128} << 10, (size_t{128} << 10) + 1, size_t{16} << 10,
                         (size_t{16} << 10) + 1, size_t{1}}) {
      std::vector<char> buf(bytes);
      for (size_t i = 0; i < bytes; ++i) buf[i] = r == 2 ? byte_of(2, 3, int64_t(i)) : 0;
      const Status s = plane->broadcast(buf.data(), static_cast<int64_t>(bytes), 2);
      bool same = s.ok();
      for (size_t i = 0; i < bytes && same; ++i) same = buf[i] == byte_of(2, 3, int64_t(i));
      if (!same) job.fail(r, "broadcast of " + std::to_string(bytes) + " bytes " + s.message());
    }
  });
  CHECK(job.failures() == std::vector<std::string>{});
}

TEST_CASE("gloo data plane: large allreduces (several Gloo segments) on 3 ranks", "[gloo]") {
  ThreadedGlooJob job(3);
  job.run("dplarge", [&](int r, GlooBootstrap& world) {
    std::unique_ptr<DataPlane> plane;
    if (!world.make_data_plane(&plane).ok()) return job.fail(r, "no data plane");
    const int64_t count = 700001;  // over 1 MiB of float32: Gloo's ring cuts it into segments
    std::vector<float> buf(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i)
      buf[static_cast<size_t>(i)] = static_cast<float>((r + 1) * (i % 1000));
    const Status s = plane->allreduce(buf.data(), count, DataType::kFloat32, ReduceOp::kSum);
    if (!s.ok()) return job.fail(r, s.message());
    for (int64_t i = 0; i < count; ++i) {
      if (buf[static_cast<size_t>(i)] != static_cast<float>(6 * (i % 1000))) {
        return job.fail(r, "element " + std::to_string(i) + " differs");
      }
    }
  });
  CHECK(job.failures() == std::vector<std::string>{});
}

TEST_CASE("gloo data plane: buffers streamed over the direct links (1 MiB bound), 2, 3, 5 ranks",
          "[gloo]") {
  // With a bound of 1 MiB, allreduces and allgathers up to it go over the direct links in
  // 16 KiB pieces: sizes off the piece boundaries, an empty block, the fold of 5 ranks into
  // 4, and the first size past the bound (Gloo's ring).
  for (int n : {2, 3, 5}) {
    ThreadedGlooJob job(n);
    for (int r = 0; r < n; ++r) job.job(r)->direct_max_bytes = int64_t{1} << 20;
    job.run("dpstream" + std::to_string(n), [&](int r, GlooBootstrap& world) {
      std::unique_ptr<DataPlane> plane;
      if (!world.make_data_plane(&plane).ok()) return job.fail(r, "no data plane");
      for (int64_t count : {int64_t{4097}, int64_t{100003}, int64_t{262144}, int64_t{262145}}) {
        std::vector<int32_t> buf(static_cast<size_t>(count));
        for (int64_t i = 0; i < count; ++i) buf[static_cast<size_t>(i)] = (r + 1) * (i % 977);
        const Status s = plane->allreduce(buf.data(), count, DataType::kInt32, ReduceOp::kSum);
        if (!s.ok()) return job.fail(r, s.message());
        const int32_t ranks_sum = n * (n + 1) / 2;
        for (int64_t i = 0; i < count; ++i) {
          if (buf[static_cast<size_t>(i)] != ranks_sum * (i % 977)) {
            job.fail(r, "allreduce of " + std::to_string(count) + ": element " + std::to_string(i));
            break;
          }
        }
      }
      std::vector<int64_t> bytes(static_cast<size_t>(n));
      for (int q = 0; q < n; ++q) bytes[static_cast<size_t>(q)] = q == 1 ? 0 : 70001 + 13 * q;
      std::vector<char> mine(static_cast<size_t>(bytes[static_cast<size_t>(r)]));
      for (size_t i = 0; i < mine.size(); ++i) mine[i] = byte_of(r, 5, int64_t(i));
      int64_t total = 0;
      for (int64_t b : bytes) total += b;
      std::vector<char> all(static_cast<size_t>(total));
      Status s = plane->allgatherv(mine.data(), all.data(), bytes);
      if (!s.ok()) return job.fail(r, s.message());
      size_t at = 0;
      for (int q = 0; q < n; ++q) {
        for (int64_t i = 0; i < bytes[static_cast<size_t>(q)]; ++i, ++at) {
          if (all[at] != byte_of(q, 5, i)) {
            job.fail(r, "allgatherv: rank " + std::to_string(q) + "'s byte " + std::to_string(i));
            q = n;
            break;
          }
        }
      }
      const size_t bcast = 300001;
      std::vector<char> buf(bcast);
      for (size_t i = 0; i < bcast; ++i) buf[i] = r == n - 1 ? byte_of(n - 1, 7, int64_t(i)) : 0;
      s = plane->broadcast(buf.data(), static_cast<int64_t>(bcast), n - 1);
      bool same = s.ok();
      for (size_t i = 0; i < bcast && same; ++i) same = buf[i] == byte_of(n - 1, 7, int64_t(i));
      if (!same) job.fail(r, "broadcast of " + std::to_string(bcast) + " bytes " + s.message());
    });
    INFO("ranks: " << n);
    CHECK(job.failures() == std::vector<std::string>{});
  }
}

}  // namespace testing
}  // namespace hvd
