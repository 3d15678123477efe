// The `random` workload (SPEC §9): a haystack shaped like the initialisation of a trained Qwen3-Next-style
// GDN layer, so heads range from short to long memory.
//
//   q, k   unit vectors, uniformly distributed on the sphere (normalised Gaussians)
//   v      ~ N(0, 1) per entry
//   beta   = sigmoid(1.5 n),            n ~ N(0, 1) per (token, value head)
//   g      = -A_h softplus(x + b_h),    x ~ N(0, 1) per (token, value head)
//   A_h    log-uniform in [1, 16] per value head; softplus(b_h) log-uniform in [1e-3, 1e-1] per value head
//          (one draw per head, shared by every sequence of the batch, like the weights of one layer)
//   S0     optional: entries ~ N(0, initial_state_std^2 / K), so S0^T k for a unit key has entries of
//          standard deviation initial_state_std, the scale of the values.
//
// Every number comes from data/rng.h streams keyed by (seed, tensor, b, t, head), so a token's inputs do not
// depend on T, B or the other heads: a longer sequence extends a shorter one with the same seed.
//
// Parameters (config section [workload], besides the shape keys and `seed` of SPEC §11):
//   initial_state      = false   give each sequence a random S0
//   initial_state_std  = 1.0     > 0: its scale (see S0 above)
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/inputs.h"
#include "core/params.h"
#include "data/rng.h"

namespace sgdn {

struct RandomWorkloadOptions {
  bool initial_state = false;
  double initial_state_std = 1.0;

  // Reads the keys above from `params` (section `workload`); errors name the key. Other keys are ignored
  // here: the caller checks for unknown keys against param_specs().
  static RandomWorkloadOptions from_params(const Params& params);
  static std::vector<ParamSpec> param_specs();
  void validate() const;
};

// A generated batch and the parameters that produced it, as text (for the HDF5 attributes of
// /workloads/<wid>/inputs): `generator`, `seed`, every option, and the per-head decay draws.
struct GeneratedWorkload {
  Inputs<double> inputs;
  std::map<std::string, std::string> attributes;
};

GeneratedWorkload random_workload(const Shape& shape, uint64_t seed,
                                  const RandomWorkloadOptions& options = {});

// The building blocks, shared with the needle workload.

// The decay parameters of one value head: g = -a * softplus(x + b), softplus(b) = softplus_b.
struct HeadDecay {
  double a = 1.0;
  double softplus_b = 0.01;
  double b = 0.0;  // log(expm1(softplus_b))
};
// One draw per value head from (seed, Tag::head_decay, head).
std::vector<HeadDecay> random_head_decays(uint64_t seed, int64_t v_heads);

double softplus(double x);
double sigmoid(double x);

// Fills `out[0, n)` with a uniformly random unit vector from `stream`.
void random_unit_vector(rng::Stream& stream, double* out, int64_t n);

// Writes the `random` inputs of token (b, t) for the q/k heads and value heads whose flag is set (all when
// the vector is empty): q, k, v, g, beta, as described at the top.
void fill_random_token(Inputs<double>& inputs, uint64_t seed, int64_t b, int64_t t,
                       const std::vector<HeadDecay>& decays, const std::vector<bool>& qk_heads = {},
                       const std::vector<bool>& v_heads = {});

// Writes a random S0 for every sequence and value head (allocating it).
void fill_random_initial_state(Inputs<double>& inputs, uint64_t seed, double std_dev);

// Text for attributes: full precision, so a number read back is the number written.
std::string attribute_number(double x);
std::string attribute_list(const std::vector<double>& xs);

}  // namespace sgdn
