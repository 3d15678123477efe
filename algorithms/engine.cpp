// The CPU backend of the chunked engine (SPEC §3, §5, §6) in three phases:
//   1. pre-pass, parallel over (sequence, value head, chunk): decay cumsum, L, the solver, U, W, the
//      chunk statistic of the score;
//   2. selection, per sequence: scores -> units -> event mask;
//   3. per (sequence, value head): the carried state over selected events only (snapshots after each),
//      and the outputs of every chunk from the carried state at its group's start plus the group-local
//      dense steps.
#include "algorithms/engine.h"

#include <array>
#include <chrono>
#include <cmath>
#include <mutex>

#include "core/error.h"

namespace sgdn {

Granularity parse_granularity(const std::string& text) {
  if (text == "pair") return Granularity::pair;
  if (text == "head") return Granularity::head;
  fail("selector.granularity = '", text, "' is not known; allowed: pair, head");
}

const char* granularity_name(Granularity g) {
  return g == Granularity::pair ? "pair" : "head";
}

void EngineConfig::validate(const Shape& shape) const {
  require(chunk >= 1, "run.chunk = ", chunk, " must be >= 1");
  require(group >= 1, "run.group = ", group, " must be >= 1");
  require(solver && score && selector, "engine: solver, score and selector must all be set");
  solver->check_chunk(chunk);
  if (reference_states) {
    const std::vector<int64_t> want = {shape.batch, shape.v_heads, num_chunks(shape.tokens, chunk) + 1,
                                       shape.key_dim, shape.value_dim};
    require(reference_states->dims() == want, "reference states have shape ",
            dims_str(reference_states->dims()), ", expected ", dims_str(want));
  }
}

namespace {

// QKᵀ ⊙ D ⊙ lower_incl_diag: the intra-chunk attention of the output.
template <class S>
Mat<S> intra_chunk_attention(const PreparedChunk<S>& c) {
  Mat<S> a = c.q * c.k.transpose();
  for (int64_t i = 0; i < c.length; ++i) {
    for (int64_t j = 0; j <= i; ++j) a(i, j) *= std::exp(c.gamma[i] - c.gamma[j]);
    for (int64_t j = i + 1; j < c.length; ++j) a(i, j) = 0;
  }
  return a;
}

double relative_error(double diff, double ref) {
  return ref > 0 ? diff / ref : diff;
}

}  // namespace

EngineCost engine_cost(const Shape& shape, const EngineConfig& cfg, const Tensor<uint8_t>& event_mask) {
  const int64_t B = shape.batch, T = shape.tokens, HV = shape.v_heads, K = shape.key_dim, V = shape.value_dim;
  const int64_t C = cfg.chunk, G = cfg.group, N = num_chunks(T, C);
  require(event_mask.dims() == std::vector<int64_t>{B, HV, N}, "engine_cost: event mask of shape ",
          dims_str(event_mask.dims()), " for ", shape.str(), " and chunk ", C);
  EngineCost cost;
  // Phase 3, following run_cpu's control flow: the output of every chunk from the local state, the carried
  // state at selected events, the group-local state inside a group.
  for (int64_t bh = 0; bh < B * HV; ++bh) {
    const uint8_t* mask = event_mask.data() + bh * N;
    bool local_is_carried = true;
    for (int64_t c = 0; c < N; ++c) {
      const double len = double(std::min(C, T - c * C)), kv = len * K * V;
      if (c % G == 0) local_is_carried = true;
      cost.flops += 2 * kv + 2 * kv + 2.0 * len * len * K + 2.0 * len * len * V;
      if (mask[c]) {
        cost.flops += local_is_carried ? 2 * kv : 4 * kv;
        cost.sequential_flops += 4 * kv;
      }
      const bool group_end = c % G == G - 1 || c == N - 1;
      if (!group_end && !(mask[c] && local_is_carried)) {
        cost.flops += 2 * kv;
        local_is_carried = false;
      }
    }
  }
  // The pre-pass of every chunk; the score's write norm counts only where the selector reads scores (dense,
  // random and stride do not; the engine still records the scores for analysis).
  double prepass = 0, dense = 0;
  for (int64_t c = 0; c < N; ++c) {
    const double len = double(std::min(C, T - c * C)), kv = len * K * V;
    prepass += 2 * len * len * K + cfg.solver->flops_per_chunk(int64_t(len), K + V) +
               (cfg.selector->uses_scores() ? 2 * kv : 0.0);
    dense += 2 * len * len * K + len * (len - 1) * (K + V) + 6 * kv + 2 * len * len * (K + V);
  }
  cost.flops += prepass * double(B * HV);
  cost.dense_flops = dense * double(B * HV);
  return cost;
}

template <class S>
EngineResult<S> run_cpu(const Inputs<S>& in, const EngineConfig& cfg) {
  const auto start = std::chrono::steady_clock::now();
  validate(in);
  cfg.validate(in.shape);
  const Shape& s = in.shape;
  const int64_t B = s.batch, T = s.tokens, H = s.qk_heads, HV = s.v_heads, K = s.key_dim, V = s.value_dim;
  const int64_t C = cfg.chunk, N = num_chunks(T, C), G = cfg.group, r = s.group_ratio();
  const bool pair = cfg.granularity == Granularity::pair;
  const int64_t units = pair ? H : HV;
  const S scale = S(in.effective_scale());

  EngineResult<S> res;
  res.o = Tensor<S>({B, T, HV, V});
  res.final_state = Tensor<S>({B, HV, K, V});
  res.event_mask = Tensor<uint8_t>({B, HV, N});
  res.event_score = Tensor<float>({B, HV, N});
  res.budget = Tensor<int32_t>({B, units});
  if (cfg.record_chunk_states) res.chunk_states = Tensor<float>({B, HV, N + 1, K, V});
  if (cfg.reference_states) res.state_error = Tensor<double>({B, HV, N});

  // Phase 1: pre-pass. U and W are kept for phase 3 ([T, V] and [T, K] per head).
  std::vector<Mat<S>> u_all(size_t(B * HV)), w_all(size_t(B * HV));
  std::vector<double> scores(size_t(B * HV * N)), log_decay(size_t(B * HV * N));
  const ScoreContext score_context{C, G};
#pragma omp parallel for collapse(2) schedule(dynamic)
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < HV; ++h) {
      Mat<S>& u = u_all[size_t(b * HV + h)];
      Mat<S>& w = w_all[size_t(b * HV + h)];
      u.resize(T, V);
      w.resize(T, K);
      PreparedChunk<S> chunk;
      std::vector<double> stats(static_cast<size_t>(N)), decay(static_cast<size_t>(N));
      for (int64_t c = 0; c < N; ++c) {
        gather_chunk(in, b, h, C, c, chunk);
        solve_chunk(*cfg.solver, chunk);
        u.middleRows(c * C, chunk.length) = chunk.u;
        w.middleRows(c * C, chunk.length) = chunk.w;
        stats[size_t(c)] = cfg.score->chunk_statistic(chunk);
        decay[size_t(c)] = double(chunk.chunk_log_decay);
      }
      cfg.score->finalize(stats, decay, score_context);
      std::copy(stats.begin(), stats.end(), scores.begin() + (b * HV + h) * N);
      std::copy(decay.begin(), decay.end(), log_decay.begin() + (b * HV + h) * N);
    }
  }

  // Phase 2: selection per sequence, on units (head groups under `pair`, value heads under `head`).
  std::vector<double> unit_scores(size_t(units * N));
  std::vector<uint8_t> unit_mask(size_t(units * N));
  for (int64_t b = 0; b < B; ++b) {
    std::fill(unit_scores.begin(), unit_scores.end(), 0.0);
    for (int64_t h = 0; h < HV; ++h)
      for (int64_t c = 0; c < N; ++c) {
        unit_scores[size_t((pair ? h / r : h) * N + c)] += scores[size_t((b * HV + h) * N + c)];
        res.event_score[(b * HV + h) * N + c] = float(scores[size_t((b * HV + h) * N + c)]);
      }
    std::fill(unit_mask.begin(), unit_mask.end(), uint8_t{0});
    cfg.selector->select(UnitScores{units, N, unit_scores.data()}, b, unit_mask.data());
    for (int64_t unit = 0; unit < units; ++unit) {
      int32_t kept = 0;
      for (int64_t c = 0; c < N; ++c) kept += unit_mask[size_t(unit * N + c)] ? 1 : 0;
      res.budget[b * units + unit] = kept;
    }
    for (int64_t h = 0; h < HV; ++h)
      for (int64_t c = 0; c < N; ++c)
        res.event_mask[(b * HV + h) * N + c] = unit_mask[size_t((pair ? h / r : h) * N + c)];
  }

  // Phase 3: carried state over selected events, and the outputs of every chunk.
  std::mutex snapshot_mutex;
  std::vector<std::pair<std::array<int32_t, 3>, Mat<S>>> snapshots;
