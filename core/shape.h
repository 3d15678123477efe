// The sizes of one batch of sequences (SPEC §1).
#pragma once
#include <cstdint>
#include <string>

namespace sgdn {

struct Shape {
  int64_t batch = 1;
  int64_t tokens = 0;     // T
  int64_t qk_heads = 0;   // H
  int64_t v_heads = 0;    // HV, a multiple of H
  int64_t key_dim = 0;    // K
  int64_t value_dim = 0;  // V

  // Sizes in the order of the tensors' dimensions: Shape::of(B, T, H, HV, K, V).
  static Shape of(int64_t batch, int64_t tokens, int64_t qk_heads, int64_t v_heads, int64_t key_dim,
                  int64_t value_dim) {
    return Shape{batch, tokens, qk_heads, v_heads, key_dim, value_dim};
  }
  // r = HV / H: how many value heads share one query/key head (a head group).
  int64_t group_ratio() const { return v_heads / qk_heads; }
  // The query/key head that value head `value_head` reads.
  int64_t qk_head_of(int64_t value_head) const { return value_head / group_ratio(); }
  // Throws sgdn::Error naming the first size that is not valid.
  void validate() const;
  std::string str() const;
};

inline int64_t num_chunks(int64_t tokens, int64_t chunk) {
  return (tokens + chunk - 1) / chunk;
}

}  // namespace sgdn
