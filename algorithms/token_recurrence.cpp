// SPEC §2 token by token, in float64, with plain loops: the ground truth. Deliberately naive.
#include <cmath>
#include <vector>

#include "algorithms/engine.h"

namespace sgdn {

TokenRecurrenceResult token_recurrence(const Inputs<double>& in) {
  validate(in);
  const Shape& s = in.shape;
  const int64_t B = s.batch, T = s.tokens, H = s.qk_heads, HV = s.v_heads, K = s.key_dim, V = s.value_dim;
  const double scale = in.effective_scale();
  TokenRecurrenceResult out;
  out.o = Tensor<double>({B, T, HV, V});
  out.final_state = Tensor<double>({B, HV, K, V});

#pragma omp parallel for collapse(2) schedule(dynamic)
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < HV; ++h) {
      const int64_t hq = s.qk_head_of(h);
      std::vector<double> state(static_cast<size_t>(K * V), 0.0), read(static_cast<size_t>(V));
      if (in.has_initial_state()) {
        const double* s0 = in.initial_state.data() + (b * HV + h) * K * V;
        state.assign(s0, s0 + K * V);
      }
      for (int64_t t = 0; t < T; ++t) {
        const double* q = in.q.data() + ((b * T + t) * H + hq) * K;
        const double* k = in.k.data() + ((b * T + t) * H + hq) * K;
        const double* v = in.v.data() + ((b * T + t) * HV + h) * V;
        const double decay = std::exp(in.g[(b * T + t) * HV + h]);
        const double beta = in.beta[(b * T + t) * HV + h];
        for (double& x : state) x *= decay;        // S̃ = e^g S
        std::fill(read.begin(), read.end(), 0.0);  // S̃ᵀ k
        for (int64_t i = 0; i < K; ++i)
          for (int64_t j = 0; j < V; ++j) read[j] += state[i * V + j] * k[i];
        for (int64_t j = 0; j < V; ++j) read[j] = beta * (v[j] - read[j]);
        for (int64_t i = 0; i < K; ++i)  // S = S̃ + β k (v − S̃ᵀk)ᵀ
          for (int64_t j = 0; j < V; ++j) state[i * V + j] += k[i] * read[j];
        double* o = out.o.data() + ((b * T + t) * HV + h) * V;  // o = scale Sᵀ q
        for (int64_t j = 0; j < V; ++j) o[j] = 0;
        for (int64_t i = 0; i < K; ++i)
          for (int64_t j = 0; j < V; ++j) o[j] += state[i * V + j] * q[i];
        for (int64_t j = 0; j < V; ++j) o[j] *= scale;
      }
      std::copy(state.begin(), state.end(), out.final_state.data() + (b * HV + h) * K * V);
    }
  }
  return out;
}

}  // namespace sgdn
