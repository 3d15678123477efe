#include "analysis/metrics.h"

#include <array>
#include <cmath>
#include <limits>
#include <map>

#include "core/error.h"

namespace sgdn {
namespace {
// ‖d‖ / ‖x‖ from the squared norms (‖d‖ itself where x is zero).
double relative_norm(double diff_sq, double norm_sq) {
  return norm_sq > 0 ? std::sqrt(diff_sq / norm_sq) : std::sqrt(diff_sq);
}
}  // namespace

template <class S>
OutputError output_error(const Tensor<S>& o, const Tensor<double>& exact, const Shape& s, int64_t buckets) {
  require(o.dims() == exact.dims(), "output_error: outputs ", dims_str(o.dims()), " and exact outputs ",
          dims_str(exact.dims()), " differ in shape");
  const int64_t B = s.batch, T = s.tokens, HV = s.v_heads, V = s.value_dim;
  buckets = std::max<int64_t>(1, std::min(buckets, T));
  const size_t heads = static_cast<size_t>(HV), nb = static_cast<size_t>(buckets);
  std::vector<double> head_diff(heads), head_norm(heads), bucket_diff(nb), bucket_norm(nb);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      const size_t bucket = size_t(t * buckets / T);
      for (int64_t h = 0; h < HV; ++h) {
        const int64_t base = ((b * T + t) * HV + h) * V;
        double diff = 0, norm = 0;
        for (int64_t j = 0; j < V; ++j) {
          const double e = exact[base + j], d = double(o[base + j]) - e;
          diff += d * d;
          norm += e * e;
        }
        head_diff[size_t(h)] += diff;
        head_norm[size_t(h)] += norm;
        bucket_diff[bucket] += diff;
        bucket_norm[bucket] += norm;
      }
    }
  OutputError err;
  double diff = 0, norm = 0;
  for (int64_t h = 0; h < HV; ++h) {
    err.per_head.push_back(relative_norm(head_diff[size_t(h)], head_norm[size_t(h)]));
    diff += head_diff[size_t(h)];
    norm += head_norm[size_t(h)];
  }
  for (int64_t i = 0; i < buckets; ++i) {
    err.per_bucket.push_back(relative_norm(bucket_diff[size_t(i)], bucket_norm[size_t(i)]));
    err.bucket_start.push_back((i * T + buckets - 1) / buckets);
  }
  err.overall = relative_norm(diff, norm);
  return err;
}

Retention retention(const Tensor<uint8_t>& event_mask, const Tensor<int32_t>& budget) {
  const int64_t B = event_mask.dim(0), N = event_mask.dim(2), units = budget.dim(1);
  Retention r;
  int64_t kept = 0;
  for (int64_t i = 0; i < event_mask.size(); ++i) kept += event_mask[i];
  r.overall = event_mask.size() ? double(kept) / double(event_mask.size()) : 0;
  r.per_unit.assign(size_t(units), 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t u = 0; u < units; ++u)
      r.per_unit[size_t(u)] += double(budget[b * units + u]) / double(N * B);
  return r;
}

Tensor<double> state_error_from_snapshots(const Inputs<double>& in, int64_t chunk,
                                          const Tensor<uint8_t>& event_mask, const Tensor<float>& snapshots,
                                          const Tensor<int32_t>& snapshot_index,
                                          const Tensor<float>& reference_states) {
  const Shape& s = in.shape;
  const int64_t B = s.batch, T = s.tokens, HV = s.v_heads, KV = s.key_dim * s.value_dim;
  const int64_t N = num_chunks(T, chunk);
  require(reference_states.dims() == std::vector<int64_t>{B, HV, N + 1, s.key_dim, s.value_dim},
          "state_error_from_snapshots: reference states have shape ", dims_str(reference_states.dims()));
  // Where each (sequence, head, chunk) snapshot lies; chunk -1 is S0.
  std::map<std::array<int32_t, 3>, int64_t> where;
  for (int64_t i = 0; i < snapshot_index.dim(0); ++i)
    where[{snapshot_index[i * 3], snapshot_index[i * 3 + 1], snapshot_index[i * 3 + 2]}] = i;
  Tensor<double> error({B, HV, N});
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < HV; ++h) {
      auto found = where.find({int32_t(b), int32_t(h), -1});
      require(found != where.end(), "state_error_from_snapshots: no S0 snapshot for sequence ", b, ", head ",
              h);
      const float* snapshot = snapshots.data() + found->second * KV;
      double pending = 0;  // log decay since the snapshot
      for (int64_t c = 0; c < N; ++c) {
        if (event_mask[(b * HV + h) * N + c]) {
          found = where.find({int32_t(b), int32_t(h), int32_t(c)});
          require(found != where.end(), "state_error_from_snapshots: no snapshot after selected chunk ", c);
          snapshot = snapshots.data() + found->second * KV;
          pending = 0;
        } else {
          for (int64_t t = c * chunk; t < std::min(T, (c + 1) * chunk); ++t)
            pending += in.g[(b * T + t) * HV + h];
        }
        const double decay = std::exp(pending);
        const float* ref = reference_states.data() + ((b * HV + h) * (N + 1) + c + 1) * KV;
        double diff = 0, norm = 0;
        for (int64_t i = 0; i < KV; ++i) {
          const double d = decay * double(snapshot[i]) - double(ref[i]);
          diff += d * d;
          norm += double(ref[i]) * double(ref[i]);
        }
        error[(b * HV + h) * N + c] = relative_norm(diff, norm);
      }
    }
  }
  return error;
}

std::vector<double> state_error_by_chunk(const Tensor<double>& state_error) {
  const int64_t B = state_error.dim(0), HV = state_error.dim(1), N = state_error.dim(2);
  std::vector<double> mean(size_t(N), 0.0);
  for (int64_t i = 0; i < B * HV; ++i)
    for (int64_t c = 0; c < N; ++c) mean[size_t(c)] += state_error[i * N + c] / double(B * HV);
  return mean;
}

Cost cost_of(const Shape& s, int64_t chunk, double flops, double dense_flops, double sequential_flops,
             const Tensor<uint8_t>& event_mask) {
  const int64_t N = num_chunks(s.tokens, chunk);
  const double state = 4.0 * double(s.key_dim * s.value_dim);
  int64_t kept = 0;
  for (int64_t i = 0; i < event_mask.size(); ++i) kept += event_mask[i];
  Cost c;
  // NaN where no cost model counted the run: "not measured", not "free".
  c.flops_ratio = dense_flops > 0 ? flops / dense_flops : std::numeric_limits<double>::quiet_NaN();
  const double dense_chain = 4.0 * double(s.tokens) * s.key_dim * s.value_dim * double(s.batch * s.v_heads);
  c.sequential_ratio = dense_chain > 0 ? sequential_flops / dense_chain : 0;
  c.state_bytes = state * double(kept + s.batch * s.v_heads);  // snapshots: S0 + one per selected event
  c.dense_state_bytes = state * double(N * s.batch * s.v_heads);
  return c;
}

template OutputError output_error<float>(const Tensor<float>&, const Tensor<double>&, const Shape&, int64_t);
template OutputError output_error<double>(const Tensor<double>&, const Tensor<double>&, const Shape&,
                                          int64_t);

}  // namespace sgdn
