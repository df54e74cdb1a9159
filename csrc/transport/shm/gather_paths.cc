// Copyright horovod_cpp authors.
#include "transport/shm/gather_paths.h"

#include <algorithm>

namespace hvd {

int GatherPaths::band(int64_t bytes) const {
  if (min_bytes_ <= 0 || bytes < min_bytes_) return -1;
  int b = 0;
  for (int64_t edge = min_bytes_ * 4; b + 1 < kBands && bytes >= edge; edge *= 4) ++b;
  return b;
}

bool GatherPaths::second_way(Kind kind, int64_t bytes) {
  const int b = band(kind, bytes);
  if (b < 0) return false;
  const bool in_use = (agreed_ >> bit(kind, b)) & 1u;
  const uint64_t n = calls_[kind][b]++;
  if (forced_ >= 0) return forced_ == 1;
  // Calls 1-3 try the other way (the first call of each way is not counted: cold), then one
  // call in every kExplorePeriod.
  const bool explore = n == 2 || n == 3 || n % kExplorePeriod == 1;
  return explore ? !in_use : in_use;
}

void GatherPaths::record(Kind kind, int64_t bytes, bool second, double seconds) {
  const int b = band(kind, bytes);
  if (b < 0 || seconds <= 0.0) return;
  const int w = second ? 1 : 0;
  // The first call of each way and class is not counted: its pages and lines are cold.
  const uint64_t n = samples_[kind][b][w]++;
  if (n == 0) return;
  double* ring = recent_[kind][b][w];
  ring[(n - 1) % kWindow] = seconds / static_cast<double>(bytes);
  const int filled = static_cast<int>(std::min<uint64_t>(n, kWindow));
  costs_.c[kind][b][w] = *std::min_element(ring, ring + filled);
}

void GatherPaths::fold_slowest(const Costs& peer, Costs* slowest) {
  const double* p = &peer.c[0][0][0];
  double* s = &slowest->c[0][0][0];
  for (size_t i = 0; i < sizeof(Costs) / sizeof(double); ++i) s[i] = slower(s[i], p[i]);
}

uint64_t GatherPaths::votes(const Costs& slowest) {
  return votes(slowest, kVoteMask, 0);
}

uint64_t GatherPaths::votes(const Costs& slowest, uint64_t classes, uint64_t previous) {
  uint64_t enabled_bits = 0;
  for (int k = 0; k < kKinds; ++k) {
    if ((kinds_ >> k) & 1u) {
      enabled_bits |= ((uint64_t{1} << kBands) - 1) << bit(static_cast<Kind>(k), 0);
    }
  }
  if (test_state_ != 0) {  // xorshift64: a different mask each cycle, different per seed
    test_state_ ^= test_state_ << 13;
    test_state_ ^= test_state_ >> 7;
    test_state_ ^= test_state_ << 17;
    return test_state_ & enabled_bits;
  }
  uint64_t v = previous & ~classes & enabled_bits;
  for (uint64_t m = classes & enabled_bits; m != 0; m &= m - 1) {
    const int i = __builtin_ctzll(m);
    const int k = i / kBands, b = i % kBands;
    // The second way replaces the first only for a clear gain, and gives way as soon as the
    // first is faster again.
    const double gain = (kMpiKinds >> k) & 1u ? kMpiSwitchGain : kSwitchGain;
    const double first = slowest.c[k][b][0], second = slowest.c[k][b][1];
    // The first way until both are known from kMinSamples calls each.
    if (first == 0.0 || second == 0.0 || samples_[k][b][0] <= kMinSamples ||
        samples_[k][b][1] <= kMinSamples) {
      continue;
    }
    const bool in_use = (agreed_ >> i) & 1u;
    if (in_use ? second <= first : second * gain < first) v |= uint64_t{1} << i;
  }
  return v;
}

}  // namespace hvd
