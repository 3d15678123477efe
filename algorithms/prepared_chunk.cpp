// The per-chunk pre-pass of SPEC §3 on the CPU: the chunk's token data, then L, the solver, U and W.
#include "algorithms/prepared_chunk.h"

#include <algorithm>
#include <cmath>

#include "algorithms/solver.h"

namespace sgdn {

template <class S>
void gather_chunk(const Inputs<S>& in, int64_t b, int64_t h, int64_t chunk, int64_t c,
                  PreparedChunk<S>& out) {
  const Shape& s = in.shape;
  const int64_t t0 = c * chunk, len = std::min(chunk, s.tokens - t0);
  const int64_t H = s.qk_heads, HV = s.v_heads, K = s.key_dim, V = s.value_dim, hq = s.qk_head_of(h);
  out.index = c;
  out.length = len;
  const int64_t row = b * s.tokens + t0;
  out.q = ConstRowsMap<S>(in.q.data() + (row * H + hq) * K, len, K, Eigen::OuterStride<>(H * K));
  out.k = ConstRowsMap<S>(in.k.data() + (row * H + hq) * K, len, K, Eigen::OuterStride<>(H * K));
  out.v = ConstRowsMap<S>(in.v.data() + (row * HV + h) * V, len, V, Eigen::OuterStride<>(HV * V));
  out.beta.resize(len);
  out.gamma.resize(len);
  S running = 0;
  for (int64_t i = 0; i < len; ++i) {
    running += in.g[(row + i) * HV + h];
    out.gamma[i] = running;
    out.beta[i] = in.beta[(row + i) * HV + h];
  }
  out.chunk_log_decay = running;
  out.k_to_end = ((running - out.gamma.array()).exp().matrix().asDiagonal()) * out.k;
}

template <class S>
void solve_chunk(const Solver& solver, PreparedChunk<S>& c) {
  const int64_t len = c.length, K = c.k.cols(), V = c.v.cols();
  c.l.noalias() = c.k * c.k.transpose();
  for (int64_t i = 0; i < len; ++i) {
    for (int64_t j = 0; j < i; ++j) c.l(i, j) *= c.beta[i] * std::exp(c.gamma[i] - c.gamma[j]);
    for (int64_t j = i; j < len; ++j) c.l(i, j) = 0;
  }
  Mat<S> rhs(len, V + K);
  rhs.leftCols(V) = c.beta.asDiagonal() * c.v;
  rhs.rightCols(K) = (c.beta.array() * c.gamma.array().exp()).matrix().asDiagonal() * c.k;
  solver.apply(c.l, rhs);
  c.u = rhs.leftCols(V);
  c.w = rhs.rightCols(K);
}

template void gather_chunk<float>(const Inputs<float>&, int64_t, int64_t, int64_t, int64_t,
                                  PreparedChunk<float>&);
template void gather_chunk<double>(const Inputs<double>&, int64_t, int64_t, int64_t, int64_t,
                                   PreparedChunk<double>&);
template void solve_chunk<float>(const Solver&, PreparedChunk<float>&);
template void solve_chunk<double>(const Solver&, PreparedChunk<double>&);

}  // namespace sgdn
