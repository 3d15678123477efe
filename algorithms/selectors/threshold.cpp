// `threshold`: keep the events whose score is at least tau times the sequence's mean score; the budget
// follows the input.
#include "algorithms/builtin_strategies.h"

namespace sgdn {
namespace {

class ThresholdSelector : public Selector {
 public:
  explicit ThresholdSelector(double tau) : tau_(tau) {}

  void select(const UnitScores& scores, int64_t, uint8_t* mask) const override {
    const int64_t count = scores.units * scores.chunks;
    double mean = 0;
    for (int64_t i = 0; i < count; ++i) mean += scores.values[i];
    mean /= double(count);
    for (int64_t i = 0; i < count; ++i) mask[i] = scores.values[i] >= tau_ * mean ? 1 : 0;
  }

 private:
  double tau_;
};

}  // namespace

Registry<Selector>::Entry selector_entry_threshold() {
  std::vector<ParamSpec> specs = {
      {"tau", "1.0", "keep scores >= tau x the sequence's mean score (tau >= 0)"}};
  return {"threshold", "keep events scoring at least tau times the mean", specs, [specs](const Params& p) {
            const double tau = p.get_double("tau", 1.0);
            require(tau >= 0, p.qualified("tau"), " = ", tau, " must be >= 0");
            return make_strategy<ThresholdSelector, Selector>("threshold", p, specs, tau);
          }};
}

}  // namespace sgdn
