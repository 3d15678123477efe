// `head_budget`, the dynamic selector: one budget, round(rho N units), shared by all units of the sequence
// and given to the highest-scoring events overall, so units whose writes persist get more events and
// fast-forgetting units few. Each unit first receives its `min_per_head` best chunks; with max_fraction < 1
// no unit keeps more than round(max_fraction N), which bounds the longest chain of state updates (the
// critical path of a GPU recurrence that runs the units side by side) and hands the rest of the budget on
// to the next-best events of other units.
#include <algorithm>
#include <numeric>

#include "algorithms/builtin_strategies.h"

namespace sgdn {
namespace {

class HeadBudgetSelector : public Selector {
 public:
  HeadBudgetSelector(double rho, int64_t min_per_head, double max_fraction)
      : rho_(rho), min_per_head_(min_per_head), max_fraction_(max_fraction) {
    require(max_fraction >= rho, "selector.max_fraction = ", max_fraction, " is below rho = ", rho,
            ": the units could not hold the budget");
  }

  void select(const UnitScores& scores, int64_t, uint8_t* mask) const override {
    const int64_t n = scores.chunks, units = scores.units;
    const HeadBudgetPlan plan = head_budget_plan(rho_, min_per_head_, max_fraction_, n, units);
    for (int64_t unit = 0; unit < units && plan.floor_each > 0; ++unit) {
      const std::vector<int64_t> order = chunks_by_score(scores, unit);
      for (int64_t i = 0; i < plan.floor_each; ++i) mask[unit * n + order[size_t(i)]] = 1;
    }
    int64_t budget = plan.budget - plan.floor_each * units;
    std::vector<int64_t> kept(size_t(units), plan.floor_each);
    // All events by score; ties toward the earlier chunk, then the lower unit.
    std::vector<int64_t> events(size_t(n * units));
    std::iota(events.begin(), events.end(), 0);
    std::stable_sort(events.begin(), events.end(), [&](int64_t a, int64_t b) {
      const double sa = scores.values[a], sb = scores.values[b];
      if (sa != sb) return sa > sb;
      return a % n < b % n;
    });
    for (size_t i = 0; i < events.size() && budget > 0; ++i) {
      const int64_t unit = events[i] / n;
      if (mask[events[i]] || kept[size_t(unit)] >= plan.cap) continue;
      mask[events[i]] = 1;
      ++kept[size_t(unit)];
      --budget;
    }
  }

 private:
  double rho_;
  int64_t min_per_head_;
  double max_fraction_;
};

}  // namespace

Registry<Selector>::Entry selector_entry_head_budget() {
  std::vector<ParamSpec> specs = {
      {"rho", "0.29", "fraction of events kept, in (0, 1]"},
      {"min_per_head", "0", "events each unit receives before the shared budget"},
      {"max_fraction", "1", "a unit keeps at most round(max_fraction N) events, in [rho, 1]"}};
  return {"head_budget", "one budget round(rho N units) for the sequence, to the highest scores overall",
          specs, [specs](const Params& p) {
            return make_strategy<HeadBudgetSelector, Selector>(
                "head_budget", p, specs, p.get_double_in("rho", 0.29, 0, 1, true),
                p.get_int_at_least("min_per_head", 0, 0), p.get_double_in("max_fraction", 1, 0, 1, true));
          }};
}

}  // namespace sgdn
