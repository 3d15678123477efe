// One chunk of one value head after the parallel pre-pass (SPEC §3): the pieces every later stage uses.
#pragma once
#include <cstdint>

#include "algorithms/eigen_types.h"
#include "core/inputs.h"

namespace sgdn {

template <class S>
struct PreparedChunk {
  int64_t index = 0;      // chunk number c
  int64_t length = 0;     // tokens in this chunk (the last may be short)
  Mat<S> q;               // [length, K]
  Mat<S> k;               // [length, K]
  Mat<S> v;               // [length, V]
  Vec<S> beta;            // [length]
  Vec<S> gamma;           // [length], inclusive cumulative log decay inside the chunk
  S chunk_log_decay = 0;  // Γ = gamma[last]
  Mat<S> l;               // [length, length] strictly lower: diag(β) K Kᵀ ⊙ D
  Mat<S> u;               // [length, V] = T_c (β ⊙ V)
  Mat<S> w;               // [length, K] = T_c (β ⊙ e^γ ⊙ K)
  Mat<S> k_to_end;        // [length, K] = e^{Γ−γ} ⊙ K, the keys as the state at chunk end sees them
};

class Solver;

// Fills the token data of chunk c of value head h in sequence b (chunks of `chunk` tokens): q, k, v, β, γ,
// Γ and the keys seen from the chunk's end. q, k and v are copied out of the inputs.
template <class S>
void gather_chunk(const Inputs<S>& in, int64_t b, int64_t h, int64_t chunk, int64_t c, PreparedChunk<S>& out);

// L = strictly_lower(diag(β) K Kᵀ ⊙ D), then U and W through the solver (SPEC §3, §4).
template <class S>
void solve_chunk(const Solver& solver, PreparedChunk<S>& c);

}  // namespace sgdn
