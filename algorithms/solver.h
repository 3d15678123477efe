// Intra-chunk solvers (SPEC §4): each one approximates T_c = (I + L)^{-1} and applies it to right-hand sides.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "algorithms/eigen_types.h"
#include "core/params.h"
#include "core/registry.h"
#include "core/strategy.h"

namespace sgdn {

// A solver that keeps the blocks 0 <= I - J <= band of L (block rows of `block` tokens) and inverts the
// banded matrix exactly. `exact` is the banded form with an unbounded band. The GPU backend runs solvers
// that have this form.
struct BandedSolverForm {
  int64_t block = 16;
  int64_t band = 0;
};

class Solver : public Strategy {
 public:
  // rhs <- T_c rhs. `l` is strictly lower triangular (length x length); rhs is length x cols.
  virtual void apply(const Mat<double>& l, Mat<double>& rhs) const = 0;
  virtual void apply(const Mat<float>& l, Mat<float>& rhs) const = 0;
  // Floating-point operations to apply the solver to a full chunk of `chunk` tokens and `cols` right-hand
  // side columns (the cost axis of error-against-work plots).
  virtual double flops_per_chunk(int64_t chunk, int64_t cols) const = 0;
  // Raises sgdn::Error if the solver cannot run with this chunk size (a block that does not divide it).
  virtual void check_chunk(int64_t /*chunk*/) const {}
  virtual std::optional<BandedSolverForm> banded_form() const { return std::nullopt; }
};

// Implements both precisions from one template member `apply_impl<S>` of Derived.
template <class Derived>
class SolverWith : public Solver {
 public:
  void apply(const Mat<double>& l, Mat<double>& rhs) const override { self().apply_impl(l, rhs); }
  void apply(const Mat<float>& l, Mat<float>& rhs) const override { self().apply_impl(l, rhs); }

 private:
  const Derived& self() const { return static_cast<const Derived&>(*this); }
};

Registry<Solver>& solver_registry();

}  // namespace sgdn
