// `head_budget`, the dynamic selector: one budget, round(rho N units), shared by all units of the sequence
// and given to the highest-scoring events overall, so units whose writes persist get more events and
// fast-forgetting units few. Each unit first receives its `min_per_head` best chunks.
#include <algorithm>
#include <numeric>

#include "algorithms/builtin_strategies.h"

namespace sgdn {
namespace {

class HeadBudgetSelector : public Selector {
 public:
  HeadBudgetSelector(double rho, int64_t min_per_head) : rho_(rho), min_per_head_(min_per_head) {}

  void select(const UnitScores& scores, int64_t, uint8_t* mask) const override {
    const int64_t n = scores.chunks, units = scores.units;
    int64_t budget = budget_of(rho_, n * units);
    const int64_t floor_each = std::min(min_per_head_, n);
    require(floor_each * units <= budget, "selector.min_per_head = ", min_per_head_, " needs ",
            floor_each * units, " events but the budget round(rho N heads) is ", budget);
    for (int64_t unit = 0; unit < units && floor_each > 0; ++unit) {
      const std::vector<int64_t> order = chunks_by_score(scores, unit);
      for (int64_t i = 0; i < floor_each; ++i) mask[unit * n + order[size_t(i)]] = 1;
    }
    budget -= floor_each * units;
    // All events by score; ties toward the earlier chunk, then the lower unit.
    std::vector<int64_t> events(size_t(n * units));
    std::iota(events.begin(), events.end(), 0);
    std::stable_sort(events.begin(), events.end(), [&](int64_t a, int64_t b) {
      const double sa = scores.values[a], sb = scores.values[b];
      if (sa != sb) return sa > sb;
      return a % n < b % n;
    });
    for (size_t i = 0; i < events.size() && budget > 0; ++i) {
      if (mask[events[i]]) continue;
      mask[events[i]] = 1;
      --budget;
    }
  }

 private:
  double rho_;
  int64_t min_per_head_;
};

}  // namespace

Registry<Selector>::Entry selector_entry_head_budget() {
  std::vector<ParamSpec> specs = {
      {"rho", "0.29", "fraction of events kept, in (0, 1]"},
      {"min_per_head", "0", "events each unit receives before the shared budget"}};
  return {"head_budget", "one budget round(rho N units) for the sequence, to the highest scores overall",
          specs, [specs](const Params& p) {
            return make_strategy<HeadBudgetSelector, Selector>("head_budget", p, specs,
                                                               p.get_double_in("rho", 0.29, 0, 1, true),
                                                               p.get_int_at_least("min_per_head", 0, 0));
          }};
}

}  // namespace sgdn
