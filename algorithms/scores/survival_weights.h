// The survival weight of SPEC §7, shared by the scores that discount writes the later chunks forget:
// p_{N−1} = 0, p_c = 1 + e^{Γ_{c+1}} p_{c+1}.
#pragma once
#include <cmath>
#include <vector>

namespace sgdn {

inline std::vector<double> survival_weights(const std::vector<double>& chunk_log_decay) {
  const size_t n = chunk_log_decay.size();
  std::vector<double> p(n, 0.0);
  for (size_t c = n; c-- > 1;) p[c - 1] = 1.0 + std::exp(chunk_log_decay[c]) * p[c];
  return p;
}

}  // namespace sgdn
