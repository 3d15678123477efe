// The built-in strategies. Adding one: write its file (with its `*_entry_<name>()` function) and add its
// name to the list of its family below. The shared tests run every registered strategy.
#include "algorithms/builtin_strategies.h"

namespace sgdn {

#define SGDN_SOLVERS(X) X(exact) X(block_adjacent)
#define SGDN_SCORES(X) X(update_norm) X(survival) X(peak_write) X(isolated_write)
#define SGDN_SELECTORS(X) X(dense) X(random) X(stride) X(topk) X(head_budget) X(threshold)

#define SGDN_DECLARE(family, Base, name) Registry<Base>::Entry family##_entry_##name();
#define SGDN_DECLARE_SOLVER(name) SGDN_DECLARE(solver, Solver, name)
#define SGDN_DECLARE_SCORE(name) SGDN_DECLARE(score, Score, name)
#define SGDN_DECLARE_SELECTOR(name) SGDN_DECLARE(selector, Selector, name)
SGDN_SOLVERS(SGDN_DECLARE_SOLVER)
SGDN_SCORES(SGDN_DECLARE_SCORE)
SGDN_SELECTORS(SGDN_DECLARE_SELECTOR)

Params resolve_params(const Params& given, const std::vector<ParamSpec>& specs) {
  Params resolved(given.section(), {});
  for (const ParamSpec& spec : specs) resolved.set(spec.key, given.get_string(spec.key, spec.default_value));
  return resolved;
}

Registry<Solver>& solver_registry() {
  static Registry<Solver> registry = [] {
    Registry<Solver> r("solver");
#define SGDN_ADD_SOLVER(name) r.add(solver_entry_##name());
    SGDN_SOLVERS(SGDN_ADD_SOLVER)
    return r;
  }();
  return registry;
}

Registry<Score>& score_registry() {
  static Registry<Score> registry = [] {
    Registry<Score> r("score");
#define SGDN_ADD_SCORE(name) r.add(score_entry_##name());
    SGDN_SCORES(SGDN_ADD_SCORE)
    return r;
  }();
  return registry;
}

Registry<Selector>& selector_registry() {
  static Registry<Selector> registry = [] {
    Registry<Selector> r("selector");
#define SGDN_ADD_SELECTOR(name) r.add(selector_entry_##name());
    SGDN_SELECTORS(SGDN_ADD_SELECTOR)
    return r;
  }();
  return registry;
}

}  // namespace sgdn
