// The inputs of one batch (SPEC §1) and their validation.
#pragma once
#include <cmath>

#include "core/shape.h"
#include "core/tensor.h"

namespace sgdn {

template <class Scalar>
struct Inputs {
  Shape shape;
  Tensor<Scalar> q;                         // [B, T, H, K]
  Tensor<Scalar> k;                         // [B, T, H, K]
  Tensor<Scalar> v;                         // [B, T, HV, V]
  Tensor<Scalar> g;                         // [B, T, HV], log decay, <= 0
  Tensor<Scalar> beta;                      // [B, T, HV], write strength
  Tensor<Scalar> initial_state;             // [B, HV, K, V], or empty for S0 = 0
  double scale = 0.0;                       // output scale; 0 means 1 / sqrt(K)
  bool allow_negative_eigenvalues = false;  // beta may reach 2 instead of 1

  double effective_scale() const { return scale > 0 ? scale : 1.0 / std::sqrt(double(shape.key_dim)); }
  bool has_initial_state() const { return !initial_state.empty(); }

  template <class U>
  Inputs<U> cast() const {
    Inputs<U> out;
    out.shape = shape;
    out.q = q.template cast<U>();
    out.k = k.template cast<U>();
    out.v = v.template cast<U>();
    out.g = g.template cast<U>();
    out.beta = beta.template cast<U>();
    out.initial_state = initial_state.template cast<U>();
    out.scale = scale;
    out.allow_negative_eigenvalues = allow_negative_eigenvalues;
    return out;
  }
};

// Allocates every tensor of `shape` (zero-filled); with_initial_state adds S0.
template <class Scalar>
Inputs<Scalar> make_inputs(const Shape& shape, bool with_initial_state);

// Throws sgdn::Error naming the tensor and what is wrong: a dimension that does not match the shape,
// NaN or Inf (with the first offending index), g > 0, beta outside [0, 1] (or [0, 2]).
template <class Scalar>
void validate(const Inputs<Scalar>& inputs);

// L2-normalises every q and k vector in place (the `normalize_qk` option).
template <class Scalar>
void l2_normalize_qk(Inputs<Scalar>& inputs);

}  // namespace sgdn
