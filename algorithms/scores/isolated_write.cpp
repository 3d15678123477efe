// `isolated_write`: the strongest single write of the chunk, each token's write weighted by how far its key
// stands apart from the chunk's other keys:
//     max_i  iota_i^s ‖e^{Γ−γ_i} k_i‖ ‖u_i‖,   iota_i = ‖k_i‖⁴ / Σ_j (k_iᵀ k_j)²  in (0, 1]
// (j over the chunk's tokens, i included; s = `sharpness`). iota_i is 1 for a key orthogonal to every other
// key of the chunk and about 1 / (1 + C / K) for keys spread over a subspace of K dimensions. The delta rule
// erases along each new key, so a write into a direction the surrounding tokens leave alone is one that
// later writes of the same kind do not erase: it lasts. Size alone (peak_write, update_norm) cannot tell
// such a write (a needle) from the haystack's own strong writes, nor from a haystack write of equal size;
// its key can. The power s sharpens that: at s = 4 a crowded key counts (1 / (1 + C / K))^4, about 1/16
// at C = K, so a small isolated write still outranks a large crowded one.
// The score reads only the chunk's own inputs (K Kᵀ, the token norms of the keys and of U): no carried state.
#include <algorithm>
#include <cmath>

#include "algorithms/builtin_strategies.h"

namespace sgdn {
namespace {

class IsolatedWriteScore : public ScoreWith<IsolatedWriteScore> {
 public:
  explicit IsolatedWriteScore(double sharpness) : sharpness_(sharpness) {}

  template <class S>
  double statistic(const PreparedChunk<S>& c) const {
    const Mat<S> gram = c.k * c.k.transpose();
    double best = 0;
    for (int64_t i = 0; i < c.length; ++i) {
      const double self = double(gram(i, i));
      const double crowd = double(gram.row(i).squaredNorm());
      if (crowd <= 0) continue;  // a zero key writes nothing
      const double write = double(c.k_to_end.row(i).norm()) * double(c.u.row(i).norm());
      best = std::max(best, std::pow(self * self / crowd, sharpness_) * write);
    }
    return best;
  }

 private:
  double sharpness_;
};

}  // namespace

Registry<Score>::Entry score_entry_isolated_write() {
  std::vector<ParamSpec> specs = {
      {"sharpness", "4", "the power s of iota_i, in [0, 8] (0: peak_write without persistence)"}};
  return {"isolated_write",
          "the strongest token write of the chunk, weighted by how far its key stands apart", specs,
          [specs](const Params& p) {
            return make_strategy<IsolatedWriteScore, Score>("isolated_write", p, specs,
                                                            p.get_double_in("sharpness", 4, 0, 8, false));
          }};
}

}  // namespace sgdn
