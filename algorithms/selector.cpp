#include "algorithms/selector.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace sgdn {

int64_t budget_of(double rho, int64_t n) {
  return std::llround(rho * double(n));
}

std::vector<int64_t> chunks_by_score(const UnitScores& scores, int64_t unit) {
  std::vector<int64_t> order(size_t(scores.chunks));
  std::iota(order.begin(), order.end(), 0);
  // stable_sort keeps equal scores in chunk order: ties go to the earlier chunk.
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return scores.at(unit, a) > scores.at(unit, b); });
  return order;
}

}  // namespace sgdn
