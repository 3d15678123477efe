// Helpers shared by the tests: random inputs of any shape, a token-level oracle for the sparse semantics,
// relative errors, and strategy construction by name.
#pragma once
#include <cmath>
#include <memory>
#include <random>

#include "algorithms/engine.h"

namespace sgdn::test {

// One input shape of a test sweep: the shape, the chunk size, and whether the inputs carry an initial state.
struct ShapeCase {
  Shape shape;
  int64_t chunk;
  bool initial_state;
};

// Inputs with unit-norm q and k, N(0,1) values, β in (0, 1), decays from fast to slow forgetting.
inline Inputs<double> random_inputs(const Shape& shape, uint64_t seed, bool with_initial_state) {
  Inputs<double> in = make_inputs<double>(shape, with_initial_state);
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal;
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  for (double& x : in.q.values()) x = normal(rng);
  for (double& x : in.k.values()) x = normal(rng);
  for (double& x : in.v.values()) x = normal(rng);
  for (double& x : in.beta.values()) x = 0.05 + 0.9 * uniform(rng);
  for (int64_t i = 0; i < in.g.size(); ++i) {
    const int64_t head = i % shape.v_heads;
    const double rate =
        std::pow(10.0, -3.0 + 2.5 * double(head) / double(std::max<int64_t>(1, shape.v_heads - 1)));
    in.g[i] = -rate * (0.5 + uniform(rng));
  }
  for (double& x : in.initial_state.values()) x = 0.3 * normal(rng);
  l2_normalize_qk(in);
  return in;
}

template <class A, class B>
double relative_error(const Tensor<A>& x, const Tensor<B>& ref) {
  double diff = 0, norm = 0;
  for (int64_t i = 0; i < ref.size(); ++i) {
    const double d = double(x[i]) - double(ref[i]);
    diff += d * d;
    norm += double(ref[i]) * double(ref[i]);
  }
  return norm > 0 ? std::sqrt(diff) / std::sqrt(norm) : std::sqrt(diff);
}

struct Strategies {
  std::unique_ptr<Solver> solver;
  std::unique_ptr<Score> score;
  std::unique_ptr<Selector> selector;
};

inline Strategies make_strategies(const std::string& solver, const std::string& score,
                                  const std::string& selector,
                                  std::map<std::string, std::string> solver_params = {},
                                  std::map<std::string, std::string> selector_params = {}) {
  Strategies s;
  s.solver = solver_registry().create(solver, Params("solver", solver_params));
  s.score = score_registry().create(score, Params("selector", selector_params));
  s.selector = selector_registry().create(selector, Params("selector", selector_params));
  return s;
}

inline EngineConfig config_of(const Strategies& s, int64_t chunk, int64_t group, Granularity granularity) {
  EngineConfig c;
  c.chunk = chunk;
  c.group = group;
  c.solver = s.solver.get();
  c.score = s.score.get();
  c.selector = s.selector.get();
  c.granularity = granularity;
  return c;
}

// Runs the token recurrence of SPEC §2 over tokens [t0, t1) of one (sequence, head) from `state`,
// writing outputs for those tokens; `state` ends as the state after token t1 - 1.
inline void token_steps(const Inputs<double>& in, int64_t b, int64_t h, int64_t t0, int64_t t1,
                        std::vector<double>& state, Tensor<double>* o) {
  const Shape& s = in.shape;
  const int64_t T = s.tokens, H = s.qk_heads, HV = s.v_heads, K = s.key_dim, V = s.value_dim;
  const int64_t hq = s.qk_head_of(h);
  std::vector<double> read(static_cast<size_t>(V));
  for (int64_t t = t0; t < t1; ++t) {
    const double* q = in.q.data() + ((b * T + t) * H + hq) * K;
    const double* k = in.k.data() + ((b * T + t) * H + hq) * K;
    const double* v = in.v.data() + ((b * T + t) * HV + h) * V;
    const double decay = std::exp(in.g[(b * T + t) * HV + h]), beta = in.beta[(b * T + t) * HV + h];
    for (double& x : state) x *= decay;
    std::fill(read.begin(), read.end(), 0.0);
    for (int64_t i = 0; i < K; ++i)
      for (int64_t j = 0; j < V; ++j) read[size_t(j)] += state[size_t(i * V + j)] * k[i];
    for (int64_t i = 0; i < K; ++i)
      for (int64_t j = 0; j < V; ++j) state[size_t(i * V + j)] += beta * k[i] * (v[j] - read[size_t(j)]);
    if (!o) continue;
    double* out = o->data() + ((b * T + t) * HV + h) * V;
    for (int64_t j = 0; j < V; ++j) out[j] = 0;
    for (int64_t i = 0; i < K; ++i)
      for (int64_t j = 0; j < V; ++j) out[j] += in.effective_scale() * state[size_t(i * V + j)] * q[i];
  }
}

// SPEC §5–§6 written at token level: a selected chunk's write is the exact token recurrence over the chunk
// from the carried state, an unselected chunk only decays it; each group's outputs are the token
// recurrence over the group from the carried state at its start.
struct SparseOracle {
  Tensor<double> o, final_state;
};
inline SparseOracle sparse_token_oracle(const Inputs<double>& in, const Tensor<uint8_t>& mask, int64_t chunk,
                                        int64_t group) {
  const Shape& s = in.shape;
  const int64_t T = s.tokens, HV = s.v_heads, K = s.key_dim, V = s.value_dim, N = num_chunks(T, chunk);
  SparseOracle out{Tensor<double>({s.batch, T, HV, V}), Tensor<double>({s.batch, HV, K, V})};
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t h = 0; h < HV; ++h) {
      std::vector<double> carried(size_t(K * V), 0.0);
      if (in.has_initial_state()) {
        const double* s0 = in.initial_state.data() + (b * HV + h) * K * V;
        carried.assign(s0, s0 + K * V);
      }
      for (int64_t c = 0; c < N; ++c) {
        const int64_t t0 = c * chunk, t1 = std::min(T, t0 + chunk);
        if (c % group == 0) {  // outputs of the whole group from the carried state at its start
          std::vector<double> local = carried;
          token_steps(in, b, h, t0, std::min(T, t0 + group * chunk), local, &out.o);
        }
        if (mask[(b * HV + h) * N + c]) {
          token_steps(in, b, h, t0, t1, carried, nullptr);
        } else {
          double decay = 0;
          for (int64_t t = t0; t < t1; ++t) decay += in.g[(b * T + t) * HV + h];
          for (double& x : carried) x *= std::exp(decay);
        }
      }
      std::copy(carried.begin(), carried.end(), out.final_state.data() + (b * HV + h) * K * V);
    }
  }
  return out;
}

}  // namespace sgdn::test
