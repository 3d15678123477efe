// The CUDA backend against the float64 token recurrence (SPEC §2) and against the CPU engine (SPEC §5–§7):
// outputs, final states, event masks, budgets and snapshots, on random inputs of several shapes.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "algorithms/engine.h"
#include "core/strategy_table.h"
#include "kernels/cuda_backend.h"
#include "kernels/gdn_device.h"

#include <cuda_runtime_api.h>

namespace {

using namespace sgdn;

// B sequences of T tokens, H q/k heads, HV value heads, K, V.
Shape make_shape(int64_t b, int64_t t, int64_t h, int64_t hv, int64_t k = 128, int64_t v = 128) {
  return Shape::of(b, t, h, hv, k, v);
}

// SPEC §9 `random`: unit-norm q and k, v ~ N(0,1), β = σ(1.5 n), g = −A_h softplus(x + b_h).
Inputs<float> random_inputs(const Shape& shape, bool with_state, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  Inputs<float> in = make_inputs<float>(shape, with_state);
  const int64_t B = shape.batch, T = shape.tokens, H = shape.qk_heads, HV = shape.v_heads, K = shape.key_dim;
  auto unit_rows = [&](Tensor<float>& x) {
    for (int64_t row = 0; row < B * T * H; ++row) {
      double norm = 0;
      std::vector<double> tmp(static_cast<size_t>(K));
      for (auto& t : tmp) {
        t = normal(rng);
        norm += t * t;
      }
      for (int64_t d = 0; d < K; ++d) x[row * K + d] = float(tmp[size_t(d)] / std::sqrt(norm));
    }
  };
  unit_rows(in.q);
  unit_rows(in.k);
  for (auto& x : in.v.values()) x = float(normal(rng));
  std::vector<double> a(static_cast<size_t>(HV)), bias(static_cast<size_t>(HV));
  for (int64_t h = 0; h < HV; ++h) {
    a[size_t(h)] = std::exp(std::log(1.0) + uniform(rng) * (std::log(16.0) - std::log(1.0)));
    const double sp = std::exp(std::log(1e-3) + uniform(rng) * (std::log(1e-1) - std::log(1e-3)));
    bias[size_t(h)] = std::log(std::expm1(sp));  // softplus(b) = sp
  }
  for (int64_t t = 0; t < B * T; ++t)
    for (int64_t h = 0; h < HV; ++h) {
      const double x = normal(rng) + bias[size_t(h)];
      const double softplus = x > 20 ? x : std::log1p(std::exp(x));
      in.g[t * HV + h] = float(-a[size_t(h)] * softplus);
      in.beta[t * HV + h] = float(1.0 / (1.0 + std::exp(-1.5 * normal(rng))));
    }
  if (with_state)
    for (auto& x : in.initial_state.values()) x = float(0.3 * normal(rng));
  return in;
}

template <class A, class B>
double rel_error(const Tensor<A>& got, const Tensor<B>& ref) {
  REQUIRE(got.size() == ref.size());
  double diff = 0, norm = 0;
  for (int64_t i = 0; i < got.size(); ++i) {
    const double d = double(got[i]) - double(ref[i]);
    if (std::isnan(d)) return INFINITY;
    diff += d * d;
    norm += double(ref[i]) * double(ref[i]);
  }
  return std::sqrt(diff) / std::sqrt(norm);
}

struct Strategies {
  std::unique_ptr<Solver> solver;
  std::unique_ptr<Score> score;
  std::unique_ptr<Selector> selector;
  EngineConfig config;
};

Strategies make_strategies(const std::string& solver, std::map<std::string, std::string> solver_params,
                           const std::string& score, const std::string& selector,
                           std::map<std::string, std::string> selector_params, int64_t chunk, int64_t group,
                           Granularity granularity, std::map<std::string, std::string> score_params = {}) {
  Strategies s;
  s.solver = solver_registry().create(solver, Params("solver", std::move(solver_params)));
  s.score = score_registry().create(score, Params("selector", std::move(score_params)));
  s.selector = selector_registry().create(selector, Params("selector", std::move(selector_params)));
  s.config.chunk = chunk;
  s.config.group = group;
  s.config.solver = s.solver.get();
  s.config.score = s.score.get();
  s.config.selector = s.selector.get();
  s.config.granularity = granularity;
  return s;
}

struct Case {
  Shape shape;
  bool initial_state;
  int64_t group;
};

std::vector<Case> dense_cases() {
  return {
      {make_shape(1, 200, 2, 2, 64, 64), false, 1},    // r = 1, ragged last chunk (200 = 3*64 + 8)
      {make_shape(2, 130, 2, 4, 128, 64), true, 1},    // r = 2, batch, initial state, ragged
      {make_shape(1, 256, 1, 4, 128, 128), true, 3},   // r = 4, G = 3
      {make_shape(1, 64, 2, 2, 32, 128), false, 2},    // exactly one chunk
      {make_shape(1, 7, 1, 2, 16, 16), true, 1},       // shorter than a chunk
      {make_shape(1, 333, 2, 4, 128, 128), false, 4},  // Qwen-like head dims, ragged, G = 4
      {make_shape(1, 150, 1, 1, 48, 80), true, 1},     // V = 80: 16-column tiles
  };
}

}  // namespace

TEST_CASE("CUDA dense exact matches the float64 token recurrence", "[gpu][dense]") {
  int index = 0;
  for (const Case& cs : dense_cases()) {
    for (CudaPrecision precision : {CudaPrecision::float32, CudaPrecision::bfloat16}) {
      const bool bf16 = precision == CudaPrecision::bfloat16;
      Inputs<float> in = random_inputs(cs.shape, cs.initial_state, 1000 + uint64_t(index));
      // The reference sees exactly the inputs the GPU sees: bf16-rounded where the GPU reads bf16.
      Inputs<float> seen = in;
      if (bf16)
        for (Tensor<float>* x : {&seen.q, &seen.k, &seen.v, &seen.beta})
          for (auto& value : x->values()) {
            uint32_t bits;
            std::memcpy(&bits, &value, 4);
            bits += 0x7fffu + ((bits >> 16) & 1u);
            bits &= 0xffff0000u;
            std::memcpy(&value, &bits, 4);
          }
      const TokenRecurrenceResult ref = token_recurrence(seen.cast<double>());
      // Against the original fp32 inputs too: what a user of bf16 loses in total.
      const TokenRecurrenceResult ref_fp32 = token_recurrence(in.cast<double>());
      Strategies s = make_strategies("exact", {}, "survival", "dense", {}, 64, cs.group, Granularity::pair);
      CudaRunOptions options;
      options.input_precision = precision;
      const EngineResult<float> gpu = run_cuda(in, s.config, options);
      const double err_o = rel_error(gpu.o, ref.o);
      const double err_s = rel_error(gpu.final_state, ref.final_state);
      const double err_total = rel_error(gpu.o, ref_fp32.o);
      std::printf(
          "dense %s T=%lld H=%lld HV=%lld K=%lld V=%lld S0=%d G=%lld: rel err o %.3e state %.3e (vs fp32 "
          "inputs %.3e)\n",
          bf16 ? "bf16" : "fp32", (long long)cs.shape.tokens, (long long)cs.shape.qk_heads,
          (long long)cs.shape.v_heads, (long long)cs.shape.key_dim, (long long)cs.shape.value_dim,
          int(cs.initial_state), (long long)cs.group, err_o, err_s, err_total);
      INFO("case " << index << (bf16 ? " bf16" : " fp32"));
      CHECK(err_o <= 1e-4);
      CHECK(err_s <= 1e-4);
      CHECK(err_total <= (bf16 ? 1e-2 : 1e-4));
      for (uint8_t m : gpu.event_mask.values()) REQUIRE(m == 1);
    }
    ++index;
  }
}

