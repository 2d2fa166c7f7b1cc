// Zipf(s) over ranks 0..n-1 by inverse CDF (s = 0: uniform). Internal to
// fedfs_bench_sim; deterministic given the generator.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <random>
#include <vector>

namespace fedfs::bench {

class Zipf {
 public:
  Zipf(size_t n, double s) : cdf_(n) {
    double sum = 0;
    for (size_t i = 0; i < n; ++i) {
      sum += 1.0 / std::pow(static_cast<double>(i + 1), s);
      cdf_[i] = sum;
    }
    for (double& c : cdf_) c /= sum;
  }
  size_t operator()(std::mt19937_64& rng) const {
    double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;
    auto it = std::lower_bound(cdf_.begin(), cdf_.end(), u);
    return std::min(static_cast<size_t>(it - cdf_.begin()), cdf_.size() - 1);
  }

 private:
  std::vector<double> cdf_;
};

}  // namespace fedfs::bench
