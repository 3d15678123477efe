// Selectors (SPEC §7): given the scores of one sequence's units (value heads, or head groups under `pair`
// granularity), choose which events (unit, chunk) write into the carried state.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/params.h"
#include "core/registry.h"
#include "core/selection_rules.h"
#include "core/strategy.h"

namespace sgdn {

// The scores of one sequence: units x chunks, row-major.
struct UnitScores {
  int64_t units = 0;
  int64_t chunks = 0;
  const double* values = nullptr;
  double at(int64_t unit, int64_t chunk) const { return values[unit * chunks + chunk]; }
};

class Selector : public Strategy {
 public:
  // Writes mask[unit * chunks + chunk] = 1 for kept events (the caller zero-fills it). `sequence` is the
  // batch index, so that random selectors draw differently per sequence yet reproducibly.
  virtual void select(const UnitScores& scores, int64_t sequence, uint8_t* mask) const = 0;
  // False for selectors that ignore scores (dense, random, stride): the engine may skip computing them.
  virtual bool uses_scores() const { return true; }
};

Registry<Selector>& selector_registry();

// The chunk indices of one unit ordered by score, highest first; ties toward the earlier chunk.
std::vector<int64_t> chunks_by_score(const UnitScores& scores, int64_t unit);

// Whether selector `name` reads scores (dense, random and stride do not); true for a name this build does
// not know (a file from a build with other strategies).
bool selector_reads_scores(const std::string& name);

// " key=value" for each parameter of selector `name` and of its score (`selector.score`, when the selector
// reads scores), other than rho and tau, which tables show in their own column, whose value in `config`
// ("selector.<key>" entries) differs from its registered default: the score's first, then the selector's.
// What tells apart runs of one selector in labels and tables. "" for a selector this build does not know.
std::string selector_param_text(const std::string& name, const std::map<std::string, std::string>& config);

// head_budget's numbers for a sequence of n chunks and `units` units: the shared budget round(rho n units),
// each unit's floor min(min_per_head, n) and its cap round(max_fraction n) (events a unit may keep at most).
// Raises sgdn::Error naming the parameter when the floors exceed the budget or the cap. Both backends use it.
struct HeadBudgetPlan {
  int64_t budget = 0;
  int64_t floor_each = 0;
  int64_t cap = 0;
};
HeadBudgetPlan head_budget_plan(double rho, int64_t min_per_head, double max_fraction, int64_t n,
                                int64_t units);

}  // namespace sgdn