TEST_CASE("CUDA sparse engine matches the CPU engine: masks, budgets, outputs, snapshots", "[gpu][sparse]") {
  const Shape shape = make_shape(2, 64 * 12 + 20, 2, 4, 64, 64);  // 13 chunks, ragged
  const Inputs<float> in = random_inputs(shape, true, 77);
  struct Sel {
    std::string name;
    std::map<std::string, std::string> params;
  };
  const std::vector<Sel> selectors = {
      {"dense", {}},
      {"random", {{"rho", "0.3"}, {"seed", "5"}}},
      {"stride", {{"rho", "0.3"}}},
      {"topk", {{"rho", "0.3"}}},
      {"topk", {{"rho", "1"}}},  // every event: the radix select's shortcut
      {"head_budget", {{"rho", "0.29"}}},
      {"head_budget", {{"rho", "0.05"}}},
      {"head_budget", {{"rho", "1"}}},
      {"head_budget", {{"rho", "0.4"}, {"min_per_head", "2"}}},
      {"head_budget", {{"rho", "0.3"}, {"max_fraction", "0.35"}}},
      {"head_budget", {{"rho", "0.3"}, {"min_per_head", "1"}, {"max_fraction", "0.4"}}},
      // The floor spends the whole budget (13 chunks: round(0.3 N units) = 4 units); the cap leaves exactly
      // the budget's events to the shared select (cap round(0.92 N) = 12 per unit, budget 12 units).
      {"head_budget", {{"rho", "0.3"}, {"min_per_head", "4"}}},
      {"head_budget", {{"rho", "0.92"}, {"max_fraction", "0.92"}}},
      {"threshold", {{"tau", "1.0"}}}};
  struct Solv {
    std::string name;
    std::map<std::string, std::string> params;
  };
  const std::vector<Solv> solvers = {{"exact", {}},
                                     {"block_adjacent", {{"block", "16"}, {"band", "1"}}},
                                     {"block_adjacent", {{"block", "16"}, {"band", "0"}}}};
  int runs = 0, mask_mismatch_runs = 0;
  double worst_o = 0;
  for (const Sel& sel : selectors)
    for (const std::string score : {"survival", "update_norm", "survival+skip_own_group"})
      for (Granularity gran : {Granularity::pair, Granularity::head})
        for (const Solv& solv : solvers)
          for (int64_t group : {1, 2}) {
            const bool skip = score == "survival+skip_own_group";
            Strategies s = make_strategies(
                solv.name, solv.params, skip ? "survival" : score, sel.name, sel.params, 64, group, gran,
                skip ? std::map<std::string, std::string>{{"skip_own_group", "true"}}
                     : std::map<std::string, std::string>{});
            s.config.keep_snapshots = true;
            const EngineResult<float> cpu = run_cpu(in, s.config);
            const EngineResult<float> gpu = run_cuda(in, s.config, CudaRunOptions{});
            ++runs;
            INFO("selector " << sel.name << " score " << score << " granularity " << granularity_name(gran)
                             << " solver " << solv.name
                             << (solv.params.count("band") ? solv.params.at("band") : "") << " G " << group);
            REQUIRE(gpu.event_mask.dims() == cpu.event_mask.dims());
            const double err_score = rel_error(gpu.event_score, cpu.event_score);
            CHECK(err_score <= 1e-4);
            bool same_mask = gpu.event_mask.values() == cpu.event_mask.values();
            if (!same_mask) ++mask_mismatch_runs;
            CHECK(same_mask);
            if (!same_mask) continue;
            CHECK(gpu.budget.values() == cpu.budget.values());
            const double err_o = rel_error(gpu.o, cpu.o);
            const double err_s = rel_error(gpu.final_state, cpu.final_state);
            worst_o = std::max(worst_o, std::max(err_o, err_s));
            CHECK(err_o <= 1e-4);
            CHECK(err_s <= 1e-4);
            REQUIRE(gpu.snapshot_index.values() == cpu.snapshot_index.values());
            CHECK(rel_error(gpu.snapshots, cpu.snapshots) <= 1e-4);
          }
  std::printf(
      "sparse vs run_cpu: %d configurations, %d with a different mask, worst rel err (o, state) %.3e\n", runs,
      mask_mismatch_runs, worst_o);

  // A long sequence (301 chunks: the group records' scan runs in tiles of 256 chunks and carries the events
  // and the decay from one tile to the next) with slow decay (g / 100), so that a wrong pending decay at a
  // group start shows in the outputs, not only a wrong snapshot slot.
  {
    const Shape long_shape = make_shape(1, 64 * 300 + 10, 1, 2, 16, 16);
    Inputs<float> slow = random_inputs(long_shape, true, 91);
    for (auto& x : slow.g.values()) x *= 0.01f;
    for (const Sel& sel : {Sel{"random", {{"rho", "0.3"}, {"seed", "5"}}}, Sel{"stride", {{"rho", "0.1"}}},
                           Sel{"head_budget", {{"rho", "0.29"}}}})
      for (int64_t group : {1, 3}) {
        Strategies s =
            make_strategies("exact", {}, "update_norm", sel.name, sel.params, 64, group, Granularity::head);
        s.config.keep_snapshots = true;
        const EngineResult<float> cpu = run_cpu(slow, s.config);
        const EngineResult<float> gpu = run_cuda(slow, s.config, CudaRunOptions{});
        INFO("301 chunks, selector " << sel.name << " G " << group);
        REQUIRE(gpu.event_mask.values() == cpu.event_mask.values());
        CHECK(rel_error(gpu.o, cpu.o) <= 1e-4);
        CHECK(rel_error(gpu.final_state, cpu.final_state) <= 1e-4);
      }
  }

  // Exact ties: v = 0 from chunk 6 on gives those events the score 0 in every head; budgets that end inside
  // the tied events must keep the earlier chunks, as the CPU does. head_budget without and with a floor (the
  // events it marks passed over).
  Inputs<float> tied = in;
  const int64_t row = shape.v_heads * shape.value_dim;  // v is [B, T, HV, V]
  for (int64_t b = 0; b < shape.batch; ++b)
    for (int64_t i = (b * shape.tokens + 64 * 6) * row; i < (b + 1) * shape.tokens * row; ++i)
      tied.v[i] = 0.f;
  for (const std::string rho : {"0.5", "0.7", "0.93"})
    for (const std::string floor : {"0", "2"})
      for (Granularity gran : {Granularity::pair, Granularity::head}) {
        const Strategies s = make_strategies("exact", {}, "update_norm", "head_budget",
                                             {{"rho", rho}, {"min_per_head", floor}}, 64, 1, gran);
        const EngineResult<float> cpu = run_cpu(tied, s.config);
        const EngineResult<float> gpu = run_cuda(tied, s.config, CudaRunOptions{});
        INFO("ties, head_budget rho " << rho << " floor " << floor << " " << granularity_name(gran));
        CHECK(gpu.event_mask.values() == cpu.event_mask.values());
        CHECK(gpu.budget.values() == cpu.budget.values());
      }

  // A sequence whose unit scores do not fit in the select's shared memory (more than 53 248 events: 3 400
  // chunks of 16 tokens x 16 value heads) keeps them in the workspace: the same masks and budgets.
  const Shape long_shape = make_shape(1, 16 * 3400, 16, 16, 16, 16);
  const Inputs<float> long_in = random_inputs(long_shape, false, 41);
  for (const std::string floor : {"0", "2"}) {
    const Strategies s = make_strategies("exact", {}, "update_norm", "head_budget",
                                         {{"rho", "0.3"}, {"min_per_head", floor}}, 16, 1, Granularity::head);
    const EngineResult<float> cpu = run_cpu(long_in, s.config);
    const EngineResult<float> gpu = run_cuda(long_in, s.config, CudaRunOptions{});
    INFO("head_budget over 54 400 events, floor " << floor);
    CHECK(gpu.event_mask.values() == cpu.event_mask.values());
    CHECK(gpu.budget.values() == cpu.budget.values());
  }
}

namespace {

float round_bf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  bits &= 0xffff0000u;
  std::memcpy(&value, &bits, 4);
  return value;
}

struct VarlenCase {
  std::vector<int64_t> lengths;
  int H = 2, HV = 4, K = 128, V = 128, group = 1;
  bool bf16 = false, out_bf16 = false;
  // Sparse selection: the reference is run_cpu per sequence with these strategies; dense: token_recurrence.
  std::string selector = "dense";
  std::map<std::string, std::string> selector_params;
  std::string score = "survival";
  double tolerance = 1e-4;
  bool tensor_cores = false;  // bf16 tensor-core path: scores may differ in the last bits, so masks may too
  // cu_seqlens as the device receives them, where not the running sum of `lengths` (out of range or not
  // monotone: the chunk table must clamp them to the sequences of `lengths`).
  std::vector<int32_t> cu_given;
  int32_t first = 0;         // tokens before the first sequence (cu_seqlens[0]): in the batch, in no sequence
  int32_t trailing = 0;      // tokens after the last sequence: in the batch, in no sequence
  bool nan_outside = false;  // q, k, v, g, beta of the tokens in no sequence are NaN (nothing may read them)
  // The sparse chain's context parallelism (cuda::Problem::context_parallel, segment_events).
  cuda::Problem::ContextParallel context_parallel = cuda::Problem::ContextParallel::automatic;
  int64_t segment_events = 0;
};
// A packed case on the tensor-core path (bf16 inputs, K = V = 128), checked against SPEC §12's bf16 bound.
VarlenCase tc_varlen_case(std::vector<int64_t> lengths, int H, int HV) {
  VarlenCase vc;
  vc.lengths = std::move(lengths);
  vc.H = H;
  vc.HV = HV;
  vc.bf16 = true;
  vc.tensor_cores = true;
  vc.tolerance = 1e-2;
  return vc;
}

// q, k, v, beta rounded to bf16 in place: what the GPU reads in bf16, for references that read the same.
void round_to_bf16(Inputs<float>& in) {
  for (Tensor<float>* x : {&in.q, &in.k, &in.v, &in.beta})
    for (auto& value : x->values()) value = round_bf16(value);
}

