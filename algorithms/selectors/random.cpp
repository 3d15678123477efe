// `random`: each unit keeps round(rho N) chunks chosen uniformly, reproducibly from (seed, sequence, unit).
// The stream (core/selection_rules.h) is the GPU kernel's too, so a seed selects the same chunks on both
// backends.
#include "algorithms/builtin_strategies.h"

namespace sgdn {
namespace {

class RandomSelector : public Selector {
 public:
  RandomSelector(double rho, uint64_t seed) : rho_(rho), seed_(seed) {}

  void select(const UnitScores& scores, int64_t sequence, uint8_t* mask) const override {
    const int64_t keep = budget_of(rho_, scores.chunks);
    std::vector<int64_t> chunks(size_t(scores.chunks));
    for (int64_t unit = 0; unit < scores.units; ++unit) {
      uint64_t state = random_stream_start(seed_, sequence, unit);
      for (int64_t c = 0; c < scores.chunks; ++c) chunks[size_t(c)] = c;
      for (int64_t i = 0; i < keep; ++i) {  // partial Fisher–Yates: the first `keep` are the sample
        const int64_t j = i + int64_t(uniform_below(state, uint64_t(scores.chunks - i)));
        std::swap(chunks[size_t(i)], chunks[size_t(j)]);
        mask[unit * scores.chunks + chunks[size_t(i)]] = 1;
      }
    }
  }
  bool uses_scores() const override { return false; }

 private:
  double rho_;
  uint64_t seed_;
};

}  // namespace

Registry<Selector>::Entry selector_entry_random() {
  std::vector<ParamSpec> specs = {{"rho", "0.29", "fraction of events kept, in (0, 1]"},
                                  {"seed", "0", "random seed"}};
  return {"random", "round(rho N) uniformly chosen chunks per unit", specs, [specs](const Params& p) {
            return make_strategy<RandomSelector, Selector>("random", p, specs,
                                                           p.get_double_in("rho", 0.29, 0, 1, true),
                                                           uint64_t(p.get_int_at_least("seed", 0, 0)));
          }};
}

}  // namespace sgdn
