// Copyright horovod_cpp authors.
#include "in_process_bootstrap.h"

#include <algorithm>
#include <cstring>
#include <tuple>

#include "in_process_data_plane.h"

namespace hvd {
namespace testing {

std::vector<std::unique_ptr<InProcessBootstrap>> InProcessBootstrap::group_of(
    int size, const std::string& name) {
  auto group = std::make_shared<InProcessGroup>(size, name);
  std::vector<std::unique_ptr<InProcessBootstrap>> members;
  for (int r = 0; r < size; ++r) members.push_back(std::make_unique<InProcessBootstrap>(group, r));
  return members;
}

Status InProcessBootstrap::step(
    const std::string& kind, std::string payload,
    const std::function<Status(std::vector<std::string>& in, std::vector<std::string>* out)>& combine,
    std::string* result) {
  Status s = group_->hub.exchange(rank_, kind, std::move(payload), combine, result);
  if (!s.ok()) return Status(s.code(), "bootstrap " + kind + " over " + name() + ": " + s.message());
  return Status::OK();
}

Status InProcessBootstrap::allgather(const void* mine, size_t bytes, void* all) {
  std::string result;
  HVD_RETURN_IF_ERROR(step(
      "allgather of " + std::to_string(bytes) + " bytes",
      std::string(static_cast<const char*>(mine), bytes),
      [](std::vector<std::string>& in, std::vector<std::string>* out) {
        std::string joined;
        for (const std::string& s : in) joined += s;
        for (std::string& o : *out) o = joined;
        return Status::OK();
      },
      &result));
  if (!result.empty()) std::memcpy(all, result.data(), result.size());
  return Status::OK();
}

Status InProcessBootstrap::broadcast(void* buf, size_t bytes, int root) {
  std::string result;
  HVD_RETURN_IF_ERROR(step(
      "broadcast of " + std::to_string(bytes) + " bytes from " + std::to_string(root),
      std::string(static_cast<const char*>(buf), bytes),
      [root](std::vector<std::string>& in, std::vector<std::string>* out) {
        for (std::string& o : *out) o = in[static_cast<size_t>(root)];
        return Status::OK();
      },
      &result));
  if (!result.empty()) std::memcpy(buf, result.data(), result.size());
  return Status::OK();
}

Status InProcessBootstrap::barrier() {
  std::string result;
  return step("barrier", "", [](std::vector<std::string>&, std::vector<std::string>*) {
    return Status::OK();
  }, &result);
}

Status InProcessBootstrap::split(int color, int key, std::unique_ptr<Bootstrap>* out) {
  // The last member to arrive makes one group per color and tells each member its group's id
  // and its rank there.
  const int mine[2] = {color, key};
  InProcessGroup* parent = group_.get();
  std::string result;
  HVD_RETURN_IF_ERROR(step(
      "split", std::string(reinterpret_cast<const char*>(mine), sizeof(mine)),
      [parent](std::vector<std::string>& in, std::vector<std::string>* out) {
        std::map<int, std::vector<std::tuple<int, int>>> by_color;  // color -> (key, rank)
        for (size_t r = 0; r < in.size(); ++r) {
          int ck[2];
          std::memcpy(ck, in[r].data(), sizeof(ck));
          by_color[ck[0]].emplace_back(ck[1], static_cast<int>(r));
        }
        std::lock_guard<std::mutex> lk(parent->mu);
        for (auto& [color, members] : by_color) {
          std::sort(members.begin(), members.end());
          const uint64_t id = parent->next_child++;
          parent->children[id] = std::make_shared<InProcessGroup>(
              static_cast<int>(members.size()), parent->name + " / split " + std::to_string(color));
          for (size_t i = 0; i < members.size(); ++i) {
            (*out)[static_cast<size_t>(std::get<1>(members[i]))] =
                std::to_string(id) + " " + std::to_string(i);
          }
        }
        return Status::OK();
      },
      &result));
  const size_t space = result.find(' ');
  const uint64_t id = std::stoull(result.substr(0, space));
  const int rank = std::stoi(result.substr(space + 1));
  std::lock_guard<std::mutex> lk(parent->mu);
  *out = std::make_unique<InProcessBootstrap>(parent->children.at(id), rank);
  return Status::OK();
}

Status InProcessBootstrap::make_data_plane(std::unique_ptr<DataPlane>* out) {
  *out = std::make_unique<InProcessDataPlane>(&group_->data_hub, rank_);
  return Status::OK();
}

}  // namespace testing
}  // namespace hvd
