// The random numbers of the synthetic workloads: counter-based, so that a given (seed, tensor, batch, token,
// head) names one stream of numbers on every platform, whatever the batch size, sequence length or order of
// generation.
//
// Why not <random>: std::mt19937_64 is portable, but std::normal_distribution and
// std::uniform_real_distribution are not (libstdc++, libc++ and MSVC use different algorithms), so the same
// seed would give different workloads on different machines. Here everything is spelled out:
//   - keys: SplitMix64's output function (a bijective 64-bit mixer) absorbs the seed and the coordinates;
//   - a stream: SplitMix64 started from that key (Steele, Lea & Flood, "Fast splittable pseudorandom number
//     generators", OOPSLA 2014); its 64-bit outputs are bit-identical everywhere;
//   - uniforms: the top 53 bits, centred in their bin, so they lie in the open interval (0, 1);
//   - normals: Box–Muller, both outputs used. sqrt is exact in IEEE arithmetic; log, cos and sin come from
//     the platform's libm and may differ in the last bit between libms, which is why tests compare normals
//     with a tolerance and raw integers exactly.
#pragma once
#include <cmath>
#include <cstdint>
#include <initializer_list>

namespace sgdn::rng {

inline constexpr uint64_t kGoldenGamma = 0x9e3779b97f4a7c15ULL;  // SplitMix64's increment (2^64 / phi, odd)

// SplitMix64's finaliser: a bijection of 64-bit words with good avalanche.
inline constexpr uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// A key for the coordinates (c0, c1, …) under `seed`. Each coordinate is mixed before it is absorbed, and
// the running hash is mixed after, so neighbouring coordinates give unrelated keys and the order matters.
inline uint64_t derive_key(uint64_t seed, std::initializer_list<uint64_t> coordinates) {
  uint64_t h = mix64(seed + kGoldenGamma);
  for (uint64_t c : coordinates) h = mix64((h ^ mix64(c + 0x632be59bd9b4e019ULL)) + kGoldenGamma);
  return h;
}

// Which tensor a stream feeds: part of every key, so q, k, v, g, … of one token are independent and adding a
// new kind of stream never changes the existing ones. The numbers are fixed forever (they are in the files).
enum class Tag : uint64_t {
  head_decay = 1,        // per value head: A_h and softplus(b_h)
  query = 2,             // per (b, t, qk head)
  key = 3,               // per (b, t, qk head)
  value = 4,             // per (b, t, value head)
  decay_noise = 5,       // per (b, t, value head): the x of g = -A softplus(x + b)
  beta_noise = 6,        // per (b, t, value head): the n of beta = sigmoid(1.5 n)
  initial_state = 7,     // per (b, value head)
  needle_keys = 8,       // per (b, qk head): the orthonormal needle keys
  needle_layout = 9,     // per b: needle positions and codebook indices
  codebook = 10,         // per (codebook entry, retrieval head)
  needle_position = 11,  // per b: the needle cluster's start with workload.positions = random
  key_overlap = 12,      // per (b, t, qk head): which needle key a haystack key leans toward
  strong_write = 13,     // per (b, t): whether the token is a strong haystack write, and its beta
};

// SplitMix64 from a derived key: the numbers of one (seed, tag, coordinates…).
class Stream {
 public:
  explicit Stream(uint64_t key) : state_(key) {}
  Stream(uint64_t seed, Tag tag, std::initializer_list<uint64_t> coordinates)
      : state_(derive_key(seed ^ mix64(static_cast<uint64_t>(tag)), coordinates)) {}

  uint64_t next_u64() {
    state_ += kGoldenGamma;
    return mix64(state_);
  }

  // Uniform in the open interval (0, 1): 53 random bits plus one half, times 2^-53. Never 0, so log(u) is
  // finite in Box–Muller.
  double uniform() { return (double(next_u64() >> 11) + 0.5) * 0x1.0p-53; }

  // Uniform in [lo, hi).
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }

  // An integer in [0, n). The modulo bias is below n / 2^64, far under anything a workload can notice, and
  // the result is exact integer arithmetic, so it is the same everywhere.
  uint64_t below(uint64_t n) { return next_u64() % n; }

  // Standard normal by Box–Muller; the second number of each pair is kept for the next call.
  double normal() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    const double radius = std::sqrt(-2.0 * std::log(uniform()));
    const double angle = 6.283185307179586 * uniform();  // 2 pi
    spare_ = radius * std::sin(angle);
    has_spare_ = true;
    return radius * std::cos(angle);
  }

 private:
  uint64_t state_;
  double spare_ = 0.0;
  bool has_spare_ = false;
};

}  // namespace sgdn::rng
