// `dense`: keep every event (rho is ignored). With it the sparse recurrence is exactly SPEC §3.
#include "algorithms/builtin_strategies.h"

namespace sgdn {
namespace {

class DenseSelector : public Selector {
 public:
  void select(const UnitScores& scores, int64_t, uint8_t* mask) const override {
    std::fill(mask, mask + scores.units * scores.chunks, uint8_t{1});
  }
  bool uses_scores() const override { return false; }
};

}  // namespace

Registry<Selector>::Entry selector_entry_dense() {
  return {"dense", "keep every event", {}, [](const Params& p) {
            return make_strategy<DenseSelector, Selector>("dense", p, {});
          }};
}

}  // namespace sgdn
