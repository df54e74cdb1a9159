// Copyright horovod_cpp authors.
#include "coordination/wire.h"

#include <cstring>
#include <type_traits>

namespace hvd {
namespace {

constexpr uint8_t kRequestListTag = 0xA1;
constexpr uint8_t kResponseListTag = 0xB1;

class Writer {
 public:
  template <typename T>
  void pod(T v) {
    static_assert(std::is_trivially_copyable<T>::value, "pod only");
    char buf[sizeof(T)];
    std::memcpy(buf, &v, sizeof(T));
    out_.append(buf, sizeof(T));
  }
  void str(const std::string& s) {
    pod<uint32_t>(static_cast<uint32_t>(s.size()));
    out_.append(s);
  }
  template <typename Ints>  // std::vector<int64_t> or Shape
  void i64s(const Ints& v) {
    pod<uint32_t>(static_cast<uint32_t>(v.size()));
    for (int64_t x : v) pod<int64_t>(x);
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(const std::string& s) : p_(s.data()), end_(s.data() + s.size()) {}
  template <typename T>
  bool pod(T* v) {
    if (static_cast<size_t>(end_ - p_) < sizeof(T)) return false;
    std::memcpy(v, p_, sizeof(T));
    p_ += sizeof(T);
    return true;
  }
  bool str(std::string* s) {
    uint32_t n;
    if (!pod(&n) || static_cast<size_t>(end_ - p_) < n) return false;
    s->assign(p_, n);
    p_ += n;
    return true;
  }
  template <typename Ints>  // std::vector<int64_t> or Shape
  bool i64s(Ints* v) {
    uint32_t n;
    if (!pod(&n) || static_cast<size_t>(end_ - p_) / sizeof(int64_t) < n) return false;
    v->resize(n);
    for (auto& x : *v) pod(&x);
    return true;
  }
  bool done() const { return p_ == end_; }

 private:
  const char* p_;
  const char* end_;
};

void write_device(Writer& w, const Device& d) {
  w.pod<uint8_t>(static_cast<uint8_t>(d.kind));
  w.pod<int32_t>(d.index);
}
bool read_device(Reader& r, Device* d) {
  uint8_t k;
  int32_t i;
  if (!r.pod(&k) || !r.pod(&i) || k > static_cast<uint8_t>(Device::Kind::kCUDA)) return false;
  d->kind = static_cast<Device::Kind>(k);
  d->index = i;
  return true;
}

// The last enumerator of each enum on the wire: a byte past it is a corrupt message. Update
// these when an enumerator is added (the numeric values are part of the wire format).
constexpr OpType kLastOpType = static_cast<OpType>(kMaxOpType);
constexpr ReduceOp kLastReduceOp = ReduceOp::kAdasum;

template <typename E>
bool read_enum(Reader& r, E* e, E last) {
  uint8_t v;
  if (!r.pod(&v) || v > static_cast<uint8_t>(last)) return false;
  *e = static_cast<E>(v);
  return true;
}

void write_request(Writer& w, const Request& q) {
  w.pod<int32_t>(q.rank);
  w.pod<uint8_t>(static_cast<uint8_t>(q.op));
  w.str(q.name);
  w.pod<uint8_t>(static_cast<uint8_t>(q.dtype));
  w.i64s(q.shape);
  write_device(w, q.device);
  w.pod<uint8_t>(static_cast<uint8_t>(q.reduce_op));
  w.pod<double>(q.prescale);
  w.pod<double>(q.postscale);
  w.pod<int32_t>(q.root);
  w.str(q.group);
  w.pod<int32_t>(q.group_size);
  w.i64s(q.splits);
  w.str(q.error);
}

bool read_request(Reader& r, Request* q) {
  return r.pod(&q->rank) && read_enum(r, &q->op, kLastOpType) && r.str(&q->name) &&
         read_enum(r, &q->dtype, kLastDataType) && r.i64s(&q->shape) && read_device(r, &q->device) &&
         read_enum(r, &q->reduce_op, kLastReduceOp) && r.pod(&q->prescale) && r.pod(&q->postscale) &&
         r.pod(&q->root) && r.str(&q->group) && r.pod(&q->group_size) && r.i64s(&q->splits) &&
         r.str(&q->error);
}

void write_response(Writer& w, const Response& s) {
  w.pod<uint8_t>(static_cast<uint8_t>(s.op));
  w.str(s.name);
  w.str(s.error);
  w.pod<uint8_t>(static_cast<uint8_t>(s.dtype));
  w.i64s(s.shape);
  write_device(w, s.device);
  w.pod<uint8_t>(static_cast<uint8_t>(s.reduce_op));
  w.pod<double>(s.prescale);
  w.pod<double>(s.postscale);
  w.pod<int32_t>(s.root);
  w.str(s.group);
  w.pod<int32_t>(s.group_size);
  w.i64s(s.first_dims);
  w.i64s(s.all_splits);
}

bool read_response(Reader& r, Response* s) {
  return read_enum(r, &s->op, kLastOpType) && r.str(&s->name) && r.str(&s->error) &&
         read_enum(r, &s->dtype, kLastDataType) && r.i64s(&s->shape) && read_device(r, &s->device) &&
         read_enum(r, &s->reduce_op, kLastReduceOp) && r.pod(&s->prescale) && r.pod(&s->postscale) &&
         r.pod(&s->root) && r.str(&s->group) && r.pod(&s->group_size) && r.i64s(&s->first_dims) &&
         r.i64s(&s->all_splits);
}

bool read_header(Reader& r, uint8_t tag) {
  constexpr uint8_t kVersion = kWireFormatVersion;
  uint8_t t, v;
  return r.pod(&t) && r.pod(&v) && t == tag && v == kVersion;
}

}  // namespace

std::string serialize(const RequestList& list) {
  Writer w;
  w.pod<uint8_t>(kRequestListTag);
  w.pod<uint8_t>(kWireFormatVersion);
  w.pod<uint8_t>(list.shutdown ? 1 : 0);
  w.pod<uint32_t>(static_cast<uint32_t>(list.requests.size()));
  for (const auto& q : list.requests) write_request(w, q);
  w.pod<uint32_t>(static_cast<uint32_t>(list.pending_cache_bits.size()));
  for (uint32_t b : list.pending_cache_bits) w.pod<uint32_t>(b);
  return w.take();
}

std::string serialize(const ResponseList& list) {
  Writer w;
  w.pod<uint8_t>(kResponseListTag);
  w.pod<uint8_t>(kWireFormatVersion);
  w.pod<uint8_t>(static_cast<uint8_t>((list.shutdown ? 1 : 0) | (list.fatal ? 2 : 0)));
  w.str(list.shutdown_reason);
  w.pod<uint32_t>(static_cast<uint32_t>(list.responses.size()));
  for (const auto& s : list.responses) write_response(w, s);
  return w.take();
}

Status deserialize(const std::string& bytes, RequestList* out) {
  Reader r(bytes);
  RequestList list;
  uint8_t shutdown;
  uint32_t n;
  bool ok = read_header(r, kRequestListTag) && r.pod(&shutdown) && r.pod(&n);
  if (ok && n > bytes.size()) ok = false;  // each request takes more than one byte
  for (uint32_t i = 0; ok && i < n; ++i) {
    Request q;
    ok = read_request(r, &q);
    list.requests.push_back(std::move(q));
  }
  uint32_t nbits = 0;
  ok = ok && r.pod(&nbits) && nbits <= bytes.size();
  for (uint32_t i = 0; ok && i < nbits; ++i) {
    uint32_t b;
    ok = r.pod(&b);
    list.pending_cache_bits.push_back(b);
  }
  if (!ok || !r.done()) return Status::Backend("malformed request list message");
  list.shutdown = shutdown != 0;
  *out = std::move(list);
  return Status::OK();
}

Status deserialize(const std::string& bytes, ResponseList* out) {
  Reader r(bytes);
  ResponseList list;
  uint8_t shutdown;
  uint32_t n;
  bool ok = read_header(r, kResponseListTag) && r.pod(&shutdown) &&
            r.str(&list.shutdown_reason) && r.pod(&n);
  if (ok && n > bytes.size()) ok = false;
  for (uint32_t i = 0; ok && i < n; ++i) {
    Response s;
    ok = read_response(r, &s);
    list.responses.push_back(std::move(s));
  }
  if (!ok || !r.done() || shutdown > 3) return Status::Backend("malformed response list message");
  list.shutdown = (shutdown & 1) != 0;
  list.fatal = (shutdown & 2) != 0;
  *out = std::move(list);
  return Status::OK();
}

Status check_response_list(const ResponseList& list, int set_size) {
  const size_t n = static_cast<size_t>(set_size);
  auto bad = [](const Response& r, const std::string& what) {
    return Status::Backend(std::string("malformed response list message from rank 0: ") +
                           op_type_name(r.op) + " '" + r.name + "' " + what);
  };
  auto negative = [](const auto& v) {  // a Shape or a std::vector<int64_t>
    for (int64_t x : v) {
      if (x < 0) return true;
    }
    return false;
  };
  for (const Response& r : list.responses) {
    if (!r.ok()) continue;  // only the error message is used
    if (negative(r.shape)) return bad(r, "has a negative dimension");
    if (r.op == OpType::kAllgather || r.op == OpType::kAlltoall) {
      if (r.first_dims.size() != n || negative(r.first_dims)) {
        return bad(r, "needs " + std::to_string(n) + " non-negative first dimensions, has " +
                          std::to_string(r.first_dims.size()));
      }
    }
    if (r.op == OpType::kAlltoall && (r.all_splits.size() != n * n || negative(r.all_splits))) {
      return bad(r, "needs " + std::to_string(n * n) + " non-negative splits, has " +
                        std::to_string(r.all_splits.size()));
    }
  }
  return Status::OK();
}

}  // namespace hvd
