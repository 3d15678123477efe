// Rules that the CPU strategies (algorithms/selectors/) and the GPU kernels (kernels/) must apply bit for
// bit alike, so that one configuration selects the same events on both backends: the budget rounding of
// SPEC §7, the random selector's stream, and the stride selector's positions. Written once, as
// __host__ __device__ functions; for a plain C++ compiler SGDN_HOST_DEVICE is empty.
#pragma once
#include <math.h>  // ::llround, which CUDA also declares for device code

#include <cstdint>

#if defined(__CUDACC__)
#define SGDN_HOST_DEVICE __host__ __device__
#else
#define SGDN_HOST_DEVICE
#endif

namespace sgdn {

// round(rho n), halves away from zero, of the product as a double (rho = 0.29, n = 50 gives 14: the
// product is 14.499...), as every budget in SPEC §7 is stated.
SGDN_HOST_DEVICE inline int64_t budget_of(double rho, int64_t n) {
  return llround(rho * double(n));
}

// The random selector's stream: splitmix64 (Steele, Lea, Flood 2014) and rejection sampling, written out
// rather than taken from <random>, whose distributions differ between standard libraries.
SGDN_HOST_DEVICE inline uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Uniform in [0, bound), bound >= 1, without modulo bias: draws at or above the largest multiple of bound
// are drawn again.
SGDN_HOST_DEVICE inline uint64_t uniform_below(uint64_t& state, uint64_t bound) {
  const uint64_t limit = ~uint64_t{0} - (~uint64_t{0} % bound);
  uint64_t x;
  do x = splitmix64(state);
  while (x >= limit);
  return x % bound;
}

// The stream's state for one (sequence, unit) of a run with `seed`: each unit draws its own chunks,
// reproducibly, whatever order the units are visited in.
SGDN_HOST_DEVICE inline uint64_t random_stream_start(uint64_t seed, int64_t sequence, int64_t unit) {
  return seed * 0x100000001B3ull ^ (uint64_t(sequence) << 32) ^ uint64_t(unit);
}

// The stride selector's i-th kept chunk of n, i < keep: floor((i + 1/2) n / keep), centred in its interval
// so that keep = n keeps every chunk.
SGDN_HOST_DEVICE inline int64_t stride_chunk(int64_t i, int64_t keep, int64_t n) {
  return ((2 * i + 1) * n) / (2 * keep);
}

}  // namespace sgdn
