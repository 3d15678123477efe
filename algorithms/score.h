// Event scores (SPEC §7): a parallel pre-pass statistic per chunk, then a per-head pass over the sequence
// of statistics. Scores never depend on the carried state.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "algorithms/prepared_chunk.h"
#include "core/params.h"
#include "core/registry.h"
#include "core/strategy.h"

namespace sgdn {

struct ScoreContext {
  int64_t chunk = 64;  // C
  int64_t group = 1;   // G, the output window of SPEC §6
};

class Score : public Strategy {
 public:
  // The statistic of one prepared chunk (computed in parallel over chunks and heads).
  virtual double chunk_statistic(const PreparedChunk<double>& chunk) const = 0;
  virtual double chunk_statistic(const PreparedChunk<float>& chunk) const = 0;
  // Turns one head's statistics (in chunk order) into its scores, in place. chunk_log_decay[c] = Γ_c.
  virtual void finalize(std::vector<double>& /*stats*/, const std::vector<double>& /*chunk_log_decay*/,
                        const ScoreContext& /*context*/) const {}
};

template <class Derived>
class ScoreWith : public Score {
 public:
  double chunk_statistic(const PreparedChunk<double>& c) const override { return self().statistic(c); }
  double chunk_statistic(const PreparedChunk<float>& c) const override { return self().statistic(c); }

 private:
  const Derived& self() const { return static_cast<const Derived&>(*this); }
};

Registry<Score>& score_registry();

// ‖(e^{Γ−γ} ⊙ K_c)ᵀ U_c‖_F: the chunk's write into a zero state (shared by several scores).
template <class S>
double update_norm_of(const PreparedChunk<S>& c) {
  return double((c.k_to_end.transpose() * c.u).norm());
}

}  // namespace sgdn
