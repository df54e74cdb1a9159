// Copyright horovod_cpp authors.
#include "tuning/agreement.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

namespace hvd {

Status agree_on_slowest(ControlPlane& control, double* seconds, double* bytes) {
  double v[2] = {*seconds, *bytes};
  std::vector<std::string> all;
  HVD_RETURN_IF_ERROR(
      control.gather(std::string(reinterpret_cast<const char*>(v), sizeof(v)), &all));
  std::string blob;
  if (control.rank() == 0) {
    for (const std::string& s : all) {
      if (s.size() != sizeof(v)) return Status::Backend("autotune: malformed sample");
      double w[2];
      std::memcpy(w, s.data(), sizeof(w));
      v[0] = std::max(v[0], w[0]);
      v[1] = std::max(v[1], w[1]);
    }
    blob.assign(reinterpret_cast<const char*>(v), sizeof(v));
  }
  HVD_RETURN_IF_ERROR(control.broadcast(&blob));
  if (blob.size() != sizeof(v)) return Status::Backend("autotune: malformed agreement");
  std::memcpy(v, blob.data(), sizeof(v));
  *seconds = v[0];
  *bytes = v[1];
  return Status::OK();
}

}  // namespace hvd
