// `block_adjacent` (SPEC §4): keep the blocks of L with 0 <= I - J <= band (blocks of `block` tokens), drop
// the farther ones, and invert the banded matrix exactly by block forward substitution. Each block row
// needs only its `band` neighbours, so the work grows with band instead of with the chunk.
#include <algorithm>

#include "algorithms/builtin_strategies.h"

namespace sgdn {
namespace {

class BlockAdjacentSolver : public SolverWith<BlockAdjacentSolver> {
 public:
  BlockAdjacentSolver(int64_t block, int64_t band) : block_(block), band_(band) {}

  template <class S>
  void apply_impl(const Mat<S>& l, Mat<S>& rhs) const {
    const int64_t n = l.rows(), cols = rhs.cols();
    for (int64_t row0 = 0; row0 < n; row0 += block_) {
      const int64_t rows = std::min(block_, n - row0);
      const int64_t first = std::max<int64_t>(0, row0 - band_ * block_);  // first kept column
      if (first < row0) {  // subtract the kept sub-diagonal blocks times the solved block rows
        rhs.block(row0, 0, rows, cols).noalias() -=
            l.block(row0, first, rows, row0 - first) * rhs.block(first, 0, row0 - first, cols);
      }
      l.block(row0, row0, rows, rows)
          .template triangularView<Eigen::UnitLower>()
          .solveInPlace(rhs.block(row0, 0, rows, cols));
    }
  }

  double flops_per_chunk(int64_t chunk, int64_t cols) const override {
    double flops = 0;
    for (int64_t row0 = 0; row0 < chunk; row0 += block_) {
      const int64_t rows = std::min(block_, chunk - row0);
      const int64_t first = std::max<int64_t>(0, row0 - band_ * block_);
      flops += 2.0 * rows * (row0 - first) * cols + double(rows) * (rows - 1) * cols;
    }
    return flops;
  }

  void check_chunk(int64_t chunk) const override {
    require(chunk % block_ == 0, "solver.block = ", block_, " does not divide run.chunk = ", chunk);
  }

  std::optional<BandedSolverForm> banded_form() const override { return BandedSolverForm{block_, band_}; }

 private:
  int64_t block_;
  int64_t band_;
};

}  // namespace

Registry<Solver>::Entry solver_entry_block_adjacent() {
  std::vector<ParamSpec> specs = {{"block", "16", "sub-block size b in tokens; must divide the chunk"},
                                  {"band", "1", "kept sub-diagonal blocks (0: block-diagonal)"}};
  return {"block_adjacent", "banded approximation of (I + L)^{-1}: blocks farther than `band` are dropped",
          specs, [specs](const Params& p) {
            const int64_t block = p.get_int_at_least("block", 16, 1);
            const int64_t band = p.get_int_at_least("band", 1, 0);
            return make_strategy<BlockAdjacentSolver, Solver>("block_adjacent", p, specs, block, band);
          }};
}

}  // namespace sgdn