// One sparse configuration through run_cpu and the tensor-core run_cuda (snapshots kept), with the number of
// events whose masks differ (near-ties of scores computed from bf16 products may reorder).
struct TcAgainstCpu {
  EngineResult<float> cpu, gpu;
  int64_t differ = 0;
};
TcAgainstCpu run_tc_against_cpu(const Inputs<float>& in, EngineConfig config, CudaRunOptions options = {}) {
  config.keep_snapshots = true;
  TcAgainstCpu r;
  r.cpu = run_cpu(in, config);
  options.input_precision = CudaPrecision::bfloat16;
  options.tensor_cores = true;
  r.gpu = run_cuda(in, config, options);
  for (int64_t i = 0; i < r.gpu.event_mask.size(); ++i)
    r.differ += r.gpu.event_mask[i] != r.cpu.event_mask[i];
  return r;
}

// Where the masks agree: outputs, final states and snapshots within the bf16 bound; returns the worst error.
double check_tc_outputs(const TcAgainstCpu& r) {
  const double err_o = rel_error(r.gpu.o, r.cpu.o), err_s = rel_error(r.gpu.final_state, r.cpu.final_state);
  CHECK(err_o <= 1e-2);
  CHECK(err_s <= 1e-2);
  REQUIRE(r.gpu.snapshot_index.values() == r.cpu.snapshot_index.values());
  CHECK(rel_error(r.gpu.snapshots, r.cpu.snapshots) <= 1e-2);
  return std::max(err_o, err_s);
}

// Packs random sequences, runs the GPU engine once through the plain-pointer API with cu_seqlens, and
// checks every sequence against its own reference. Returns the worst relative error.
double check_varlen(const VarlenCase& vc) {
  const int H = vc.H, HV = vc.HV, K = vc.K, V = vc.V;
  int64_t total = vc.first;
  for (int64_t l : vc.lengths) total += l;
  const int64_t covered_end = total;  // tokens [first, covered_end) belong to the sequences
  total += vc.trailing;
  const Shape packed_shape = make_shape(1, total, H, HV, K, V);
  Inputs<float> packed = random_inputs(packed_shape, false, 4242 + uint64_t(total));
  if (vc.bf16) round_to_bf16(packed);  // what the GPU reads; the references read the same values
  if (vc.nan_outside) {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    for (int64_t t = 0; t < total; ++t) {
      if (t >= vc.first && t < covered_end) continue;
      for (auto [x, row] : {std::pair<Tensor<float>*, int64_t>{&packed.q, H * K},
                            {&packed.k, H * K},
                            {&packed.v, HV * V},
                            {&packed.g, HV},
                            {&packed.beta, HV}})
        for (int64_t i = 0; i < row; ++i) (*x)[t * row + i] = nan;
    }
  }
  const int64_t S = int64_t(vc.lengths.size());
  std::vector<float> s0(static_cast<size_t>(S * HV * K * V));
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.f, 0.3f);
  for (auto& x : s0) x = normal(rng);

  const bool dense = vc.selector == "dense";
  Strategies strategies = make_strategies("block_adjacent", {{"block", "16"}, {"band", "1"}}, vc.score,
                                          vc.selector, vc.selector_params, 64, vc.group, Granularity::pair);
  cuda::Problem p;
  p.num_seqs = S;
  p.total_tokens = total;
  p.qk_heads = H;
  p.v_heads = HV;
  p.key_dim = K;
  p.value_dim = V;
  p.group = vc.group;
  if (dense) {
    p.solver_band = -1;
  } else {
    p.solver_block = 16;
    p.solver_band = 1;
    const int selector_code = strategy_code(StrategyFamily::selector, vc.selector);
    REQUIRE(selector_code >= 0);
    p.selector = cuda::SelectorKind(selector_code);
    p.rho = strategies.selector->params().get_double("rho", 0.29);
    p.tau = strategies.selector->params().get_double("tau", 1.0);
    p.seed = uint64_t(strategies.selector->params().get_int("seed", 0));
    p.min_per_head = strategies.selector->params().get_int("min_per_head", 0);
    const int score_code = strategy_code(StrategyFamily::score, vc.score);
    REQUIRE(score_code >= 0);
    p.score = cuda::ScoreKind(score_code);
  }
  p.input_dtype = vc.bf16 ? cuda::DType::bfloat16 : cuda::DType::float32;
  p.output_dtype = vc.out_bf16 ? cuda::DType::bfloat16 : cuda::DType::float32;
  p.tensor_cores = vc.tensor_cores;
  p.context_parallel = vc.context_parallel;
  p.segment_events = vc.segment_events;
  REQUIRE(cuda::check_problem(p).empty());

  std::vector<void*> allocations;
  auto upload = [&](const std::vector<float>& host, bool as_bf16) {
    void* ptr = nullptr;
    if (as_bf16) {
      std::vector<uint16_t> bits(host.size());
      for (size_t i = 0; i < host.size(); ++i) {
        uint32_t b;
        std::memcpy(&b, &host[i], 4);
        bits[i] = uint16_t(b >> 16);  // already rounded
      }
      REQUIRE(cudaMalloc(&ptr, bits.size() * 2) == cudaSuccess);
      REQUIRE(cudaMemcpy(ptr, bits.data(), bits.size() * 2, cudaMemcpyHostToDevice) == cudaSuccess);
    } else {
      REQUIRE(cudaMalloc(&ptr, std::max<size_t>(host.size(), 1) * 4) == cudaSuccess);
      REQUIRE(cudaMemcpy(ptr, host.data(), host.size() * 4, cudaMemcpyHostToDevice) == cudaSuccess);
    }
    allocations.push_back(ptr);
    return ptr;
  };
  auto alloc = [&](size_t bytes, int poison) {
    void* ptr = nullptr;
    REQUIRE(cudaMalloc(&ptr, std::max<size_t>(bytes, 1)) == cudaSuccess);
    REQUIRE(cudaMemset(ptr, poison, std::max<size_t>(bytes, 1)) == cudaSuccess);
    allocations.push_back(ptr);
    return ptr;
  };
  std::vector<int32_t> cu(static_cast<size_t>(S + 1), vc.first);
  std::vector<int64_t> chunk_offset(static_cast<size_t>(S + 1), 0);
  for (int64_t s = 0; s < S; ++s) {
    cu[size_t(s + 1)] = cu[size_t(s)] + int32_t(vc.lengths[size_t(s)]);
    chunk_offset[size_t(s + 1)] = chunk_offset[size_t(s)] + num_chunks(vc.lengths[size_t(s)], 64);
  }
  const int64_t events = chunk_offset.back() * HV;
  cuda::DeviceTensors t;
  t.q = upload(packed.q.values(), vc.bf16);
  t.k = upload(packed.k.values(), vc.bf16);
  t.v = upload(packed.v.values(), vc.bf16);
  t.beta = upload(packed.beta.values(), vc.bf16);
  t.g = static_cast<const float*>(upload(packed.g.values(), false));
  t.initial_state = static_cast<const float*>(upload(s0, false));
  const std::vector<int32_t>& cu_device = vc.cu_given.empty() ? cu : vc.cu_given;
  REQUIRE(cu_device.size() == cu.size());
  void* dcu = alloc(cu.size() * 4, 0);
  REQUIRE(cudaMemcpy(dcu, cu_device.data(), cu.size() * 4, cudaMemcpyHostToDevice) == cudaSuccess);
  t.cu_seqlens = static_cast<const int32_t*>(dcu);
  const size_t out_elem = vc.out_bf16 ? 2 : 4;
  t.o = alloc(size_t(total * HV * V) * out_elem, 0xFF);
  t.final_state = static_cast<float*>(alloc(s0.size() * 4, 0xFF));
  t.event_mask = static_cast<uint8_t*>(alloc(size_t(events), 0xFF));
  const size_t ws_bytes = cuda::workspace_bytes(p);
  REQUIRE(ws_bytes > 0);
  void* ws = alloc(ws_bytes, 0);
  const std::string error = cuda::forward(p, t, ws, ws_bytes, nullptr);
  REQUIRE(error.empty());
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  std::vector<float> out(static_cast<size_t>(total * HV * V)), fin(s0.size());
  std::vector<uint8_t> mask(static_cast<size_t>(events));
  if (vc.out_bf16) {
    std::vector<uint16_t> bits(out.size());
    REQUIRE(cudaMemcpy(bits.data(), t.o, bits.size() * 2, cudaMemcpyDeviceToHost) == cudaSuccess);
    for (size_t i = 0; i < bits.size(); ++i) {
      const uint32_t b = uint32_t(bits[i]) << 16;
      std::memcpy(&out[i], &b, 4);
    }
  } else {
    REQUIRE(cudaMemcpy(out.data(), t.o, out.size() * 4, cudaMemcpyDeviceToHost) == cudaSuccess);
  }
  REQUIRE(cudaMemcpy(fin.data(), t.final_state, fin.size() * 4, cudaMemcpyDeviceToHost) == cudaSuccess);
  REQUIRE(cudaMemcpy(mask.data(), t.event_mask, mask.size(), cudaMemcpyDeviceToHost) == cudaSuccess);
  for (void* ptr : allocations) cudaFree(ptr);

  double worst = 0;
  for (int64_t s = 0; s < S; ++s) {
    const int64_t t0 = cu[size_t(s)], len = vc.lengths[size_t(s)];
    INFO("sequence " << s << " of length " << len << (vc.bf16 ? " bf16" : " fp32") << " selector "
                     << vc.selector);
    Tensor<float> got_s({1, HV, K, V});
    for (int64_t i = 0; i < got_s.size(); ++i) got_s[i] = fin[size_t(s * HV * K * V + i)];
    if (len == 0) {  // an empty sequence hands its initial state through
      for (int64_t i = 0; i < got_s.size(); ++i) REQUIRE(got_s[i] == s0[size_t(s * HV * K * V + i)]);
      continue;
    }
    Shape one = packed_shape;
    one.tokens = len;
    Inputs<float> in = make_inputs<float>(one, true);
    auto copy_rows = [&](const Tensor<float>& src, Tensor<float>& dst, int64_t row) {
      for (int64_t i = 0; i < len * row; ++i) dst[i] = src[t0 * row + i];
    };
    copy_rows(packed.q, in.q, H * K);
    copy_rows(packed.k, in.k, H * K);
    copy_rows(packed.v, in.v, HV * V);
    copy_rows(packed.g, in.g, HV);
    copy_rows(packed.beta, in.beta, HV);
    for (int64_t i = 0; i < HV * K * V; ++i) in.initial_state[i] = s0[size_t(s * HV * K * V + i)];
    Tensor<float> got_o({1, len, HV, V});
    for (int64_t i = 0; i < got_o.size(); ++i) got_o[i] = out[size_t(t0 * HV * V + i)];
    double err_o, err_s;
    if (dense) {
      const TokenRecurrenceResult ref = token_recurrence(in.cast<double>());
      err_o = rel_error(got_o, ref.o);
      err_s = rel_error(got_s, ref.final_state);
    } else {
      const EngineResult<float> ref = run_cpu(in, strategies.config);
      const std::vector<uint8_t> got_mask(mask.begin() + chunk_offset[size_t(s)] * HV,
                                          mask.begin() + chunk_offset[size_t(s + 1)] * HV);
      if (vc.tensor_cores) {
        int64_t differ = 0;
        for (size_t i = 0; i < got_mask.size(); ++i) differ += got_mask[i] != ref.event_mask.values()[i];
        CHECK(double(differ) <= 0.05 * double(got_mask.size()));
        if (differ) {
          std::printf(
              "  (tensor cores: sequence %lld mask differs in %lld of %zu events; error not compared)\n",
              (long long)s, (long long)differ, got_mask.size());
          continue;
        }
      } else {
        CHECK(got_mask == ref.event_mask.values());
      }
      err_o = rel_error(got_o, ref.o);
      err_s = rel_error(got_s, ref.final_state);
    }
    worst = std::max(worst, std::max(err_o, err_s));
    CHECK(err_o <= vc.tolerance);
    CHECK(err_s <= vc.tolerance);
  }
  return worst;
}

}  // namespace

