// The one table of strategies (core/strategies.def) and the one header of defaults (core/defaults.h)
// against the CPU side: every strategy the GPU engine names is registered here under that name, and the
// `sgdn` program and the registered strategies' parameters default to the project's defaults.
#include <catch2/catch.hpp>

#include <set>
#include <string>

#include "algorithms/builtin_strategies.h"
#include "algorithms/engine.h"
#include "core/defaults.h"
#include "core/strategy_table.h"
#include "experiments/config.h"

using namespace sgdn;

namespace {

std::set<std::string> registered(StrategyFamily family) {
  std::vector<std::string> names;
  if (family == StrategyFamily::solver) names = solver_registry().names();
  if (family == StrategyFamily::score) names = score_registry().names();
  if (family == StrategyFamily::selector) names = selector_registry().names();
  return {names.begin(), names.end()};
}

// The registered default of parameter `key` of strategy `name`, as written in its ParamSpec.
template <class Base>
std::string registered_default(const Registry<Base>& registry, const std::string& name,
                               const std::string& key) {
  for (const ParamSpec& spec : registry.entry(name).params)
    if (spec.key == key) return spec.default_value;
  FAIL(registry.family() << " '" << name << "' registers no parameter '" << key << "'");
  return "";
}

}  // namespace

TEST_CASE("every strategy of the GPU table is registered on the CPU side under its name", "[strategies]") {
  int checked = 0;
  for (StrategyFamily family : {StrategyFamily::solver, StrategyFamily::score, StrategyFamily::selector}) {
    const std::set<std::string> names = registered(family);
    for (const StrategyEntry& entry : strategies(family)) {
      if (family == StrategyFamily::score && entry.code == 0) {
        CHECK(std::string(entry.name) == "none");  // the absence of a score: no strategy to register
        continue;
      }
      INFO(family_name(family) << " '" << entry.name << "' (code " << entry.code << ")");
      CHECK(names.count(entry.name) == 1);
      ++checked;
    }
  }
  CHECK(checked == 2 + 2 + 6);
  // Granularities: the engine's enum, in the table's order.
  for (const StrategyEntry& entry : strategies(StrategyFamily::granularity)) {
    INFO("granularity '" << entry.name << "'");
    CHECK(int(parse_granularity(entry.name)) == entry.code);
    CHECK(std::string(granularity_name(Granularity(entry.code))) == entry.name);
  }
}

TEST_CASE("the table's lookups", "[strategies]") {
  CHECK(strategy_code(StrategyFamily::selector, "head_budget") == 4);
  CHECK(strategy_code(StrategyFamily::selector, "oracle") == -1);
  CHECK(strategy_code(StrategyFamily::score, "none") == 0);
  CHECK(std::string(strategy_name(StrategyFamily::score, 2)) == "survival");
  CHECK(strategy_name(StrategyFamily::selector, -1) == nullptr);
  CHECK(strategy_name(StrategyFamily::selector, strategies(StrategyFamily::selector).count) == nullptr);
  CHECK(strategy_names(StrategyFamily::score, "none") == "update_norm, survival");
  CHECK(strategy_codes(StrategyFamily::granularity) == "0 (pair), 1 (head)");
}

TEST_CASE("the program and the registered parameters default to core/defaults.h", "[strategies][config]") {
  const RunSpec r = parse_experiment("", {}).expand().at(0);
  CHECK(r.get("run.chunk") == std::to_string(defaults::kChunk));
  CHECK(r.get("run.group") == std::to_string(defaults::kGroup));
  CHECK(r.get("solver.name") == defaults::kSolver);
  CHECK(std::stoll(r.get("solver.block")) == defaults::kSolverBlock);
  CHECK(std::stoll(r.get("solver.band")) == defaults::kSolverBand);
  CHECK(r.get("selector.name") == defaults::kSelector);
  CHECK(r.get("selector.score") == defaults::kScore);
  CHECK(r.get("selector.granularity") == defaults::kGranularity);
  CHECK(std::stod(r.get("selector.rho")) == defaults::kRho);

  // Each strategy's own registration (a default written in its ParamSpec, which the program shows).
  CHECK(std::stoll(registered_default(solver_registry(), "block_adjacent", "block")) ==
        defaults::kSolverBlock);
  CHECK(std::stoll(registered_default(solver_registry(), "block_adjacent", "band")) == defaults::kSolverBand);
  int with_rho = 0;  // every selector with a budget: random, stride, topk, head_budget
  for (const std::string& name : selector_registry().names())
    for (const ParamSpec& spec : selector_registry().entry(name).params)
      if (spec.key == "rho") {
        INFO("selector " << name);
        CHECK(std::stod(spec.default_value) == defaults::kRho);
        ++with_rho;
      }
  CHECK(with_rho >= 4);
  CHECK(std::stoull(registered_default(selector_registry(), "random", "seed")) == defaults::kSeed);
  CHECK(std::stoll(registered_default(selector_registry(), "head_budget", "min_per_head")) ==
        defaults::kMinPerHead);
  CHECK(std::stod(registered_default(selector_registry(), "head_budget", "max_fraction")) ==
        defaults::kMaxFraction);
  CHECK(std::stod(registered_default(selector_registry(), "threshold", "tau")) == defaults::kTau);
  CHECK((registered_default(score_registry(), "survival", "skip_own_group") == "true") ==
        defaults::kSkipOwnGroup);
}
