// The table of core/strategies.def as C++ data: the names and codes of the strategies the GPU engine
// implements, by family, with the lookups that the CUDA backend, the C ABI and the tests share. Host code
// only (nvcc compiles it for the host side of gdn_device.h).
#pragma once
#include <iterator>
#include <string>
#include <string_view>

namespace sgdn {

// The families of core/strategies.def. The numbers are the C ABI's sgdn_cuda_strategy_family.
enum class StrategyFamily : int { solver = 0, score = 1, selector = 2, granularity = 3 };
inline constexpr StrategyFamily kStrategyFamilies[] = {StrategyFamily::solver, StrategyFamily::score,
                                                       StrategyFamily::selector, StrategyFamily::granularity};

struct StrategyEntry {
  const char* name;
  int code;
};

// One family's entries, in code order.
struct StrategyList {
  const char* family;  // "selector"
  const StrategyEntry* entries;
  int count;
  constexpr const StrategyEntry* begin() const { return entries; }
  constexpr const StrategyEntry* end() const { return entries + count; }
};

namespace strategy_table {
inline constexpr StrategyEntry kSolvers[] = {
#define SGDN_SOLVER(name, NAME, code) {#name, code},
#include "core/strategies.def"
};
inline constexpr StrategyEntry kScores[] = {
#define SGDN_SCORE(name, NAME, code) {#name, code},
#include "core/strategies.def"
};
inline constexpr StrategyEntry kSelectors[] = {
#define SGDN_SELECTOR(name, NAME, code) {#name, code},
#include "core/strategies.def"
};
inline constexpr StrategyEntry kGranularities[] = {
#define SGDN_GRANULARITY(name, NAME, code) {#name, code},
#include "core/strategies.def"
};

// Indexed by StrategyFamily.
inline constexpr StrategyList kFamilies[] = {{"solver", kSolvers, int(std::size(kSolvers))},
                                             {"score", kScores, int(std::size(kScores))},
                                             {"selector", kSelectors, int(std::size(kSelectors))},
                                             {"granularity", kGranularities, int(std::size(kGranularities))}};
}  // namespace strategy_table

constexpr StrategyList strategies(StrategyFamily family) {
  return strategy_table::kFamilies[int(family)];
}

constexpr const char* family_name(StrategyFamily family) {
  return strategies(family).family;
}

// The code of strategy `name` in `family`, or -1 where the family has no such strategy.
constexpr int strategy_code(StrategyFamily family, std::string_view name) {
  for (const StrategyEntry& entry : strategies(family))
    if (name == entry.name) return entry.code;
  return -1;
}

// The name of strategy `code` in `family`, or nullptr where the code is out of range.
constexpr const char* strategy_name(StrategyFamily family, int code) {
  const StrategyList list = strategies(family);
  return code >= 0 && code < list.count ? list.entries[code].name : nullptr;
}

// The family's names for messages, "dense, random, ...", leaving out `skip` (e.g. the score `none` where a
// score is required).
inline std::string strategy_names(StrategyFamily family, std::string_view skip = {}) {
  std::string out;
  for (const StrategyEntry& entry : strategies(family)) {
    if (entry.name == skip) continue;
    out += (out.empty() ? "" : ", ") + std::string(entry.name);
  }
  return out;
}

// Codes and names for messages about a numeric code, "0 (dense), 1 (random), ...".
inline std::string strategy_codes(StrategyFamily family) {
  std::string out;
  for (const StrategyEntry& entry : strategies(family))
    out += (out.empty() ? "" : ", ") + std::to_string(entry.code) + " (" + entry.name + ")";
  return out;
}

static_assert(std::string_view(family_name(StrategyFamily::solver)) == "solver" &&
                  std::string_view(family_name(StrategyFamily::score)) == "score" &&
                  std::string_view(family_name(StrategyFamily::selector)) == "selector" &&
                  std::string_view(family_name(StrategyFamily::granularity)) == "granularity",
              "kFamilies is indexed by StrategyFamily");

// A code is the position of its name in the table: strategy_name() indexes by code.
constexpr bool codes_are_positions(StrategyFamily family) {
  const StrategyList list = strategies(family);
  for (int i = 0; i < list.count; ++i)
    if (list.entries[i].code != i) return false;
  return list.count > 0;
}
static_assert(codes_are_positions(StrategyFamily::solver), "core/strategies.def: solver codes 0, 1, ...");
static_assert(codes_are_positions(StrategyFamily::score), "core/strategies.def: score codes 0, 1, ...");
static_assert(codes_are_positions(StrategyFamily::selector), "core/strategies.def: selector codes 0, 1, ...");
static_assert(codes_are_positions(StrategyFamily::granularity),
              "core/strategies.def: granularity codes 0, 1, ...");

}  // namespace sgdn
