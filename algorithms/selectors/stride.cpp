// `stride`: round(rho N) evenly spaced chunks per unit, centred in their intervals (chunk
// floor((i + 1/2) N / k) for i < k), so rho = 1 keeps every chunk.
#include "algorithms/builtin_strategies.h"

namespace sgdn {
namespace {

class StrideSelector : public Selector {
 public:
  explicit StrideSelector(double rho) : rho_(rho) {}

  void select(const UnitScores& scores, int64_t, uint8_t* mask) const override {
    const int64_t keep = budget_of(rho_, scores.chunks);
    for (int64_t unit = 0; unit < scores.units; ++unit)
      for (int64_t i = 0; i < keep; ++i)
        mask[unit * scores.chunks + stride_chunk(i, keep, scores.chunks)] = 1;
  }
  bool uses_scores() const override { return false; }

 private:
  double rho_;
};

}  // namespace

Registry<Selector>::Entry selector_entry_stride() {
  std::vector<ParamSpec> specs = {{"rho", "0.29", "fraction of events kept, in (0, 1]"}};
  return {"stride", "round(rho N) evenly spaced chunks per unit", specs, [specs](const Params& p) {
            return make_strategy<StrideSelector, Selector>("stride", p, specs,
                                                           p.get_double_in("rho", 0.29, 0, 1, true));
          }};
}

}  // namespace sgdn
