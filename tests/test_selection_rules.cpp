// The rules both backends share (core/selection_rules.h), pinned to known values: a change here changes
// which events a configuration selects, on the CPU and on the GPU alike, and results on file with it.
#include <catch2/catch.hpp>

#include <cstdint>

#include "core/selection_rules.h"

using namespace sgdn;

TEST_CASE("budget_of rounds rho N, halves away from zero, of the double product", "[rules]") {
  CHECK(budget_of(0.5, 1) == 1);  // 0.5
  CHECK(budget_of(0.25, 2) == 1);
  CHECK(budget_of(0.5, 3) == 2);      // 1.5
  CHECK(budget_of(0.5, 5) == 3);      // 2.5: away from zero, not to even
  CHECK(budget_of(0.29, 50) == 14);   // 0.29 x 50 is 14.499999999999998 in double
  CHECK(budget_of(0.29, 100) == 29);  // 28.999999999999996
  CHECK(budget_of(0.29, 0) == 0);
  CHECK(budget_of(1.0, 13) == 13);
  CHECK(budget_of(0.3, 13 * 4) == 16);  // 15.6
}

TEST_CASE("the random stream is splitmix64 with rejection sampling", "[rules]") {
  // splitmix64 from state 0: the reference sequence of its authors' code.
  uint64_t state = 0;
  CHECK(splitmix64(state) == 0xE220A8397B1DCDAFull);
  CHECK(splitmix64(state) == 0x6E789E6AA1B965F4ull);
  CHECK(splitmix64(state) == 0x06C45D188009454Full);
  CHECK(state == 3 * 0x9E3779B97F4A7C15ull);

  state = 0;
  CHECK(uniform_below(state, 10) == 0xE220A8397B1DCDAFull % 10);  // = 5, accepted at once
  CHECK(state == 0x9E3779B97F4A7C15ull);
  state = 0;
  CHECK(uniform_below(state, 1) == 0);
  // bound 2^63 + 1: draws at or above 2^63 + 1 are drawn again; the first (0xE220...) is, the second is kept.
  state = 0;
  CHECK(uniform_below(state, (uint64_t{1} << 63) + 1) == 0x6E789E6AA1B965F4ull);
  CHECK(state == 2 * 0x9E3779B97F4A7C15ull);

  CHECK(random_stream_start(0, 0, 0) == 0);
  CHECK(random_stream_start(5, 1, 2) == (5 * 0x100000001B3ull ^ (uint64_t{1} << 32) ^ 2));
  CHECK(random_stream_start(5, 1, 2) == 0x5010000087Dull);
}

TEST_CASE("stride_chunk centres round(rho N) chunks in equal intervals", "[rules]") {
  CHECK(stride_chunk(0, 3, 10) == 1);
  CHECK(stride_chunk(1, 3, 10) == 5);
  CHECK(stride_chunk(2, 3, 10) == 8);
  for (int64_t i = 0; i < 7; ++i) CHECK(stride_chunk(i, 7, 7) == i);  // every chunk kept
  CHECK(stride_chunk(0, 1, 10) == 5);
}
