// `survival` (SPEC §7): update_norm × p_c, where p_c counts the later chunks that still see the write,
// weighted by the decay between: p_{N−1} = 0, p_c = 1 + e^{Γ_{c+1}} p_{c+1}.
// With `skip_own_group`, the chunks of c's own output group (G > 1) are left out of p_c: they see the
// write through the group-local interactions whether or not it is selected.
#include <cmath>

#include "algorithms/builtin_strategies.h"
#include "algorithms/scores/survival_weights.h"

namespace sgdn {
namespace {

class SurvivalScore : public ScoreWith<SurvivalScore> {
 public:
  explicit SurvivalScore(bool skip_own_group) : skip_own_group_(skip_own_group) {}

  template <class S>
  double statistic(const PreparedChunk<S>& c) const {
    return update_norm_of(c);
  }

  void finalize(std::vector<double>& stats, const std::vector<double>& chunk_log_decay,
                const ScoreContext& context) const override {
    const int64_t n = int64_t(stats.size());
    std::vector<double> persistence = survival_weights(chunk_log_decay);
    if (skip_own_group_ && context.group > 1) {
      for (int64_t c = 0; c < n; ++c) {
        // Remove the chunks c+1 .. end of c's group, each weighted by the decay between.
        const int64_t group_end = std::min(n, (c / context.group + 1) * context.group);
        double weight = 1.0;
        for (int64_t later = c + 1; later < group_end; ++later) {
          persistence[size_t(c)] -= weight;
          weight *= std::exp(chunk_log_decay[size_t(later)]);
        }
      }
    }
    for (int64_t c = 0; c < n; ++c) stats[size_t(c)] *= std::max(0.0, persistence[size_t(c)]);
  }

 private:
  bool skip_own_group_;
};

}  // namespace

Registry<Score>::Entry score_entry_survival() {
  std::vector<ParamSpec> specs = {
      {"skip_own_group", "false", "leave the chunks of the event's own output group out of p_c", true}};
  return {"survival", "update_norm times the decay-weighted count of later chunks that see the write", specs,
          [specs](const Params& p) {
            return make_strategy<SurvivalScore, Score>("survival", p, specs,
                                                       p.get_bool("skip_own_group", false));
          }};
}

}  // namespace sgdn
