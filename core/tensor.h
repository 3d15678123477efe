// A dense row-major array with its dimensions: the storage of inputs, outputs and per-event data.
#pragma once
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

namespace sgdn {

template <class T>
class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::vector<int64_t> dims, T fill = T(0)) : dims_(std::move(dims)) {
    data_.assign(static_cast<size_t>(count(dims_)), fill);
  }

  static int64_t count(const std::vector<int64_t>& dims) {
    return std::accumulate(dims.begin(), dims.end(), int64_t{1}, std::multiplies<int64_t>());
  }

  const std::vector<int64_t>& dims() const { return dims_; }
  int64_t dim(size_t axis) const { return dims_.at(axis); }
  int64_t size() const { return static_cast<int64_t>(data_.size()); }
  bool empty() const { return data_.empty(); }
  T* data() { return data_.data(); }
  const T* data() const { return data_.data(); }
  T& operator[](int64_t i) { return data_[static_cast<size_t>(i)]; }
  const T& operator[](int64_t i) const { return data_[static_cast<size_t>(i)]; }
  std::vector<T>& values() { return data_; }
  const std::vector<T>& values() const { return data_; }

  template <class U>
  Tensor<U> cast() const {
    Tensor<U> out;
    if (data_.empty()) return out;  // an absent tensor (no initial state) stays absent
    out.reshape_uninitialized(dims_);
    for (size_t i = 0; i < data_.size(); ++i) out.values()[i] = static_cast<U>(data_[i]);
    return out;
  }

  void reshape_uninitialized(std::vector<int64_t> dims) {
    dims_ = std::move(dims);
    data_.resize(static_cast<size_t>(count(dims_)));
  }

 private:
  std::vector<int64_t> dims_;
  std::vector<T> data_;
};

std::string dims_str(const std::vector<int64_t>& dims);

// The first flat index whose value is `bad`, or -1. Scanned on every core (an OpenMP min-reduction): at 128K
// tokens q, k and v are gigabytes.
template <class T, class Bad>
int64_t first_index_where(const Tensor<T>& t, Bad bad) {
  const int64_t n = t.size();
  const T* x = t.data();
  int64_t first = n;
#pragma omp parallel for reduction(min : first) schedule(static)
  for (int64_t i = 0; i < n; ++i)
    if (i < first && bad(x[i])) first = i;
  return first == n ? -1 : first;
}

}  // namespace sgdn