#pragma omp parallel for collapse(2) schedule(dynamic)
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < HV; ++h) {
      const uint8_t* mask = res.event_mask.data() + (b * HV + h) * N;
      const Mat<S>& u_head = u_all[size_t(b * HV + h)];
      const Mat<S>& w_head = w_all[size_t(b * HV + h)];
      Mat<S> carried = Mat<S>::Zero(K, V);
      if (in.has_initial_state())
        carried = Eigen::Map<const Mat<S>>(in.initial_state.data() + (b * HV + h) * K * V, K, V);
      S pending = 0;  // log decay accumulated since the last event, not yet applied to `carried`
      auto materialize = [&] {
        if (pending != 0) carried *= std::exp(pending);
        pending = 0;
      };
      std::vector<std::pair<std::array<int32_t, 3>, Mat<S>>> local_snapshots;
      if (cfg.keep_snapshots) local_snapshots.push_back({{int32_t(b), int32_t(h), -1}, carried});
      auto observe_state = [&](int64_t boundary) {  // the carried state Ŝ_boundary
        if (!cfg.record_chunk_states && !cfg.reference_states) return;
        const Mat<S> state = carried * std::exp(pending);
        const int64_t offset = (((b * HV + h) * (N + 1)) + boundary) * K * V;
        if (cfg.record_chunk_states)
          Eigen::Map<Mat<float>>(res.chunk_states.data() + offset, K, V) = state.template cast<float>();
        if (cfg.reference_states && boundary > 0) {
          const Eigen::Map<const Mat<float>> ref(cfg.reference_states->data() + offset, K, V);
          const Mat<double> ref_d = ref.template cast<double>();
          res.state_error[(b * HV + h) * N + boundary - 1] =
              relative_error((state.template cast<double>() - ref_d).norm(), ref_d.norm());
        }
      };
      observe_state(0);

      PreparedChunk<S> chunk;
      Mat<S> local, v_local, v_carried;
      bool local_is_carried = true;  // the local state equals the (materialized) carried state
      for (int64_t c = 0; c < N; ++c) {
        gather_chunk(in, b, h, C, c, chunk);
        const int64_t len = chunk.length;
        chunk.u = u_head.middleRows(c * C, len);
        chunk.w = w_head.middleRows(c * C, len);
        const S decay = std::exp(chunk.chunk_log_decay);
        const bool group_start = c % G == 0, group_end = c % G == G - 1 || c == N - 1;
        if (group_start) {
          materialize();
          local = carried;
          local_is_carried = true;
        }
        // Output of the chunk from the local state (SPEC §6).
        v_local.noalias() = chunk.u - chunk.w * local;
        Mat<S> o = (chunk.gamma.array().exp().matrix().asDiagonal() * chunk.q) * local;
        o.noalias() += intra_chunk_attention(chunk) * v_local;
        Eigen::Map<Mat<S>, 0, Eigen::OuterStride<>>(res.o.data() + ((b * T + c * C) * HV + h) * V, len, V,
                                                    Eigen::OuterStride<>(HV * V)) = scale * o;
        // The carried state follows selected events only (SPEC §5).
        if (mask[c]) {
          if (local_is_carried) {
            carried = decay * local;
            carried.noalias() += chunk.k_to_end.transpose() * v_local;
          } else {
            materialize();
            v_carried.noalias() = chunk.u - chunk.w * carried;
            carried *= decay;
            carried.noalias() += chunk.k_to_end.transpose() * v_carried;
          }
          if (cfg.keep_snapshots) local_snapshots.push_back({{int32_t(b), int32_t(h), int32_t(c)}, carried});
        } else {
          pending += chunk.chunk_log_decay;
        }
        if (!group_end) {  // the group-local state also takes the unselected writes
          if (mask[c] && local_is_carried) {
            local = carried;
          } else {
            local *= decay;
            local.noalias() += chunk.k_to_end.transpose() * v_local;
            local_is_carried = false;
          }
        }
        observe_state(c + 1);
      }
      materialize();
      Eigen::Map<Mat<S>>(res.final_state.data() + (b * HV + h) * K * V, K, V) = carried;
      if (cfg.keep_snapshots) {
        std::lock_guard<std::mutex> lock(snapshot_mutex);
        for (auto& snap : local_snapshots) snapshots.push_back(std::move(snap));
      }
    }
  }

  if (cfg.keep_snapshots) {
    std::sort(snapshots.begin(), snapshots.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    const int64_t count = int64_t(snapshots.size());
    res.snapshots = Tensor<float>({count, K, V});
    res.snapshot_index = Tensor<int32_t>({count, 3});
    for (int64_t i = 0; i < count; ++i) {
      Eigen::Map<Mat<float>>(res.snapshots.data() + i * K * V, K, V) =
          snapshots[size_t(i)].second.template cast<float>();
      for (int j = 0; j < 3; ++j) res.snapshot_index[i * 3 + j] = snapshots[size_t(i)].first[size_t(j)];
    }
  }

  const EngineCost cost = engine_cost(in.shape, cfg, res.event_mask);
  res.flops = cost.flops;
  res.dense_flops = cost.dense_flops;
  res.sequential_flops = cost.sequential_flops;
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return res;
}

template EngineResult<float> run_cpu<float>(const Inputs<float>&, const EngineConfig&);
template EngineResult<double> run_cpu<double>(const Inputs<double>&, const EngineConfig&);

}  // namespace sgdn
