#include "core/shape.h"

#include "core/error.h"

namespace sgdn {

void Shape::validate() const {
  require(batch >= 1, "shape: batch must be >= 1, got ", batch);
  require(tokens >= 1, "shape: tokens (T) must be >= 1, got ", tokens);
  require(qk_heads >= 1, "shape: qk_heads (H) must be >= 1, got ", qk_heads);
  require(v_heads >= 1, "shape: v_heads (HV) must be >= 1, got ", v_heads);
  require(v_heads % qk_heads == 0, "shape: v_heads (HV = ", v_heads,
          ") must be a multiple of qk_heads (H = ", qk_heads, ")");
  require(key_dim >= 1, "shape: key_dim (K) must be >= 1, got ", key_dim);
  require(value_dim >= 1, "shape: value_dim (V) must be >= 1, got ", value_dim);
}

std::string Shape::str() const {
  return concat("B=", batch, " T=", tokens, " H=", qk_heads, " HV=", v_heads, " K=", key_dim,
                " V=", value_dim);
}

}  // namespace sgdn
