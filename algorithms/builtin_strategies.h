// What a strategy file needs to define its registry entry.
#pragma once
#include <limits>
#include <memory>

#include "algorithms/score.h"
#include "algorithms/selector.h"
#include "algorithms/solver.h"

namespace sgdn {

// The declared parameters with the section's values where given and the defaults elsewhere: what the run
// records, so that two configurations that differ only in unused keys are the same run.
Params resolve_params(const Params& given, const std::vector<ParamSpec>& specs);

template <class Strategy, class Base, class... Args>
std::unique_ptr<Base> make_strategy(const std::string& name, const Params& given,
                                    const std::vector<ParamSpec>& specs, Args&&... args) {
  auto strategy = std::make_unique<Strategy>(std::forward<Args>(args)...);
  strategy->init(name, resolve_params(given, specs));
  return strategy;
}

}  // namespace sgdn
