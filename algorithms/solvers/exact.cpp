// `exact`: T_c = (I + L)^{-1} by forward substitution (SPEC §4).
#include "algorithms/builtin_strategies.h"

namespace sgdn {
namespace {

class ExactSolver : public SolverWith<ExactSolver> {
 public:
  template <class S>
  void apply_impl(const Mat<S>& l, Mat<S>& rhs) const {
    // (I + L) is unit lower triangular: its diagonal is implied, L's own diagonal holds zeros.
    l.template triangularView<Eigen::UnitLower>().solveInPlace(rhs);
  }
  double flops_per_chunk(int64_t chunk, int64_t cols) const override {
    return double(chunk) * double(chunk - 1) * double(cols);  // row i: i multiply-adds per column
  }
  std::optional<BandedSolverForm> banded_form() const override {
    return BandedSolverForm{16, std::numeric_limits<int32_t>::max()};
  }
};

}  // namespace

Registry<Solver>::Entry solver_entry_exact() {
  return {"exact", "T_c = (I + L)^{-1} exactly, by forward substitution", {}, [](const Params& p) {
            return make_strategy<ExactSolver, Solver>("exact", p, {});
          }};
}

}  // namespace sgdn
