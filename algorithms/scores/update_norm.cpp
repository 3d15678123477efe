// `update_norm` (SPEC §7): ‖(e^{Γ−γ} ⊙ K_c)ᵀ U_c‖_F, the chunk's write if the state were zero.
#include "algorithms/builtin_strategies.h"

namespace sgdn {
namespace {

class UpdateNormScore : public ScoreWith<UpdateNormScore> {
 public:
  template <class S>
  double statistic(const PreparedChunk<S>& c) const {
    return update_norm_of(c);
  }
};

}  // namespace

Registry<Score>::Entry score_entry_update_norm() {
  return {"update_norm", "Frobenius norm of the chunk's write into a zero state", {}, [](const Params& p) {
            return make_strategy<UpdateNormScore, Score>("update_norm", p, {});
          }};
}

}  // namespace sgdn
