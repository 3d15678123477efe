// Eigen types of the CPU backend. Only .cpp files and algorithms/ headers include this; .cu files never do.
#pragma once
#include <Eigen/Dense>

namespace sgdn {

// Row-major, so that a block of tokens [t, dim] maps onto the input layout without a copy.
template <class S>
using Mat = Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class S>
using Vec = Eigen::Matrix<S, Eigen::Dynamic, 1>;
// A strided view of rows of an input tensor: `rows` tokens whose vectors lie `stride` elements apart.
template <class S>
using ConstRowsMap = Eigen::Map<const Mat<S>, 0, Eigen::OuterStride<>>;

}  // namespace sgdn