TEST_CASE("CUDA packed variable-length batch matches per-sequence references", "[gpu][varlen]") {
  for (bool bf16 : {false, true}) {
    VarlenCase vc;
    vc.lengths = {130, 64, 0, 1, 257, 40};
    vc.bf16 = bf16;
    vc.group = 2;
    const double dense_err = check_varlen(vc);
    std::printf("varlen dense %s, lengths 130,64,0,1,257,40, G=2, S0: worst rel err %.3e\n",
                bf16 ? "bf16" : "fp32", dense_err);
    vc.selector = "head_budget";
    vc.selector_params = {{"rho", "0.3"}};
    const double sparse_err = check_varlen(vc);
    std::printf("varlen head_budget %s vs run_cpu per sequence: worst rel err %.3e\n", bf16 ? "bf16" : "fp32",
                sparse_err);
  }
  // More sequences than the chunk table's block has threads (its scans run in tiles), many of them empty or
  // shorter than a chunk; small heads so that the per-sequence references stay cheap.
  VarlenCase many;
  many.H = 1;
  many.HV = 2;
  many.K = many.V = 16;
  const int64_t cycle[] = {0, 1, 3, 17, 64, 65, 0, 5, 130, 2, 63};
  for (int i = 0; i < 1100; ++i) many.lengths.push_back(cycle[i % 11]);
  const double many_err = check_varlen(many);
  std::printf("varlen dense fp32, 1100 sequences (lengths 0-130): worst rel err %.3e\n", many_err);
  // cu_seqlens out of range and decreasing: clamped into [0, total] and made monotone, i.e. the sequences
  // [0, 300), [300, 300), [300, 400); then the same with 20 tokens before the first sequence.
  VarlenCase clamped;
  clamped.lengths = {300, 0, 100};
  clamped.cu_given = {-5, 300, 200, 5000};
  clamped.group = 2;
  const double clamped_err = check_varlen(clamped);
  std::printf("varlen dense fp32, cu_seqlens -5,300,200,5000 over 400 tokens: worst rel err %.3e\n",
              clamped_err);
  clamped.lengths = {280, 0, 100};
  clamped.first = 20;
  clamped.cu_given = {20, 300, 200, 5000};
  const double late_err = check_varlen(clamped);
  std::printf("varlen dense fp32, cu_seqlens 20,300,200,5000 over 400 tokens: worst rel err %.3e\n",
              late_err);
  VarlenCase out16;
  out16.lengths = {100, 200};
  out16.bf16 = out16.out_bf16 = true;
  out16.tolerance = 1e-2;  // bf16 output rounding
  const double err = check_varlen(out16);
  std::printf("varlen dense bf16 in / bf16 out: worst rel err %.3e\n", err);
}

