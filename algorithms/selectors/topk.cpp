// `topk`: each unit keeps its round(rho N) highest-scoring chunks — the same budget for every unit.
#include "algorithms/builtin_strategies.h"

namespace sgdn {
namespace {

class TopKSelector : public Selector {
 public:
  explicit TopKSelector(double rho) : rho_(rho) {}

  void select(const UnitScores& scores, int64_t, uint8_t* mask) const override {
    const int64_t keep = budget_of(rho_, scores.chunks);
    for (int64_t unit = 0; unit < scores.units; ++unit) {
      const std::vector<int64_t> order = chunks_by_score(scores, unit);
      for (int64_t i = 0; i < keep; ++i) mask[unit * scores.chunks + order[size_t(i)]] = 1;
    }
  }

 private:
  double rho_;
};

}  // namespace

Registry<Selector>::Entry selector_entry_topk() {
  std::vector<ParamSpec> specs = {{"rho", "0.29", "fraction of events kept, in (0, 1]"}};
  return {"topk", "each unit keeps its round(rho N) highest-scoring chunks", specs, [specs](const Params& p) {
            return make_strategy<TopKSelector, Selector>("topk", p, specs,
                                                         p.get_double_in("rho", 0.29, 0, 1, true));
          }};
}

}  // namespace sgdn
