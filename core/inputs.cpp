#include "core/inputs.h"

#include <sstream>

#include "core/error.h"

namespace sgdn {

std::string dims_str(const std::vector<int64_t>& dims) {
  std::ostringstream out;
  out << "[";
  for (size_t i = 0; i < dims.size(); ++i) out << (i ? ", " : "") << dims[i];
  out << "]";
  return out.str();
}

template <class Scalar>
Inputs<Scalar> make_inputs(const Shape& shape, bool with_initial_state) {
  shape.validate();
  Inputs<Scalar> in;
  in.shape = shape;
  const int64_t B = shape.batch, T = shape.tokens;
  in.q = Tensor<Scalar>({B, T, shape.qk_heads, shape.key_dim});
  in.k = Tensor<Scalar>({B, T, shape.qk_heads, shape.key_dim});
  in.v = Tensor<Scalar>({B, T, shape.v_heads, shape.value_dim});
  in.g = Tensor<Scalar>({B, T, shape.v_heads});
  in.beta = Tensor<Scalar>({B, T, shape.v_heads});
  if (with_initial_state)
    in.initial_state = Tensor<Scalar>({B, shape.v_heads, shape.key_dim, shape.value_dim});
  return in;
}

namespace {

template <class Scalar>
void check_tensor(const char* name, const Tensor<Scalar>& t, const std::vector<int64_t>& expected) {
  require(t.dims() == expected, "input ", name, " has shape ", dims_str(t.dims()), " but the shape ",
          "[B, T, heads, dim] of the batch requires ", dims_str(expected));
  const int64_t i = first_index_where(t, [](Scalar x) { return !std::isfinite(double(x)); });
  if (i >= 0) fail("input ", name, " holds a non-finite value (", double(t[i]), ") at flat index ", i);
}

}  // namespace

template <class Scalar>
void validate(const Inputs<Scalar>& in) {
  const Shape& s = in.shape;
  s.validate();
  const int64_t B = s.batch, T = s.tokens;
  check_tensor("q", in.q, {B, T, s.qk_heads, s.key_dim});
  check_tensor("k", in.k, {B, T, s.qk_heads, s.key_dim});
  check_tensor("v", in.v, {B, T, s.v_heads, s.value_dim});
  check_tensor("g", in.g, {B, T, s.v_heads});
  check_tensor("beta", in.beta, {B, T, s.v_heads});
  if (in.has_initial_state()) {
    check_tensor("initial_state", in.initial_state, {B, s.v_heads, s.key_dim, s.value_dim});
  }
  if (const int64_t i = first_index_where(in.g, [](Scalar g) { return !(g <= 0); }); i >= 0)
    fail("input g must be <= 0 (log decay), but g = ", double(in.g[i]), " at flat index ", i);
  const double beta_max = in.allow_negative_eigenvalues ? 2.0 : 1.0;
  if (const int64_t i = first_index_where(in.beta, [&](Scalar b) { return !(b >= 0 && b <= beta_max); });
      i >= 0)
    fail("input beta must lie in [0, ", beta_max, "], but beta = ", double(in.beta[i]), " at flat index ", i,
         in.allow_negative_eigenvalues ? "" : " (allow_negative_eigenvalues raises the limit to 2)");
  require(!(in.scale < 0) && std::isfinite(in.scale), "scale must be a finite positive number, got ",
          in.scale);
}

template <class Scalar>
void l2_normalize_qk(Inputs<Scalar>& in) {
  const int64_t K = in.shape.key_dim;
  for (Tensor<Scalar>* t : {&in.q, &in.k}) {
    for (int64_t row = 0; row < t->size() / K; ++row) {
      Scalar* x = t->data() + row * K;
      double norm2 = 0;
      for (int64_t i = 0; i < K; ++i) norm2 += double(x[i]) * double(x[i]);
      const double inv = norm2 > 0 ? 1.0 / std::sqrt(norm2) : 0.0;
      for (int64_t i = 0; i < K; ++i) x[i] = Scalar(double(x[i]) * inv);
    }
  }
}

template Inputs<float> make_inputs<float>(const Shape&, bool);
template Inputs<double> make_inputs<double>(const Shape&, bool);
template void validate<float>(const Inputs<float>&);
template void validate<double>(const Inputs<double>&);
template void l2_normalize_qk<float>(Inputs<float>&);
template void l2_normalize_qk<double>(Inputs<double>&);

}  // namespace sgdn