// The tensor-core path (bf16 inputs, K = V = 128, C = 64): bf16 operands with fp32 accumulation, bf16 U/W.
// Bound: SPEC §12's bf16 parity, 1e-2 relative against the float64 recurrence.
TEST_CASE("CUDA tensor-core path matches float64 within the bf16 bound", "[gpu][tc]") {
  const std::vector<Case> cases = {
      {make_shape(1, 333, 2, 4), false, 1},
      {make_shape(2, 130, 2, 4), true, 1},
      {make_shape(1, 64 * 21 + 5, 1, 2), true, 2},
      {make_shape(1, 256, 1, 4), true, 3},
      {make_shape(1, 7, 1, 2), false, 1},
      {make_shape(1, 64 * 40, 2, 4), false, 4},
      // 301 chunks: progress published many times and a second mask window (256 chunks)
      {make_shape(1, 64 * 300 + 9, 1, 2), true, 1},
      // More 32-column recurrence blocks (2 x 32 heads x 4 tiles) than multiprocessors (132 on the H200):
      // 128 blocks of 64 columns, one wave of the warp-specialised one-pass blocks (dense, G = 1).
      {make_shape(2, 64 * 5 + 7, 8, 32), true, 1},
      // 6 x 32 heads: 384 blocks of 64 columns, more than one wave: the one-pass blocks of two warpgroups;
      // then 4 x 32 heads with G = 2, the separate 64-column warpgroup recurrence and mma.sync output blocks
      {make_shape(6, 64 * 3 + 7, 8, 32), true, 1},
      {make_shape(4, 64 * 3 + 7, 8, 32), true, 2}};
  int index = 0;
  double worst = 0;
  for (const Case& cs : cases) {
    const Inputs<float> in = random_inputs(cs.shape, cs.initial_state, 5000 + uint64_t(index));
    const TokenRecurrenceResult ref = token_recurrence(in.cast<double>());
    // The recurrence blocks are 8-warp blocks of warpgroup products at 32 columns (the small cases) beside
    // the output blocks; the 32-head cases take 64 columns: with G = 1 the one-pass forms (recurrence and
    // outputs together), with G = 2 the warpgroup recurrence blocks and the separate output stage.
    {
      Strategies s = make_strategies("exact", {}, "survival", "dense", {}, 64, cs.group, Granularity::pair);
      for (bool out16 : {false, true}) {
        CudaRunOptions options;
        options.input_precision = CudaPrecision::bfloat16;
        options.output_precision = out16 ? CudaPrecision::bfloat16 : CudaPrecision::float32;
        options.tensor_cores = true;
        const EngineResult<float> gpu = run_cuda(in, s.config, options);
        const double err_o = rel_error(gpu.o, ref.o), err_s = rel_error(gpu.final_state, ref.final_state);
        std::printf("tc dense T=%lld B=%lld HV=%lld S0=%d G=%lld out %s: rel err o %.3e state %.3e\n",
                    (long long)cs.shape.tokens, (long long)cs.shape.batch, (long long)cs.shape.v_heads,
                    int(cs.initial_state), (long long)cs.group, out16 ? "bf16" : "fp32", err_o, err_s);
        INFO("tc case " << index);
        CHECK(err_o <= 1e-2);
        CHECK(err_s <= 1e-2);
        worst = std::max(worst, std::max(err_o, err_s));
        for (uint8_t m : gpu.event_mask.values()) REQUIRE(m == 1);
      }
      // The snapshots too (the one-pass kernel writes them beside the outputs), against the CPU engine on the
      // bf16-rounded inputs.
      if (cs.group == 1) {
        Inputs<float> rounded = in;
        round_to_bf16(rounded);
        const TcAgainstCpu r = run_tc_against_cpu(rounded, s.config);
        REQUIRE(r.differ == 0);
        worst = std::max(worst, check_tc_outputs(r));
      }
    }
    ++index;
  }
  // Sparse: against run_cpu on the bf16-rounded inputs, where the masks agree (scores in bf16 products may
  // reorder near-ties; at most 5 % of the events may differ). With G = 1 the recurrence blocks of topk,
  // stride, random and the capped head_budget (every chain at most 0.4 N here) have 2 copy stages; uncapped
  // head_budget's, and every sparse one with G > 1, have 3.
  Inputs<float> in = random_inputs(make_shape(2, 64 * 30 + 20, 2, 4), true, 99);
  round_to_bf16(in);
  int compared = 0, configurations = 0;
  for (const std::string sel : {"head_budget", "head_budget capped", "topk", "stride", "random"})
    for (const std::string solver : {"exact", "block_adjacent"})
      for (int64_t group : {1, 2, 4}) {
        const bool capped = sel == "head_budget capped";
        std::map<std::string, std::string> params = {{"rho", "0.29"}};
        if (capped) params["max_fraction"] = "0.4";
        Strategies s = make_strategies(
            solver,
            solver == "exact" ? std::map<std::string, std::string>{}
                              : std::map<std::string, std::string>{{"block", "16"}, {"band", "1"}},
            sel == "topk" || sel == "stride" || sel == "random" ? "survival" : "update_norm",
            capped ? "head_budget" : sel, params, 64, group, Granularity::pair);
        const TcAgainstCpu r = run_tc_against_cpu(in, s.config);
        ++configurations;
        INFO("tc sparse " << sel << " " << solver << " G " << group);
        CHECK(rel_error(r.gpu.event_score, r.cpu.event_score) <= 1e-2);
        CHECK(double(r.differ) <= 0.05 * double(r.gpu.event_mask.size()));
        if (r.differ) continue;
        ++compared;
        worst = std::max(worst, check_tc_outputs(r));
      }
  std::printf("tc sparse vs run_cpu: %d of %d configurations with equal masks compared\n", compared,
              configurations);
  CHECK(compared >= configurations / 2);
  {
    // The pre-pass's block solve skips the products with L's 16 x 16 blocks that the solver's band zeroes,
    // judged from band_first: other bands and solver blocks than the default's, every event kept (the masks
    // agree), against run_cpu. A block skipped wrongly (or kept and never written) shows in the outputs.
    const std::pair<const char*, const char*> bands[] = {{"16", "0"}, {"16", "2"}, {"8", "1"},
                                                         {"8", "3"},  {"32", "0"}, {"32", "1"}};
    for (const auto& [block, band] : bands) {
      const Strategies s = make_strategies("block_adjacent", {{"block", block}, {"band", band}},
                                           "update_norm", "dense", {}, 64, 1, Granularity::pair);
      const TcAgainstCpu r = run_tc_against_cpu(in, s.config);
      INFO("tc block_adjacent block " << block << " band " << band);
      REQUIRE(r.differ == 0);
      const double err = check_tc_outputs(r);
      std::printf("tc block_adjacent block %s band %s, every event: rel err o / state %.3e\n", block, band,
                  err);
      worst = std::max(worst, err);
    }
  }
  {
    // More recurrence blocks than multiprocessors, with skipped events: head_budget against run_cpu. Two
    // sequences of 32 heads (256 32-column warpgroup-product blocks, 2 copy stages, two per multiprocessor on
    // a 132-multiprocessor device) and six (384 64-column blocks, 2 stages, two per multiprocessor, in two
    // waves). Outputs are compared
    // where the masks agree, at least once.
    int wide_compared = 0;
    for (int64_t batch : {2, 6}) {
      Inputs<float> wide = random_inputs(make_shape(batch, 64 * 6 + 20, 8, 32), true, 123);
      round_to_bf16(wide);
      const Strategies s = make_strategies("block_adjacent", {{"block", "16"}, {"band", "1"}}, "update_norm",
                                           "head_budget", {{"rho", "0.29"}}, 64, 1, Granularity::pair);
      const TcAgainstCpu r = run_tc_against_cpu(wide, s.config);
      std::printf("tc sparse, %lld x 32 heads: %lld of %lld events differ\n", (long long)batch,
                  (long long)r.differ, (long long)r.gpu.event_mask.size());
      CHECK(double(r.differ) <= 0.05 * double(r.gpu.event_mask.size()));  // near-ties, as above
      if (r.differ == 0) {
        worst = std::max(worst, check_tc_outputs(r));
        ++wide_compared;
      }
    }
    CHECK(wide_compared >= 1);
  }
  VarlenCase vc = tc_varlen_case({130, 64, 0, 1, 257, 40, 64 * 9}, 2, 4);
  for (int group : {1, 3}) {
    vc.group = group;
    vc.selector = "dense";
    worst = std::max(worst, check_varlen(vc));
    vc.selector = "head_budget";
    vc.selector_params = {{"rho", "0.3"}};
    worst = std::max(worst, check_varlen(vc));
  }
  // No empty sequence: the output stage's order interleaves the sequences' first groups (see table_kernel).
  vc.lengths = {130, 64, 1, 257, 40, 64 * 9};
  for (int group : {1, 3}) {
    vc.group = group;
    vc.selector = "dense";
    vc.selector_params = {};
    worst = std::max(worst, check_varlen(vc));
    vc.selector = "head_budget";
    vc.selector_params = {{"rho", "0.3"}};
    worst = std::max(worst, check_varlen(vc));
  }
  vc.out_bf16 = true;
  vc.selector = "dense";
  vc.selector_params = {};
  worst = std::max(worst, check_varlen(vc));
  // Unequal sequences of 32 value heads (3 x 32 x 4 = 384 32-column blocks: 64-column ones), ragged, each
  // with several groups: the output order's round-robin part (3 groups each) and its rest.
  VarlenCase wide = tc_varlen_case({300, 130, 700}, 8, 32);
  worst = std::max(worst, check_varlen(wide));
  wide.selector = "head_budget";
  wide.selector_params = {{"rho", "0.3"}};
  worst = std::max(worst, check_varlen(wide));
  // NaN in every token outside the sequences (before the first, after the last, whose last chunk is short):
  // nothing may carry them into a sequence's results. The 32-column recurrence blocks (2 x 4 heads) copy K by
  // TMA in whole 64-row boxes, rows past a short last chunk included, and zero those rows before they
  // multiply Vh's zero rows (NaN times zero is NaN): the dense selector's 4-warp blocks, and `stride` at rho
  // 1 (every chunk kept, the last ones too) on a sparse selector's 8-warp blocks. The 64-column warpgroup
  // blocks (3 x 32 heads) copy only a chunk's own rows. head_budget with both scores runs the selection on
  // packed sequences (survival never keeps a unit's last chunk; update_norm's head scores come from the
  // pre-pass).
  struct GapRun {
    const char* selector;
    const char* rho;
    const char* score;
  };
  for (VarlenCase gaps : {tc_varlen_case({150, 151}, 2, 4), tc_varlen_case({300, 130, 701}, 8, 32)}) {
    gaps.first = 37;
    gaps.trailing = 99;
    gaps.nan_outside = true;
    for (const GapRun& run :
         {GapRun{"dense", "", "survival"}, GapRun{"stride", "1", "survival"},
          GapRun{"head_budget", "0.3", "survival"}, GapRun{"head_budget", "0.3", "update_norm"}}) {
      gaps.selector = run.selector;
      gaps.score = run.score;
      gaps.selector_params = *run.rho ? std::map<std::string, std::string>{{"rho", run.rho}}
                                      : std::map<std::string, std::string>{};
      INFO("NaN outside the sequences, " << gaps.HV << " value heads, " << run.selector << " " << run.score);
      worst = std::max(worst, check_varlen(gaps));
    }
  }
  std::printf("tc worst rel err %.3e (bound 1e-2)\n", worst);
}

// The tensor-core output stage starts while the recurrence runs and waits on its progress flags; a missed or
// early flag would read a snapshot or group record before it is written. Outputs, states and masks must equal
// those of the plain serial launch bit for bit (the arithmetic is the same), over several mask windows
// (600 chunks), packed sequences, sparse and dense selectors, G = 1 and G = 3, and repeated runs, with
// recurrence blocks of 32 and of 64 columns (each against its own serial launch: the two sum W S in another
// order). The recurrence's other copy-pipeline depth (2 stages for sparse, 3 for dense) and other runs of
// chunks per output block must give the same bits too.
namespace {
// How many elements of two equally long vectors differ in their bits, and the first of them (-1: none): a
// failure prints two numbers instead of millions of values.
template <class T>
std::pair<int64_t, int64_t> bit_differences(const std::vector<T>& a, const std::vector<T>& b) {
  REQUIRE(a.size() == b.size());
  int64_t count = 0, first = -1;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(T)) != 0) {
      if (count++ == 0) first = int64_t(i);
    }
  return {count, first};
}
}  // namespace

