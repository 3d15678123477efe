// What every strategy (solver, score, selector) carries: its registered name and its resolved parameters
// (defaults filled in), which are part of a run's identity.
#pragma once
#include <string>

#include "core/params.h"

namespace sgdn {

class Strategy {
 public:
  virtual ~Strategy() = default;
  const std::string& name() const { return name_; }
  const Params& params() const { return params_; }

  void init(std::string name, Params params) {
    name_ = std::move(name);
    params_ = std::move(params);
  }

 private:
  std::string name_;
  Params params_;
};

}  // namespace sgdn
