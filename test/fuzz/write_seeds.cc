// Copyright horovod_cpp authors. Writes the seed corpus of the fuzz targets (test/fuzz/corpus).
//
// The seeds are real messages made by the real encoder, so the fuzzer starts from inputs
// that reach deep into each decoder. Rerun after a wire-format change:
//   build/test/fuzz/hvd_fuzz_write_seeds test/fuzz/corpus
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "coordination/wire.h"
#include "fuzz_input.h"

using namespace hvd;

namespace {

void write(const std::filesystem::path& dir, const std::string& name, const std::string& bytes) {
  std::filesystem::create_directories(dir);
  std::ofstream(dir / name, std::ios::binary) << bytes;
}

Request request(const std::string& name, OpType op, Shape shape) {
  Request q;
  q.op = op;
  q.name = name;
  q.shape = std::move(shape);
  return q;
}

Response response_for(const Request& q) {
  Response r;
  r.op = q.op;
  r.name = q.name;
  r.dtype = q.dtype;
  r.shape = q.shape;
  return r;
}

std::string word(uint64_t w) { return std::string(reinterpret_cast<const char*>(&w), 8); }

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
    return 2;
  }
  const std::filesystem::path root(argv[1]);

  // Messages as they travel.
  RequestList reqs;
  reqs.requests.push_back(request("layer1.weight", OpType::kAllreduce, {64, 3, 3}));
  Request ag = request("embeddings", OpType::kAllgather, {5, 8});
  Request a2a = request("tokens", OpType::kAlltoall, {4, 2});
  a2a.splits = {1, 3};
  Request grouped = request("g.0", OpType::kAllreduce, {10});
  grouped.group = "g";
  grouped.group_size = 2;
  reqs.requests.push_back(ag);
  reqs.requests.push_back(a2a);
  reqs.requests.push_back(grouped);
  RequestList stall;
  stall.pending_cache_bits = {0, 3, 64};
  stall.shutdown = true;
  ResponseList resps;
  for (const auto& q : reqs.requests) resps.responses.push_back(response_for(q));
  resps.responses[1].first_dims = {5, 7};
  resps.responses[2].first_dims = {4, 4};
  resps.responses[2].all_splits = {1, 3, 2, 2};
  Response bad = response_for(reqs.requests[0]);
  bad.name = "bad";
  bad.error = "allreduce 'bad': rank 0 sent float32[4], rank 1 sent float32[5]";
  resps.responses.push_back(bad);
  ResponseList down;
  down.shutdown = true;
  down.shutdown_reason = "horovod_cpp was shut down: rank 1 called shutdown()";

  write(root / "fuzz_wire", "request_list", serialize(reqs));
  write(root / "fuzz_wire", "request_list_stall", serialize(stall));
  write(root / "fuzz_wire", "response_list", serialize(resps));
  write(root / "fuzz_wire", "response_list_shutdown", serialize(down));

  // The controller: see fuzz_controller.cc for the layout. Rank 1 of 2: a full cycle that
  // negotiates "a", then a cycle where "a" is a cache hit.
  RequestList a;
  a.requests.push_back(request("a", OpType::kAllreduce, {4}));
  ResponseList a_ok;
  a_ok.responses.push_back(response_for(a.requests[0]));
  {
    std::string s(1, static_cast<char>(1 | (1 << 2)));  // 2 ranks, rank 1
    fuzz::append_piece(&s, serialize(a));
    s += '\1';
    s += word(~1ull);  // the full-cycle flag (stored inverted)
    fuzz::append_piece(&s, serialize(a_ok));
    fuzz::append_piece(&s, serialize(a));
    s += '\1';
    s += word(~0ull) + word(~0ull) + word(~0ull) + word(~0ull);  // ready everywhere
    write(root / "fuzz_controller", "worker_hit", s);
  }
  // Rank 1 of 2: an alltoall negotiated, then a cache hit on it (the response's splits are
  // checked against the request's).
  {
    RequestList t;
    t.requests.push_back(a2a);
    ResponseList t_ok;
    t_ok.responses.push_back(response_for(a2a));
    t_ok.responses[0].first_dims = {5, 4};
    t_ok.responses[0].all_splits = {1, 3, 1, 3};
    std::string s(1, static_cast<char>(1 | (1 << 2)));
    fuzz::append_piece(&s, serialize(t));
    s += '\1';
    s += word(~1ull);
    fuzz::append_piece(&s, serialize(t_ok));
    fuzz::append_piece(&s, serialize(t));
    s += '\1';
    s += word(~0ull) + word(~0ull) + word(~0ull) + word(~0ull);
    write(root / "fuzz_controller", "worker_alltoall_hit", s);
  }
  // Rank 0 of 3, with a stall shutdown: both others send requests, one differs in shape.
  {
    std::string s(1, static_cast<char>(2 | (1 << 4)));
    fuzz::append_piece(&s, serialize(a));
    s += '\1';
    s += word(~1ull);
    fuzz::append_piece(&s, serialize(a));
    RequestList other = a;
    other.requests[0].shape = {5};
    fuzz::append_piece(&s, serialize(other));
    fuzz::append_piece(&s, serialize(reqs));
    s += '\5';
    s += word(~5ull);
    fuzz::append_piece(&s, serialize(stall));
    fuzz::append_piece(&s, serialize(reqs));
    write(root / "fuzz_controller", "root_mismatch", s);
  }

  // Corrupted responses through the executor: see fuzz_execute.cc for the layout. Three ranks
  // submit an allreduce float32[3,4], an allgather float64[r+1,2], a broadcast int32[4] from
  // rank 1 and an alltoall float32[d0,3] (first dimensions 3,2,4; splits [1,1,1], [0,1,1],
  // [2,2,0]); then the corruptions of rank 0's broadcasts.
  {
    const std::string tensors =
        std::string("\x02\x03", 2) + std::string("\x00\x00\x02\x03\x04\x00\x00", 7) +
        std::string("\x01\x01\x02\x09\x02\x01\x02\x03\x00\x00", 10) +
        std::string("\x02\x02\x01\x04\x01\x00", 6) +
        std::string("\x03\x00\x02\x01\x03\x03\x02\x04\x01\x01\x00\x01\x02\x02\x00\x00", 16);
    const std::string fields = tensors + '\x01';  // field corruptions, not bytes
    // One corruption: response `index`, word `v` (fuzz_execute.cc's corrupt()), field `f`.
    const auto one = [](uint8_t index, uint64_t v, uint8_t f) {
      return std::string(1, static_cast<char>(index)) + word(v) +
             std::string(1, static_cast<char>(f));
    };
    const auto dir = root / "fuzz_execute";
    write(dir, "honest", fields);
    write(dir, "reducescatter", std::string("\x00\x00\x04\x04\x02\x04\x02\x00\x00\x01", 10));
    write(dir, "shape", fields + '\x00' + one(0, 0x104, 0));               // dimension 6
    write(dir, "dtype", fields + '\x00' + one(0, 8, 3));                   // float64
    write(dir, "op", fields + '\x00' + one(2, 1, 4));                      // an allgather
    write(dir, "first_dim", fields + '\x00' + one(1, 0x20104, 5));         // one rank's, 6
    write(dir, "splits", fields + '\x00' + one(3, uint64_t{1} << 40, 6));  // 2^40 rows
    write(dir, "root", fields + '\x00' + one(2, 0x105, 7));                // rank 0
    write(dir, "scalar",
          fields + '\x03' + one(1, 0, 2) + one(1, 0, 2) + one(1, 0, 2) + one(1, 0, 2));
    // The corrupted response, then the agreement's findings corrupted too.
    write(dir, "findings",
          fields + '\x00' + one(0, 0x104, 0) + '\x01' + one(0, 0x105, 7) + one(0, 0, 11));
    write(dir, "bytes",
          tensors + '\x00' + '\x03' + word(40) + '\x07' + word(77) + '\xff' + word(90) + '\x00' +
              word(120) + '\x13');
  }

  // The environment, in the order Config::from_env reads it.
  {
    const std::vector<std::string> values = {
        "67108864", "1", "4096", "60", "0", "5", "4194304", "0", "0", "300",
        "1", "32768", "1048576", "/tmp/timeline.json", "1", "debug"};
    std::string s;
    for (const auto& v : values) fuzz::append_piece(&s, v);
    write(root / "fuzz_config", "defaults", s);
    std::string t;
    for (const auto& v : {"1e3", "0.5", "18446744073709551616", "inf", "maybe"}) fuzz::append_piece(&t, v);
    write(root / "fuzz_config", "bad_values", t);
  }

  // Tensor names.
  write(root / "fuzz_json_escape", "plain", "layer1.conv.weight");
  write(root / "fuzz_json_escape", "utf8", "gewicht\xc3\xa4\xe2\x82\xac");
  write(root / "fuzz_json_escape", "controls", "a\"b\\c\nd\te\x01\x1f");
  return 0;
}