// The output blocks run beside the recurrence, each waiting on its chunks' progress flags, and the mask
// expansion beside both: a missed wait would read a snapshot or a group record before it is written, and
// differ from run to run. Every repeat of a forward gives the same bits: 2 sequences of 4 value heads (32
// recurrence blocks of 32 columns; output runs of 2 chunks under head_budget with G = 1) and 6 of 32 (768
// blocks of 32 columns, more than two per multiprocessor: 64 columns, output runs of 4), head_budget and the
// dense selector (whose packed batch with G = 1 takes the one-pass form), G = 1 and 3.
TEST_CASE("CUDA tensor-core outputs beside the recurrence are the same in every run", "[gpu][tc][overlap]") {
  CudaRunOptions options;
  options.input_precision = CudaPrecision::bfloat16;
  options.output_precision = CudaPrecision::bfloat16;
  options.tensor_cores = true;
  // (The plan would cut the first shape's long chains into segments, whose output stage runs after them.)
  options.context_parallel = CudaContextParallel::off;
  for (const Shape& shape : {make_shape(2, 64 * 600 + 17, 2, 4), make_shape(6, 64 * 50 + 17, 8, 32)}) {
    Inputs<float> in = random_inputs(shape, true, 77);
    round_to_bf16(in);
    for (const std::string sel : {"head_budget", "dense"})
      for (int64_t group : {1, 3}) {
        const Strategies s =
            sel == "dense"
                ? make_strategies("exact", {}, "survival", "dense", {}, 64, group, Granularity::pair)
                : make_strategies("block_adjacent", {{"block", "16"}, {"band", "1"}}, "update_norm",
                                  "head_budget", {{"rho", "0.29"}}, 64, group, Granularity::pair);
        const EngineResult<float> first = run_cuda(in, s.config, options);
        int64_t kept = 0;
        for (uint8_t m : first.event_mask.values()) kept += m;
        INFO(sel << " G " << group << ", " << shape.batch << " x " << shape.v_heads << " value heads, "
                 << kept << " of " << first.event_mask.size() << " events kept");
        CHECK((kept < first.event_mask.size()) == (sel != "dense"));
        for (int repeat = 1; repeat < 8; ++repeat) {
          const EngineResult<float> again = run_cuda(in, s.config, options);
          INFO("repeat " << repeat);
          REQUIRE(bit_differences(again.event_mask.values(), first.event_mask.values()).first == 0);
          const auto [o_count, o_first] = bit_differences(again.o.values(), first.o.values());
          const auto [s_count, s_first] =
              bit_differences(again.final_state.values(), first.final_state.values());
          INFO("o: " << o_count << " elements differ, the first at " << o_first
                     << "; final state: " << s_count << ", the first at " << s_first);
          CHECK(o_count == 0);
          CHECK(s_count == 0);
        }
      }
  }
}

// Context parallelism of the sparse chain (kernels/segments.cu), forced on at small shapes: each (sequence,
// value head)'s selected events cut into segments of L_e (1 event; a few; a third of the busiest head's;
// all of them; more than any head has), phase 1's transitions and local states, the combine and the
// replays. Masks, budgets and the snapshot index must equal those of the sequential chain (CP off) exactly.
// Where no head is cut (L_e at least the busiest head's events) the outputs, final states and snapshots are
// the same bits (the same arithmetic in the same order). Where heads are cut, within kCpTolerance
// (relative, Frobenius): both runs round the state to bf16 as an operand at every event, but a replay
// starts from the combine's fp32 start where the sequential chain goes on from its registers, so they agree
// to that rounding, not bit for bit (the float64 reference with the chain's roundings emulated: 2-4e-3
// between the two on the first case, each 2.3e-3 from float64). The decays are scaled down so that every
// head carries its state across many chunks: a wrong combine (a start without its transition, the
// transition transposed, a start one segment off) then moves the states by 5e-2 to 6e-1 there (the same
// emulation), far outside the tolerance. And against the CPU engine (float64) within the bf16 bound, where
// the masks agree.
namespace {
constexpr double kCpTolerance = 1e-2;
}  // namespace

TEST_CASE("CUDA context-parallel sparse chain equals the sequential chain", "[gpu][tc][cp]") {
  struct CpCase {
    Shape shape;
    bool initial_state;
    std::string selector, score;
    std::map<std::string, std::string> params;
  };
  const std::vector<CpCase> cases = {
      // ragged last chunk, 2 value heads per q/k head, S0; head_budget gives some pairs most of the events
      {make_shape(1, 64 * 40 + 17, 2, 4), true, "head_budget", "update_norm", {{"rho", "0.29"}}},
      // two sequences packed, 4 value heads per q/k head, no S0
      {make_shape(2, 64 * 23 + 5, 1, 4), false, "topk", "survival", {{"rho", "0.5"}}},
      {make_shape(1, 64 * 30, 2, 2), true, "threshold", "update_norm", {{"tau", "0.5"}}},
      {make_shape(1, 64 * 27 + 63, 1, 2), true, "stride", "survival", {{"rho", "0.5"}}},
      {make_shape(1, 64 * 25 + 1, 1, 2), false, "random", "survival", {{"rho", "0.6"}, {"seed", "3"}}},
  };
  int index = 0, compared_to_cpu = 0;
  double worst = 0;
  for (const CpCase& cs : cases) {
    Inputs<float> in = random_inputs(cs.shape, cs.initial_state, 600 + uint64_t(index++));
    for (auto& g : in.g.values()) g *= 0.01f;  // slow decays: states carried across many chunks
    round_to_bf16(in);
    Strategies s = make_strategies("block_adjacent", {{"block", "16"}, {"band", "1"}}, cs.score, cs.selector,
                                   cs.params, 64, 1, Granularity::pair);
    s.config.keep_snapshots = true;
    CudaRunOptions options;
    options.input_precision = CudaPrecision::bfloat16;
    options.tensor_cores = true;
    options.context_parallel = CudaContextParallel::off;
    const EngineResult<float> off = run_cuda(in, s.config, options);
    const EngineResult<float> cpu = run_cpu(in, s.config);
    // The busiest (sequence, value head)'s events.
    const int64_t N = off.event_mask.size() / (cs.shape.batch * cs.shape.v_heads);
    int64_t most = 0;
    for (int64_t row = 0; row < cs.shape.batch * cs.shape.v_heads; ++row) {
      int64_t kept = 0;
      for (int64_t c = 0; c < N; ++c) kept += off.event_mask[row * N + c];
      most = std::max(most, kept);
    }
    REQUIRE(most >= 6);  // several segments at the shorter lengths
    for (const int64_t events : {int64_t(1), int64_t(2), int64_t(5), most / 3 + 1, most, most + 7}) {
      options.context_parallel = CudaContextParallel::on;
      options.segment_events = events;
      TcAgainstCpu r;
      r.gpu = run_cuda(in, s.config, options);
      r.cpu = cpu;
      for (int64_t i = 0; i < r.gpu.event_mask.size(); ++i)
        r.differ += r.gpu.event_mask[i] != r.cpu.event_mask[i];
      const EngineResult<float>& on = r.gpu;
      INFO(cs.selector << ", " << cs.shape.batch << " x " << cs.shape.tokens << " tokens, "
                       << cs.shape.v_heads << " value heads, busiest head " << most << " of " << N
                       << " events, L_e " << events);
      REQUIRE(on.event_mask.values() == off.event_mask.values());
      REQUIRE(on.budget.values() == off.budget.values());
      REQUIRE(on.snapshot_index.values() == off.snapshot_index.values());
      if (events >= most) {  // no head cut
        CHECK(bit_differences(on.o.values(), off.o.values()).first == 0);
        CHECK(bit_differences(on.final_state.values(), off.final_state.values()).first == 0);
        CHECK(bit_differences(on.snapshots.values(), off.snapshots.values()).first == 0);
      }
      const double err_o = rel_error(on.o, off.o), err_s = rel_error(on.final_state, off.final_state),
                   err_snap = rel_error(on.snapshots, off.snapshots);
      std::printf("cp %s L_e %lld (busiest %lld): against CP off o %.3e state %.3e snapshots %.3e\n",
                  cs.selector.c_str(), (long long)events, (long long)most, err_o, err_s, err_snap);
      CHECK(err_o <= kCpTolerance);
      CHECK(err_s <= kCpTolerance);
      CHECK(err_snap <= kCpTolerance);
      worst = std::max({worst, err_o, err_s, err_snap});
      CHECK(double(r.differ) <= 0.05 * double(on.event_mask.size()));  // bf16 scores' near-ties
      if (r.differ == 0) {
        check_tc_outputs(r);
        ++compared_to_cpu;
      }
    }
  }
  CHECK(compared_to_cpu >= 6);  // every length of at least one case
  std::printf("cp worst rel err against CP off %.3e (bound %.0e)\n", worst, kCpTolerance);
  // Sequences of unequal lengths (empty, one token, ragged) packed, each against its own CPU reference.
  VarlenCase vc = tc_varlen_case({700, 64, 0, 1, 1500, 333}, 2, 4);
  vc.selector = "head_budget";
  vc.selector_params = {{"rho", "0.29"}};
  vc.score = "update_norm";
  vc.context_parallel = cuda::Problem::ContextParallel::on;
  for (const int64_t events : {int64_t(1), int64_t(4), int64_t(1000)}) {
    vc.segment_events = events;
    const double err = check_varlen(vc);
    std::printf("cp varlen head_budget L_e %lld: worst rel err %.3e (bound 1e-2)\n", (long long)events, err);
  }
}

