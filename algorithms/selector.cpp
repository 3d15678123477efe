#include "algorithms/selector.h"

#include <algorithm>
#include <cstdlib>
#include <numeric>
#include <set>

#include "algorithms/score.h"
#include "core/error.h"

namespace sgdn {

std::vector<int64_t> chunks_by_score(const UnitScores& scores, int64_t unit) {
  std::vector<int64_t> order(size_t(scores.chunks));
  std::iota(order.begin(), order.end(), 0);
  // stable_sort keeps equal scores in chunk order: ties go to the earlier chunk.
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return scores.at(unit, a) > scores.at(unit, b); });
  return order;
}

namespace {
// Equal as numbers where both parse as numbers ("1" and "1.0"), else as text.
bool same_value(const std::string& a, const std::string& b) {
  char* end_a = nullptr;
  char* end_b = nullptr;
  const double x = std::strtod(a.c_str(), &end_a), y = std::strtod(b.c_str(), &end_b);
  if (!a.empty() && !b.empty() && *end_a == '\0' && *end_b == '\0') return x == y;
  return a == b;
}
}  // namespace

bool selector_reads_scores(const std::string& name) {
  if (!selector_registry().contains(name)) return true;
  return selector_registry().create(name, Params("selector", {}))->uses_scores();
}

std::string selector_param_text(const std::string& name, const std::map<std::string, std::string>& config) {
  if (!selector_registry().contains(name)) return "";
  // The score's parameters are "selector.<key>" entries too; a key both register is named once.
  std::vector<const ParamSpec*> specs;
  const auto score = config.find("selector.score");
  if (selector_reads_scores(name) && score != config.end() && score_registry().contains(score->second))
    for (const ParamSpec& spec : score_registry().entry(score->second).params) specs.push_back(&spec);
  for (const ParamSpec& spec : selector_registry().entry(name).params) specs.push_back(&spec);
  std::string out;
  std::set<std::string> named;
  for (const ParamSpec* spec : specs) {
    if (spec->key == "rho" || spec->key == "tau" || !named.insert(spec->key).second) continue;
    const auto it = config.find("selector." + spec->key);
    if (it != config.end() && !same_value(it->second, spec->default_value))
      out += " " + spec->key + "=" + it->second;
  }
  return out;
}

HeadBudgetPlan head_budget_plan(double rho, int64_t min_per_head, double max_fraction, int64_t n,
                                int64_t units) {
  HeadBudgetPlan plan;
  plan.budget = budget_of(rho, n * units);
  plan.floor_each = std::min(min_per_head, n);
  plan.cap = budget_of(max_fraction, n);
  require(plan.floor_each * units <= plan.budget, "selector.min_per_head = ", min_per_head, " needs ",
          plan.floor_each * units, " events but the budget round(rho N heads) is ", plan.budget);
  require(plan.floor_each <= plan.cap, "selector.min_per_head = ", min_per_head,
          " is above the cap round(max_fraction N) = ", plan.cap, " (max_fraction = ", max_fraction,
          ", N = ", n, ")");
  return plan;
}

}  // namespace sgdn
