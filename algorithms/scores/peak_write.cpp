// `peak_write`: the strongest single write in the chunk, max_i ‖e^{Γ−γ_i} k_i‖ ‖u_i‖ (token i's rank-one
// part of the chunk's write into a zero state, U_c's row i being its corrected value), times the survival
// weight p_c of `survival` unless `persistence = false`. A lone strong write (a needle, written with
// beta = 1 among ordinary tokens) is as visible here as a chunk of many moderate writes, which the
// Frobenius norm of the whole write blurs.
#include "algorithms/builtin_strategies.h"
#include "algorithms/scores/survival_weights.h"

namespace sgdn {
namespace {

class PeakWriteScore : public ScoreWith<PeakWriteScore> {
 public:
  explicit PeakWriteScore(bool persistence) : persistence_(persistence) {}

  template <class S>
  double statistic(const PreparedChunk<S>& c) const {
    return double((c.k_to_end.rowwise().norm().array() * c.u.rowwise().norm().array()).maxCoeff());
  }

  void finalize(std::vector<double>& stats, const std::vector<double>& chunk_log_decay,
                const ScoreContext&) const override {
    if (!persistence_) return;
    const std::vector<double> p = survival_weights(chunk_log_decay);
    for (size_t c = 0; c < stats.size(); ++c) stats[c] *= p[c];
  }

 private:
  bool persistence_;
};

}  // namespace

Registry<Score>::Entry score_entry_peak_write() {
  std::vector<ParamSpec> specs = {{"persistence", "true", "multiply by the survival weight p_c", true}};
  return {"peak_write", "the strongest single token write of the chunk (times its survival weight)", specs,
          [specs](const Params& p) {
            return make_strategy<PeakWriteScore, Score>("peak_write", p, specs,
                                                        p.get_bool("persistence", true));
          }};
}

}  // namespace sgdn