namespace {
class NoBandSolver : public sgdn::SolverWith<NoBandSolver> {
 public:
  template <class S>
  void apply_impl(const sgdn::Mat<S>&, sgdn::Mat<S>&) const {}
  double flops_per_chunk(int64_t, int64_t) const override { return 0; }
};
}  // namespace

TEST_CASE("CUDA backend rejects what it cannot run, naming it", "[gpu][errors]") {
  const Shape shape = make_shape(1, 100, 2, 4, 64, 64);
  const Inputs<float> in = random_inputs(shape, false, 9);
  Strategies s = make_strategies("exact", {}, "survival", "dense", {}, 64, 1, Granularity::pair);

  NoBandSolver neumann;
  neumann.init("neumann", Params("solver", {}));
  EngineConfig config = s.config;
  config.solver = &neumann;
  CHECK_THROWS_WITH(run_cuda(in, config, CudaRunOptions{}), Catch::Contains("neumann"));

  Shape wide = shape;
  wide.key_dim = 256;
  CHECK_THROWS_WITH(run_cuda(random_inputs(wide, false, 1), s.config, CudaRunOptions{}),
                    Catch::Contains("key_dim"));
  Shape odd = shape;
  odd.value_dim = 40;
  CHECK_THROWS_WITH(run_cuda(random_inputs(odd, false, 1), s.config, CudaRunOptions{}),
                    Catch::Contains("value_dim"));

  EngineConfig big_chunk = s.config;
  big_chunk.chunk = 128;
  CHECK_THROWS_WITH(run_cuda(in, big_chunk, CudaRunOptions{}), Catch::Contains("chunk"));

  cuda::Problem p;
  p.qk_heads = 3;
  p.v_heads = 4;
  p.key_dim = p.value_dim = 64;
  p.total_tokens = 10;
  CHECK_THAT(cuda::check_problem(p), Catch::Contains("multiple"));
  CHECK(cuda::workspace_bytes(p) == 0);
  p.v_heads = 6;
  CHECK(cuda::check_problem(p).empty());
  cuda::DeviceTensors t;
  CHECK_THAT(cuda::forward(p, t, nullptr, 0, nullptr), Catch::Contains("workspace"));
}

namespace {
// The Qwen shape (H = 16, HV = 32, K = V = 128) on tensor cores with bf16 inputs and outputs, `num_seqs`
// sequences over `total` tokens: the dense selector, or sparse-default (block_adjacent band 1, head_budget
// rho 0.29 with the update_norm score).
cuda::Problem qwen_problem(int64_t num_seqs, int64_t total, bool dense) {
  cuda::Problem p;
  p.num_seqs = num_seqs;
  p.total_tokens = total;
  p.qk_heads = 16;
  p.v_heads = 32;
  p.key_dim = p.value_dim = 128;
  p.input_dtype = p.output_dtype = cuda::DType::bfloat16;
  p.tensor_cores = true;
  if (!dense) {
    p.selector = cuda::SelectorKind::head_budget;
    p.score = cuda::ScoreKind::update_norm;
    p.solver_band = 1;
    p.rho = 0.29;
  }
  return p;
}

// A multiprocessor quarter (one scheduler) has 512 registers a lane; a warp takes its threads' count rounded
// up to 8, for all 32 lanes.
constexpr int kQuarterRegisters = 512 * 32;
int warp_registers(int registers) {
  return 32 * ((registers + 7) / 8 * 8);
}
int warps_of(int threads) {
  return (threads + 31) / 32;
}
// How many of a block's `warps` land on quarter q when they spread as evenly as they go (quarter 0 the most).
int warps_on_quarter(int warps, int q) {
  return warps / 4 + (q < warps % 4);
}
}  // namespace

// A 2-stage recurrence block leaves room for an output block beside it only while the two blocks' registers
// fit: a multiprocessor quarter (one scheduler) has 512 registers a lane, allocated to a warp in steps of 8 a
// lane, and the quarter that holds most of the two blocks' warps (3 of the recurrence's 9, 2 of the output
// block's 8) must hold them all. v51's first build had 89 and 123 registers there (3 x 96 + 2 x 128 = 544),
// and the dense forwards at B = 1 ran 10-14 % slower (perf notes, v51). Checked at the Qwen shape for the
// selectors that take 2-stage blocks with an output block beside them at B = 1 (dense, a capped head_budget),
// bf16 and fp32 outputs.
TEST_CASE("CUDA output blocks fit beside a 2-stage recurrence block", "[gpu][tc][registers]") {
  int checked = 0;
  for (const bool dense : {true, false})
    for (const bool out_bf16 : {true, false})
      for (const int64_t T : {4096, 16384, 32768, 131072}) {
        cuda::Problem p = qwen_problem(1, T, dense);
        p.output_dtype = out_bf16 ? cuda::DType::bfloat16 : cuda::DType::float32;
        if (!dense) p.max_fraction = 0.4;
        cuda::StageRegisters r;
        REQUIRE(cuda::stage_registers(p, &r).empty());
        INFO((dense ? "dense" : "capped head_budget")
             << ", T " << T << (out_bf16 ? ", bf16" : ", fp32") << " out: " << r.stages
             << " stages, recurrence " << r.recurrence_threads << " threads x " << r.recurrence_registers
             << " registers, output " << r.output_threads << " x " << r.output_registers);
        REQUIRE(r.separate);
        if (r.stages != 2) continue;
        ++checked;
        CHECK(warps_on_quarter(warps_of(r.recurrence_threads), 0) * warp_registers(r.recurrence_registers) +
                  warps_on_quarter(warps_of(r.output_threads), 0) * warp_registers(r.output_registers) <=
              kQuarterRegisters);
      }
  CHECK(checked == 16);  // both selectors take 2-stage 32-column blocks at B = 1 at every T here
}

// A packed sparse batch whose 32-column chain blocks go two to a multiprocessor (2 x 16K at the Qwen shape:
// 256 blocks of 2 stages) runs the mask expansion beside them, and the output grid is placed only once every
// expansion block has started: an expansion block must fit on a multiprocessor that two chain blocks hold
// (registers, shared memory, threads). At 256 threads of 74 registers it did not, and the outputs at 2 x 16K
// began ~38 µs after the selection (perf notes, v56).
TEST_CASE("CUDA mask expansion blocks fit beside two chain blocks", "[gpu][tc][registers]") {
  const cuda::Problem p = qwen_problem(2, 32768, false);
  cuda::StageRegisters r;
  REQUIRE(cuda::stage_registers(p, &r).empty());
  INFO("recurrence " << r.recurrence_threads << " threads x " << r.recurrence_registers << " registers, "
                     << r.recurrence_smem << " bytes; expansion " << r.expand_threads << " x "
                     << r.expand_registers << ", " << r.expand_smem << " bytes");
  REQUIRE(r.separate);
  REQUIRE(r.stages == 2);
  // The multiprocessor's registers in sum (per-thread counts rounded up to 8, whole warps): a bound that
  // every placement needs, not one that proves the placement. That the blocks do run side by side was
  // measured: with this fit the output grid at 2 x 16K starts as soon after the selection as at B = 1
  // (perf notes, v56).
  CHECK(2 * warps_of(r.recurrence_threads) * warp_registers(r.recurrence_registers) +
            warps_of(r.expand_threads) * warp_registers(r.expand_registers) <=
        4 * kQuarterRegisters);
  // And per scheduler: each quarter of the multiprocessor has 16 384 registers, the two chain blocks' warps
  // spread over the quarters as evenly as they go (5, 5, 4, 4 for 2 x 9), and every expansion warp has to
  // find a quarter with room. The sum alone was not enough: a chain form at 92 registers (96 allocated) met
  // it exactly, 65 536, yet the output grid started 9 µs later than with this one (perf notes, v57).
  const int chain_warps = 2 * warps_of(r.recurrence_threads);
  int placed = 0;
  for (int q = 0; q < 4; ++q) {
    const int room =
        kQuarterRegisters - warps_on_quarter(chain_warps, q) * warp_registers(r.recurrence_registers);
    placed += std::max(room, 0) / warp_registers(r.expand_registers);
  }
  CHECK(placed >= warps_of(r.expand_threads));
  constexpr size_t kReserved = 1024;  // per block
  CHECK(2 * (r.recurrence_smem + kReserved) + r.expand_smem + kReserved <= size_t(228) * 1024);
  CHECK(2 * r.recurrence_threads + r.expand_threads <= 2048);
}

