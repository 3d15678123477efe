#include "data/random_workload.h"

#include <cstdio>

#include "core/error.h"

namespace sgdn {

namespace {

// The ranges of SPEC §9.
constexpr double kDecayScaleMin = 1.0, kDecayScaleMax = 16.0;  // A_h
constexpr double kDecayBiasMin = 1e-3, kDecayBiasMax = 1e-1;   // softplus(b_h)
constexpr double kBetaGain = 1.5;                              // beta = sigmoid(1.5 n)

double log_uniform(rng::Stream& stream, double lo, double hi) {
  return std::exp(stream.uniform(std::log(lo), std::log(hi)));
}

}  // namespace

double softplus(double x) {
  return x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));
}

double sigmoid(double x) {
  return x >= 0 ? 1.0 / (1.0 + std::exp(-x)) : std::exp(x) / (1.0 + std::exp(x));
}

std::string attribute_number(double x) {
  char text[32];
  std::snprintf(text, sizeof text, "%.17g", x);
  return text;
}

std::string attribute_list(const std::vector<double>& xs) {
  std::string out;
  for (size_t i = 0; i < xs.size(); ++i) out += (i ? " " : "") + attribute_number(xs[i]);
  return out;
}

RandomWorkloadOptions RandomWorkloadOptions::from_params(const Params& params) {
  RandomWorkloadOptions options;
  options.initial_state = params.get_bool("initial_state", options.initial_state);
  options.initial_state_std = params.get_double("initial_state_std", options.initial_state_std);
  options.validate();
  return options;
}

std::vector<ParamSpec> RandomWorkloadOptions::param_specs() {
  return {{"initial_state", "false", "give each sequence a random initial state S0"},
          {"initial_state_std", "1.0", "scale of S0: entries ~ N(0, std^2 / K), so S0^T k ~ N(0, std^2)"}};
}

void RandomWorkloadOptions::validate() const {
  require(initial_state_std > 0 && std::isfinite(initial_state_std),
          "workload.initial_state_std = ", initial_state_std, " must be a finite number > 0");
}

std::vector<HeadDecay> random_head_decays(uint64_t seed, int64_t v_heads) {
  std::vector<HeadDecay> decays(static_cast<size_t>(v_heads));
  for (int64_t h = 0; h < v_heads; ++h) {
    rng::Stream stream(seed, rng::Tag::head_decay, {uint64_t(h)});
    HeadDecay& d = decays[size_t(h)];
    d.a = log_uniform(stream, kDecayScaleMin, kDecayScaleMax);
    d.softplus_b = log_uniform(stream, kDecayBiasMin, kDecayBiasMax);
    d.b = std::log(std::expm1(d.softplus_b));  // the inverse of softplus
  }
  return decays;
}

void random_unit_vector(rng::Stream& stream, double* out, int64_t n) {
  // A normalised Gaussian is uniform on the sphere. The norm of a Gaussian vector of length >= 1 is zero
  // with probability 0, and Box–Muller never returns exactly 0 for both numbers of a pair in practice; the
  // loop only guards the impossible case so the result is always a unit vector.
  for (;;) {
    double norm2 = 0;
    for (int64_t i = 0; i < n; ++i) {
      out[i] = stream.normal();
      norm2 += out[i] * out[i];
    }
    if (norm2 > 0) {
      const double inv = 1.0 / std::sqrt(norm2);
      for (int64_t i = 0; i < n; ++i) out[i] *= inv;
      return;
    }
  }
}

void fill_random_token(Inputs<double>& in, uint64_t seed, int64_t b, int64_t t,
                       const std::vector<HeadDecay>& decays, const std::vector<bool>& qk_heads,
                       const std::vector<bool>& v_heads) {
  const Shape& s = in.shape;
  const int64_t T = s.tokens, H = s.qk_heads, HV = s.v_heads, K = s.key_dim, V = s.value_dim;
  const uint64_t ub = uint64_t(b), ut = uint64_t(t);
  for (int64_t h = 0; h < H; ++h) {
    if (!qk_heads.empty() && !qk_heads[size_t(h)]) continue;
    rng::Stream q_stream(seed, rng::Tag::query, {ub, ut, uint64_t(h)});
    random_unit_vector(q_stream, in.q.data() + ((b * T + t) * H + h) * K, K);
    rng::Stream k_stream(seed, rng::Tag::key, {ub, ut, uint64_t(h)});
    random_unit_vector(k_stream, in.k.data() + ((b * T + t) * H + h) * K, K);
  }
  for (int64_t h = 0; h < HV; ++h) {
    if (!v_heads.empty() && !v_heads[size_t(h)]) continue;
    rng::Stream v_stream(seed, rng::Tag::value, {ub, ut, uint64_t(h)});
    double* v = in.v.data() + ((b * T + t) * HV + h) * V;
    for (int64_t j = 0; j < V; ++j) v[j] = v_stream.normal();
    rng::Stream x_stream(seed, rng::Tag::decay_noise, {ub, ut, uint64_t(h)});
    const HeadDecay& d = decays[size_t(h)];
    in.g[(b * T + t) * HV + h] = -d.a * softplus(x_stream.normal() + d.b);
    rng::Stream n_stream(seed, rng::Tag::beta_noise, {ub, ut, uint64_t(h)});
    in.beta[(b * T + t) * HV + h] = sigmoid(kBetaGain * n_stream.normal());
  }
}

void fill_random_initial_state(Inputs<double>& in, uint64_t seed, double std_dev) {
  const Shape& s = in.shape;
  const int64_t HV = s.v_heads, K = s.key_dim, V = s.value_dim;
  in.initial_state = Tensor<double>({s.batch, HV, K, V});
  const double entry_std = std_dev / std::sqrt(double(K));
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t h = 0; h < HV; ++h) {
      rng::Stream stream(seed, rng::Tag::initial_state, {uint64_t(b), uint64_t(h)});
      double* state = in.initial_state.data() + (b * HV + h) * K * V;
      for (int64_t i = 0; i < K * V; ++i) state[i] = entry_std * stream.normal();
    }
  }
}

GeneratedWorkload random_workload(const Shape& shape, uint64_t seed, const RandomWorkloadOptions& options) {
  options.validate();
  GeneratedWorkload out;
  out.inputs = make_inputs<double>(shape, false);
  const std::vector<HeadDecay> decays = random_head_decays(seed, shape.v_heads);
  const int64_t B = shape.batch, T = shape.tokens;
  // Every token has its own streams, so the tokens can be generated in any order, in parallel.
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) fill_random_token(out.inputs, seed, b, t, decays);
  if (options.initial_state) fill_random_initial_state(out.inputs, seed, options.initial_state_std);

  std::vector<double> a, softplus_b;
  for (const HeadDecay& d : decays) {
    a.push_back(d.a);
    softplus_b.push_back(d.softplus_b);
  }
  out.attributes = {{"generator", "random"},
                    {"seed", std::to_string(seed)},
                    {"rng", "splitmix64 streams keyed by (seed, tensor, b, t, head); Box-Muller normals"},
                    {"initial_state", options.initial_state ? "true" : "false"},
                    {"initial_state_std", attribute_number(options.initial_state_std)},
                    {"decay_scale_A", attribute_list(a)},
                    {"decay_softplus_b", attribute_list(softplus_b)}};
  return out;
}

}  // namespace sgdn
