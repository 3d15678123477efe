// The project's default configuration: what the `sgdn` program (experiments/config.cpp), the C ABI
// (sgdn_cuda_default_config) and the Python module (which asks the C ABI) take for every setting left
// unset, so the three run the same configuration when nothing is set. Sparse: the banded solver, the
// head_budget selector at rho 0.29 with the update_norm score, one decision per head group.
//
// The strategies' own parameters are also registered with their defaults on the CPU side (algorithms/…,
// ParamSpec); tests/test_strategy_table.cpp keeps those equal to the values here.
#pragma once
#include <cstdint>

#include "core/strategy_table.h"

namespace sgdn {
namespace defaults {

inline constexpr int64_t kChunk = 64;  // C, tokens per chunk
inline constexpr int64_t kGroup = 1;   // G, output window in chunks
inline constexpr const char* kSolver = "block_adjacent";
inline constexpr int64_t kSolverBlock = 16;  // block_adjacent: sub-block size b
inline constexpr int64_t kSolverBand = 1;    // block_adjacent: kept sub-diagonal blocks
inline constexpr const char* kSelector = "head_budget";
// update_norm, not survival: survival's persistence weight falls to zero for the last chunks, so a needle
// written late and read by queries at the end is dropped (needle suite, README "Choosing the default").
inline constexpr const char* kScore = "update_norm";
inline constexpr const char* kGranularity = "pair";
inline constexpr double kRho = 0.29;          // fraction of events kept (selectors with a budget)
inline constexpr double kTau = 1.0;           // threshold: keep scores >= tau x the mean
inline constexpr uint64_t kSeed = 0;          // random selector
inline constexpr int64_t kMinPerHead = 0;     // head_budget: events each unit gets first
inline constexpr double kMaxFraction = 1.0;   // head_budget: a unit's cap, round(max_fraction N)
inline constexpr bool kSkipOwnGroup = false;  // survival score

static_assert(strategy_code(StrategyFamily::solver, kSolver) >= 0, "default solver not in the table");
static_assert(strategy_code(StrategyFamily::selector, kSelector) >= 0, "default selector not in the table");
static_assert(strategy_code(StrategyFamily::score, kScore) >= 0, "default score not in the table");
static_assert(strategy_code(StrategyFamily::granularity, kGranularity) >= 0,
              "default granularity not in the table");

}  // namespace defaults
}  // namespace sgdn