// A small case for compute-sanitizer (memcheck, racecheck): every stage, a ragged chunk, G = 2, snapshots.
TEST_CASE("CUDA small sparse case for the sanitizers", "[gpu][small]") {
  const Shape shape = make_shape(2, 100, 1, 2, 32, 32);
  const Inputs<float> in = random_inputs(shape, true, 31);
  for (const StrategyEntry& selector : strategies(StrategyFamily::selector)) {  // every GPU selector
    const std::string sel = selector.name;
    Strategies s = make_strategies("block_adjacent", {{"block", "8"}, {"band", "1"}}, "survival", sel,
                                   sel == "threshold" ? std::map<std::string, std::string>{{"tau", "1.0"}}
                                                      : std::map<std::string, std::string>{{"rho", "0.5"}},
                                   32, 2, Granularity::head);
    s.config.keep_snapshots = true;
    const EngineResult<float> cpu = run_cpu(in, s.config);
    const EngineResult<float> gpu = run_cuda(in, s.config, CudaRunOptions{});
    INFO("selector " << sel);
    CHECK(gpu.event_mask.values() == cpu.event_mask.values());
    CHECK(rel_error(gpu.o, cpu.o) <= 1e-4);
    CHECK(rel_error(gpu.final_state, cpu.final_state) <= 1e-4);
  }
  // The packed path with bf16 inputs and outputs, an empty sequence, and the shared-budget selector.
  VarlenCase vc;
  vc.lengths = {40, 0, 70};
  vc.H = 1;
  vc.HV = 2;
  vc.K = vc.V = 32;
  vc.bf16 = vc.out_bf16 = true;
  vc.tolerance = 1e-2;
  check_varlen(vc);
  vc.selector = "head_budget";
  vc.selector_params = {{"rho", "0.5"}, {"min_per_head", "1"}};
  check_varlen(vc);
  // The tensor-core kernels (K = V = 128, bf16): packed, ragged, an empty sequence, G = 2, sparse and dense;
  // then G = 1 (sparse with `stride`, whose mask needs no score and so always equals the CPU's: the outputs
  // are always compared; also with runs of 2 and 4 chunks per output block).
  VarlenCase tc = tc_varlen_case({150, 0, 70}, 1, 2);
  tc.group = 2;
  check_varlen(tc);
  tc.selector = "head_budget";
  tc.selector_params = {{"rho", "0.5"}};
  tc.out_bf16 = true;
  check_varlen(tc);
  tc.group = 1;
  tc.selector = "stride";
  tc.selector_params = {{"rho", "0.5"}};
  check_varlen(tc);
  tc.selector = "dense";
  tc.selector_params = {};
  check_varlen(tc);
  // Runs of chunks per output block, as longer inputs take them: at least 8 blocks of one chunk per
  // multiprocessor (16 value heads x 78 chunks: runs of 2 up to 156 multiprocessors), each sequence's last
  // chunk alone, bf16 and fp32 outputs.
  VarlenCase runs = tc_varlen_case({64 * 70 + 5, 0, 64 * 5}, 4, 16);
  runs.selector = "stride";
  runs.selector_params = {{"rho", "0.5"}};
  for (const bool out_bf16 : {true, false}) {
    runs.out_bf16 = out_bf16;
    INFO("output runs, " << (out_bf16 ? "bf16" : "fp32") << " outputs");
    check_varlen(runs);
  }
  // The dense selector's recurrence with its outputs in one pass, as packed batches of many heads take it,
  // past the sequences' ragged ends and the empty one: 4 x 16 value heads (256 blocks of 32 columns, 128 of
  // 64: one wave of the warp-specialised blocks on 132 multiprocessors) and 4 x 32 (two warpgroups a block).
  for (const int HV : {16, 32}) {
    VarlenCase one_pass = tc_varlen_case({150, 0, 70, 64 * 3 + 1}, HV / 4, HV);
    one_pass.out_bf16 = true;
    INFO("one pass, " << HV << " value heads");
    check_varlen(one_pass);
  }
}

// Inputs uploaded once serve several runs (a selector sweep on one workload) with the results of a run that
// uploads its own; output_tokens brings back exactly those rows of o; timing repeats report a GPU time.
TEST_CASE("CUDA inputs uploaded once, query rows, timing repeats", "[gpu][reuse]") {
  const Shape shape = make_shape(2, 150, 2, 4);
  const Inputs<float> in = random_inputs(shape, true, 77);
  for (const CudaPrecision precision : {CudaPrecision::float32, CudaPrecision::bfloat16}) {
    CudaRunOptions options;
    options.input_precision = precision;
    options.tensor_cores = precision == CudaPrecision::bfloat16;
    const CudaInputs uploaded(in, precision);
    REQUIRE(uploaded.shape().tokens == 150);
    for (const std::string sel : {"dense", "head_budget", "topk"}) {
      INFO("selector " << sel << ", bf16 " << (precision == CudaPrecision::bfloat16));
      Strategies s = make_strategies("block_adjacent", {{"block", "16"}, {"band", "1"}}, "update_norm", sel,
                                     {{"rho", "0.4"}}, 64, 1, Granularity::pair);
      const EngineResult<float> once = run_cuda(in, s.config, options);
      const EngineResult<float> reused = run_cuda(uploaded, s.config, options);
      CHECK(reused.o.values() == once.o.values());
      CHECK(reused.event_mask.values() == once.event_mask.values());
      CHECK(reused.final_state.values() == once.final_state.values());

      CudaRunOptions rows = options;
      rows.output_tokens = {299, 0, 149, 150};  // last token of sequence 1, first of 0, last of 0, first of 1
      rows.timing_repeats = 3;
      const EngineResult<float> part = run_cuda(uploaded, s.config, rows);
      REQUIRE(part.o.dims() == std::vector<int64_t>{1, 4, 4, 128});
      const int64_t row = shape.v_heads * shape.value_dim;
      for (size_t r = 0; r < rows.output_tokens.size(); ++r)
        for (int64_t i = 0; i < row; ++i)
          REQUIRE(part.o[int64_t(r) * row + i] == once.o[rows.output_tokens[r] * row + i]);
      CHECK(part.seconds > 0);
      CHECK(part.seconds < 1.0);
    }
  }
  Strategies s = make_strategies("exact", {}, "update_norm", "dense", {}, 64, 1, Granularity::pair);
  const CudaInputs fp32(in, CudaPrecision::float32);
  CudaRunOptions bf16;
  bf16.input_precision = CudaPrecision::bfloat16;
  CHECK_THROWS_WITH(run_cuda(fp32, s.config, bf16), Catch::Contains("precision"));
  CudaRunOptions outside;
  outside.output_tokens = {300};
  CHECK_THROWS_WITH(run_cuda(fp32, s.config, outside), Catch::Contains("output token 300"));
  Inputs<float> bad = in;
  bad.g[5] = 0.5f;
  CHECK_THROWS_WITH(CudaInputs(bad, CudaPrecision::float32), Catch::Contains("g"));
}

// The plan runs context parallelism where a lone sparse chain outlasts what cutting it costs, the output
// stage included, which runs after the replays instead of beside the chain: at 1 x 128K with 4 value heads
// (16 chain blocks, the busiest head may hold all 2048 chunks, the outputs cheap); not at the Qwen shape
// (32 value heads: the outputs alone cost about what the cut saves, 32K and 128K), nor for short chains
// (topk at rho 0.1), a packed batch or the dense selector. Seen through the workspace, which holds the
// segments' buffers only where the plan runs it, bounded (at most 64 MiB: the segments' fp32 local states
// and transitions).
TEST_CASE("CUDA plan takes context parallelism only where the cut chain pays", "[gpu][tc][cp]") {
  auto extra = [](cuda::Problem p) {
    const size_t with = cuda::workspace_bytes(p);
    p.context_parallel = cuda::Problem::ContextParallel::off;
    return with - cuda::workspace_bytes(p);
  };
  cuda::Problem few_heads = qwen_problem(1, 131072, false);
  few_heads.qk_heads = 2;
  few_heads.v_heads = 4;
  const size_t bytes = extra(few_heads);
  CHECK(bytes > 0);
  CHECK(bytes <= size_t(64) << 20);
  few_heads.selector = cuda::SelectorKind::topk;  // every chain at most 0.1 N events
  few_heads.rho = 0.1;
  CHECK(extra(few_heads) == 0);
  for (const int64_t T : {32768, 131072}) {
    INFO("1 x " << T);
    CHECK(extra(qwen_problem(1, T, false)) == 0);
    CHECK(extra(qwen_problem(1, T, true)) == 0);
  }
  CHECK(extra(qwen_problem(4, 32768, false)) == 0);
  cuda::Problem forced = qwen_problem(4, 32768, false);
  forced.context_parallel = cuda::Problem::ContextParallel::on;
  CHECK(extra(forced) > 0);
}
