// Copyright horovod_cpp authors. save_checkpoint / load_checkpoint of the training API.
//
// Format (native byte order): "HVDCKPT1", uint64 entry count, then per entry: uint32 name
// length, name, uint8 dtype, uint32 ndim, int64 dims[ndim], raw data. Entry names are
// "param:<name>", "state:<name>" and "hyper:<name>" (a float64 of shape [1]).
#include <cstring>
#include <fstream>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "horovod_cpp/training.h"

namespace hvd {
namespace {

const char kMagic[8] = {'H', 'V', 'D', 'C', 'K', 'P', 'T', '1'};

struct Entry {
  DataType dtype;
  Shape shape;
  std::vector<unsigned char> data;
};

template <typename T>
void put(std::ofstream& f, const T& v) {
  f.write(reinterpret_cast<const char*>(&v), sizeof(T));
}

template <typename T>
void get(std::ifstream& f, T& v, const std::string& path) {
  f.read(reinterpret_cast<char*>(&v), sizeof(T));
  if (!f) throw std::runtime_error("load_checkpoint: '" + path + "' is truncated or malformed");
}

void write_entry(std::ofstream& f, const std::string& name, DataType dtype, const Shape& shape, const void* data) {
  put<uint32_t>(f, static_cast<uint32_t>(name.size()));
  f.write(name.data(), static_cast<std::streamsize>(name.size()));
  put<uint8_t>(f, static_cast<uint8_t>(dtype));
  put<uint32_t>(f, static_cast<uint32_t>(shape.size()));
  for (int64_t d : shape) put<int64_t>(f, d);
  f.write(static_cast<const char*>(data), static_cast<std::streamsize>(num_elements(shape) * dtype_size(dtype)));
}

}  // namespace

void save_checkpoint(const std::string& path, const ParameterList& params, Optimizer* optimizer) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) throw std::runtime_error("save_checkpoint: cannot open '" + path + "' for writing");
  std::vector<StateEntry> st;
  std::vector<std::pair<std::string, double*>> hp;
  if (optimizer) {
    st = optimizer->state();
    hp = optimizer->hyperparameters();
  }
  f.write(kMagic, 8);
  put<uint64_t>(f, static_cast<uint64_t>(params.size() + st.size() + hp.size()));
  for (const auto& p : params) {
    write_entry(f, "param:" + p->name(), DataType::kFloat32, p->shape(), p->value().data());
  }
  for (const auto& e : st) write_entry(f, "state:" + e.name, e.view.dtype, e.view.shape, e.view.data);
  for (const auto& kv : hp) write_entry(f, "hyper:" + kv.first, DataType::kFloat64, Shape{1}, kv.second);
  f.flush();
  if (!f) throw std::runtime_error("save_checkpoint: write to '" + path + "' failed");
}

void load_checkpoint(const std::string& path, const ParameterList& params, Optimizer* optimizer) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("load_checkpoint: cannot open '" + path + "'");
  char magic[8];
  f.read(magic, 8);
  if (!f || std::memcmp(magic, kMagic, 8) != 0) {
    throw std::runtime_error("load_checkpoint: '" + path + "' is not a horovod_cpp checkpoint");
  }
  uint64_t count = 0;
  get(f, count, path);
  std::map<std::string, Entry> entries;
  for (uint64_t i = 0; i < count; ++i) {
    uint32_t nlen = 0;
    get(f, nlen, path);
    if (nlen > (1u << 20)) throw std::runtime_error("load_checkpoint: '" + path + "' is malformed");
    std::string name(nlen, '\0');
    f.read(&name[0], nlen);
    uint8_t dt = 0;
    uint32_t ndim = 0;
    get(f, dt, path);
    get(f, ndim, path);
    if (dt > static_cast<uint8_t>(DataType::kBool) || ndim > 64) {
      throw std::runtime_error("load_checkpoint: '" + path + "' is malformed");
    }
    Entry e;
    e.dtype = static_cast<DataType>(dt);
    e.shape.resize(ndim);
    for (auto& d : e.shape) {
      get(f, d, path);
      if (d < 0) throw std::runtime_error("load_checkpoint: '" + path + "' is malformed");
    }
    e.data.resize(static_cast<size_t>(num_elements(e.shape)) * dtype_size(e.dtype));
    f.read(reinterpret_cast<char*>(e.data.data()), static_cast<std::streamsize>(e.data.size()));
    if (!f) throw std::runtime_error("load_checkpoint: '" + path + "' is truncated");
    entries[name] = std::move(e);
  }
  auto take = [&](const std::string& key, DataType dtype, const Shape& shape, void* dst) {
    auto it = entries.find(key);
    if (it == entries.end()) throw std::runtime_error("load_checkpoint: '" + path + "' has no entry '" + key + "'");
    if (it->second.dtype != dtype || it->second.shape != shape) {
      throw std::runtime_error("load_checkpoint: entry '" + key + "' is " + dtype_name(it->second.dtype) + " " +
                               shape_str(it->second.shape) + " in '" + path + "', expected " + dtype_name(dtype) +
                               " " + shape_str(shape));
    }
    std::memcpy(dst, it->second.data.data(), it->second.data.size());
  };
  // Unknown parameters in the file are an error (a checkpoint of another model).
  for (const auto& kv : entries) {
    if (kv.first.rfind("param:", 0) != 0) continue;
    bool known = false;
    for (const auto& p : params) known |= ("param:" + p->name()) == kv.first;
    if (!known) {
      throw std::runtime_error("load_checkpoint: '" + path + "' holds parameter '" + kv.first.substr(6) +
                               "' which the model does not have");
    }
  }
  for (const auto& p : params) take("param:" + p->name(), DataType::kFloat32, p->shape(), p->value().data());
  if (optimizer) {
    for (auto& e : optimizer->state()) take("state:" + e.name, e.view.dtype, e.view.shape, e.view.data);
    for (auto& kv : optimizer->hyperparameters()) take("hyper:" + kv.first, DataType::kFloat64, Shape{1}, kv.second);
  }
}

}  // namespace hvd
