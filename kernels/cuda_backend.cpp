// Adapter from the CPU-side types (Inputs, EngineConfig with its strategies) to the plain-pointer GPU engine
// of gdn_device.h. Host tensors are uploaded, the engine runs on one stream, results come back into the
// EngineResult layout of run_cpu.
#include "kernels/cuda_backend.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/defaults.h"
#include "core/error.h"
#include "core/strategy_table.h"
#include "kernels/gdn_device.h"

namespace sgdn {
namespace {

void check_cuda(cudaError_t status, const char* what) {
  if (status != cudaSuccess) fail("CUDA backend: ", what, " failed: ", cudaGetErrorString(status));
}

// Device memory freed on scope exit.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes_ > 0) check_cuda(cudaMalloc(&ptr_, bytes_), "cudaMalloc");
  }
  ~DeviceBuffer() {
    if (ptr_) cudaFree(ptr_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return ptr_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// A CUDA event destroyed on scope exit.
class Event {
 public:
  Event() { check_cuda(cudaEventCreate(&event_), "cudaEventCreate"); }
  ~Event() { cudaEventDestroy(event_); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

// float -> bfloat16 bits, round to nearest even (NaN kept quiet).
uint16_t to_bf16_bits(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return uint16_t((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return uint16_t(bits >> 16);
}

// Uploads a tensor in the requested precision (float64 is rounded to float32 first, as Inputs::cast does);
// the conversion runs on every core: at 128K tokens q, k and v are gigabytes.
template <class S>
std::unique_ptr<DeviceBuffer> upload(const Tensor<S>& host, CudaPrecision precision) {
  const int64_t n = host.size();
  const S* src = host.data();
  if (precision == CudaPrecision::float32) {
    auto buffer = std::make_unique<DeviceBuffer>(size_t(n) * 4);
    if constexpr (std::is_same_v<S, float>) {
      check_cuda(cudaMemcpy(buffer->get(), src, size_t(n) * 4, cudaMemcpyHostToDevice), "upload");
    } else {
      std::vector<float> values(static_cast<size_t>(n));
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < n; ++i) values[size_t(i)] = float(src[i]);
      check_cuda(cudaMemcpy(buffer->get(), values.data(), size_t(n) * 4, cudaMemcpyHostToDevice), "upload");
    }
    return buffer;
  }
  std::vector<uint16_t> bits(static_cast<size_t>(n));
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) bits[size_t(i)] = to_bf16_bits(float(src[i]));
  auto buffer = std::make_unique<DeviceBuffer>(size_t(n) * 2);
  check_cuda(cudaMemcpy(buffer->get(), bits.data(), size_t(n) * 2, cudaMemcpyHostToDevice), "upload");
  return buffer;
}

float bf16_bits_to_float(uint16_t b) {
  const uint32_t bits = uint32_t(b) << 16;
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

// bf16 bits to float, on every core (o at 128K tokens is a gigabyte).
void widen_bf16(const std::vector<uint16_t>& bits, float* dst) {
  const int64_t n = int64_t(bits.size());
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_bits_to_float(bits[size_t(i)]);
}

// Copies `count` elements from the device into `dst` as float: as they are, or widened from bf16.
void download_floats(float* dst, const void* src, int64_t count, bool bf16, const char* what) {
  if (!bf16) {
    check_cuda(cudaMemcpy(dst, src, size_t(count) * 4, cudaMemcpyDeviceToHost), what);
    return;
  }
  std::vector<uint16_t> bits(static_cast<size_t>(count));
  check_cuda(cudaMemcpy(bits.data(), src, bits.size() * 2, cudaMemcpyDeviceToHost), what);
  widen_bf16(bits, dst);
}

cuda::Problem make_problem(const Shape& shape, double scale, const EngineConfig& config,
                           const CudaRunOptions& options) {
  cuda::Problem p;
  p.num_seqs = shape.batch;
  p.total_tokens = shape.batch * shape.tokens;
  p.qk_heads = int(shape.qk_heads);
  p.v_heads = int(shape.v_heads);
  p.key_dim = int(shape.key_dim);
  p.value_dim = int(shape.value_dim);
  p.chunk = int(config.chunk);
  p.group = int(config.group);

  const std::optional<BandedSolverForm> form = config.solver->banded_form();
  require(form.has_value(), "solver '", config.solver->name(),
          "' has no GPU implementation on the CUDA backend (it needs a banded form; available: ",
          strategy_names(StrategyFamily::solver), ")");
  const int64_t blocks = form->block > 0 ? (config.chunk + form->block - 1) / form->block : 1;
  if (form->band >= blocks - 1 || config.chunk % form->block != 0) {
    // Every block kept: the exact inverse, whatever the block size.
    p.solver_block = p.chunk;
    p.solver_band = -1;
  } else {
    p.solver_block = int(form->block);
    p.solver_band = int(form->band);
  }

  // The names of core/strategies.def; `none` is no CPU score (the engine always has one).
  const std::string& score = config.score->name();
  const int score_code = strategy_code(StrategyFamily::score, score);
  require(score_code > int(cuda::ScoreKind::none), "score '", score,
          "' has no GPU implementation on the CUDA backend; available: ",
          strategy_names(StrategyFamily::score, "none"));
  p.score = cuda::ScoreKind(score_code);
  if (p.score == cuda::ScoreKind::survival)
    p.survival_skip_own_group = config.score->params().get_bool("skip_own_group", defaults::kSkipOwnGroup);

  const std::string& selector = config.selector->name();
  const int selector_code = strategy_code(StrategyFamily::selector, selector);
  require(selector_code >= 0, "selector '", selector,
          "' has no GPU implementation on the CUDA backend; available: ",
          strategy_names(StrategyFamily::selector));
  p.selector = cuda::SelectorKind(selector_code);
  // Each selector's own parameters (the CPU strategy has checked them).
  const Params& sp = config.selector->params();
  if (p.selector == cuda::SelectorKind::random)
    p.seed = uint64_t(sp.get_int("seed", int64_t(defaults::kSeed)));
  if (p.selector == cuda::SelectorKind::head_budget) {
    p.min_per_head = sp.get_int("min_per_head", defaults::kMinPerHead);
    p.max_fraction = sp.get_double("max_fraction", defaults::kMaxFraction);
  }
  if (p.selector == cuda::SelectorKind::threshold) p.tau = sp.get_double("tau", defaults::kTau);
  if (p.selector != cuda::SelectorKind::dense && p.selector != cuda::SelectorKind::threshold)
    p.rho = sp.get_double("rho", defaults::kRho);
  p.pair_granularity = config.granularity == Granularity::pair;
  p.scale = float(scale);
  p.input_dtype =
      options.input_precision == CudaPrecision::bfloat16 ? cuda::DType::bfloat16 : cuda::DType::float32;
  p.output_dtype =
      options.output_precision == CudaPrecision::bfloat16 ? cuda::DType::bfloat16 : cuda::DType::float32;
  p.tensor_cores = options.tensor_cores;
  p.context_parallel =
      options.context_parallel == CudaContextParallel::on    ? cuda::Problem::ContextParallel::on
      : options.context_parallel == CudaContextParallel::off ? cuda::Problem::ContextParallel::off
                                                             : cuda::Problem::ContextParallel::automatic;
  p.segment_events = options.segment_events;

  if (p.selector == cuda::SelectorKind::head_budget)  // the CPU selector's errors (the kernels cannot throw)
    head_budget_plan(p.rho, p.min_per_head, p.max_fraction, num_chunks(shape.tokens, config.chunk),
                     p.units());
  if (std::string problem = cuda::check_problem(p); !problem.empty()) fail("CUDA backend: ", problem);
  return p;
}

}  // namespace

CudaPrecision parse_cuda_precision(const std::string& text) {
  if (text == "float32") return CudaPrecision::float32;
  if (text == "bfloat16") return CudaPrecision::bfloat16;
  fail("run.precision = '", text, "' is not available on the CUDA backend; allowed: float32, bfloat16");
}

bool cuda_device_available() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return count > 0;
}

struct CudaInputs::Impl {
  Shape shape;
  double scale = 0;
  CudaPrecision precision = CudaPrecision::float32;
  int device = 0;
  std::unique_ptr<DeviceBuffer> q, k, v, beta, g, s0, cu_seqlens;
};

// float64 inputs must fit float32, the widest type on the device.
template <class S>
void require_float_range(const char* name, const Tensor<S>& t) {
  if constexpr (!std::is_same_v<S, float>) {
    const int64_t i = first_index_where(t, [](S x) { return std::abs(double(x)) > double(FLT_MAX); });
    if (i >= 0)
      fail("input ", name, " holds ", double(t[i]), " at flat index ", i,
           ": outside the float32 range of the CUDA backend");
  }
}

template <class S>
CudaInputs::CudaInputs(const Inputs<S>& inputs, CudaPrecision precision, int device)
    : impl_(std::make_unique<Impl>()) {
  validate(inputs);
  require_float_range("q", inputs.q);
  require_float_range("k", inputs.k);
  require_float_range("v", inputs.v);
  require_float_range("g", inputs.g);
  require_float_range("initial_state", inputs.initial_state);
  check_cuda(cudaSetDevice(device), "cudaSetDevice");
  Impl& m = *impl_;
  m.shape = inputs.shape;
  m.scale = inputs.effective_scale();
  m.precision = precision;
  m.device = device;
  m.q = upload(inputs.q, precision);
  m.k = upload(inputs.k, precision);
  m.v = upload(inputs.v, precision);
  m.beta = upload(inputs.beta, precision);
  m.g = upload(inputs.g, CudaPrecision::float32);
  if (inputs.has_initial_state()) m.s0 = upload(inputs.initial_state, CudaPrecision::float32);
  const int64_t B = m.shape.batch, T = m.shape.tokens;
  std::vector<int32_t> cu(size_t(B + 1));
  for (int64_t b = 0; b <= B; ++b) cu[size_t(b)] = int32_t(b * T);
  m.cu_seqlens = std::make_unique<DeviceBuffer>(cu.size() * 4);
  check_cuda(cudaMemcpy(m.cu_seqlens->get(), cu.data(), cu.size() * 4, cudaMemcpyHostToDevice),
             "upload cu_seqlens");
}
template CudaInputs::CudaInputs(const Inputs<float>&, CudaPrecision, int);
template CudaInputs::CudaInputs(const Inputs<double>&, CudaPrecision, int);
CudaInputs::~CudaInputs() = default;
const Shape& CudaInputs::shape() const {
  return impl_->shape;
}
CudaPrecision CudaInputs::precision() const {
  return impl_->precision;
}

EngineResult<float> run_cuda(const Inputs<float>& inputs, const EngineConfig& config,
                             const CudaRunOptions& options) {
  config.validate(inputs.shape);
  make_problem(inputs.shape, inputs.effective_scale(), config,
               options);  // configuration errors before upload
  const CudaInputs uploaded(inputs, options.input_precision, options.device);
  return run_cuda(uploaded, config, options);
}

EngineResult<float> run_cuda(const CudaInputs& inputs, const EngineConfig& config,
                             const CudaRunOptions& options) {
  const CudaInputs::Impl& in = inputs.impl();
  require(in.precision == options.input_precision,
          "CUDA backend: the inputs were uploaded in another precision than options.input_precision");
  require(in.device == options.device, "CUDA backend: the inputs were uploaded to device ", in.device,
          ", not to device ", options.device);
  require(options.timing_repeats >= 1, "CUDA backend: timing_repeats must be >= 1, got ",
          options.timing_repeats);
  const Shape& shape = in.shape;
  config.validate(shape);
  const cuda::Problem p = make_problem(shape, in.scale, config, options);
  check_cuda(cudaSetDevice(options.device), "cudaSetDevice");

  const int64_t B = shape.batch, T = shape.tokens, HV = shape.v_heads, K = shape.key_dim, V = shape.value_dim;
  const int64_t N = num_chunks(T, config.chunk);
  const int64_t units = p.units();
  for (int64_t token : options.output_tokens)
    require(token >= 0 && token < B * T, "CUDA backend: output token ", token, " is outside the ", B * T,
            " tokens of the batch");

  const size_t out_elem = p.output_dtype == cuda::DType::bfloat16 ? 2 : 4;
  DeviceBuffer o(size_t(B * T * HV * V) * out_elem);
  DeviceBuffer final_state(size_t(B * HV * K * V) * 4);
  DeviceBuffer mask(size_t(B * HV * N));
  DeviceBuffer score(size_t(B * HV * N) * 4);
  DeviceBuffer budget(size_t(B * units) * 4);
  DeviceBuffer workspace(cuda::workspace_bytes(p));

  cuda::DeviceTensors t;
  t.q = in.q->get();
  t.k = in.k->get();
  t.v = in.v->get();
  t.g = in.g->as<float>();
  t.beta = in.beta->get();
  t.cu_seqlens = in.cu_seqlens->as<int32_t>();
  t.initial_state = in.s0 ? in.s0->as<float>() : nullptr;
  t.o = o.get();
  t.final_state = final_state.as<float>();
  t.event_mask = mask.as<uint8_t>();
  t.event_score = score.as<float>();
  t.budget = budget.as<int32_t>();
  // Poison the outputs (all-ones bytes are NaN in float32 and bfloat16, 0xFF in the mask) so that an element
  // the engine forgets to write cannot pass a test.
  check_cuda(cudaMemset(o.get(), 0xFF, o.bytes()), "poison o");
  check_cuda(cudaMemset(final_state.get(), 0xFF, final_state.bytes()), "poison final state");
  check_cuda(cudaMemset(mask.get(), 0xFF, mask.bytes()), "poison mask");
  check_cuda(cudaMemset(score.get(), 0xFF, score.bytes()), "poison scores");
  check_cuda(cudaMemset(budget.get(), 0xFF, budget.bytes()), "poison budgets");
  // The workspace too (NaN snapshots, U and W, records of -1): a fresh allocation often gets the memory of
  // the previous run on the same problem back, and a stage that read a snapshot or record before it is
  // written would then see the right values and pass (the overlapped and serial launches are compared so).
  check_cuda(cudaMemset(workspace.get(), 0xFF, workspace.bytes()), "poison workspace");
  const Event before, after;
  std::vector<double> times;
  for (int repeat = 0; repeat < options.timing_repeats; ++repeat) {
    check_cuda(cudaEventRecord(before.get(), nullptr), "cudaEventRecord");
    const std::string error = cuda::forward(p, t, workspace.get(), workspace.bytes(), nullptr);
    if (!error.empty()) fail("CUDA backend: ", error);
    check_cuda(cudaEventRecord(after.get(), nullptr), "cudaEventRecord");
    check_cuda(cudaEventSynchronize(after.get()), "the CUDA engine");
    float ms = 0;
    check_cuda(cudaEventElapsedTime(&ms, before.get(), after.get()), "cudaEventElapsedTime");
    times.push_back(ms * 1e-3);
  }

  EngineResult<float> res;
  std::sort(times.begin(), times.end());
  const size_t mid = times.size() / 2;
  res.seconds = times.size() % 2 ? times[mid] : 0.5 * (times[mid - 1] + times[mid]);  // the median
  // o: whole, or the requested rows (one copy of HV V elements per row).
  const int64_t row_elems = HV * V;
  const bool rows_only = !options.output_tokens.empty();
  const int64_t rows = rows_only ? int64_t(options.output_tokens.size()) : B * T;
  res.o = rows_only ? Tensor<float>({1, rows, HV, V}) : Tensor<float>({B, T, HV, V});
  const bool o_bf16 = p.output_dtype == cuda::DType::bfloat16;
  if (rows_only) {  // the rows one copy each, then one widening pass over all of them
    std::vector<uint16_t> o_bits(o_bf16 ? size_t(rows * row_elems) : 0);
    char* host_o = o_bf16 ? reinterpret_cast<char*>(o_bits.data()) : reinterpret_cast<char*>(res.o.data());
    for (int64_t r = 0; r < rows; ++r)
      check_cuda(cudaMemcpy(host_o + size_t(r * row_elems) * out_elem,
                            static_cast<const char*>(o.get()) +
                                size_t(options.output_tokens[size_t(r)] * row_elems) * out_elem,
                            size_t(row_elems) * out_elem, cudaMemcpyDeviceToHost),
                 "download o");
    if (o_bf16) widen_bf16(o_bits, res.o.data());
  } else {
    download_floats(res.o.data(), o.get(), rows * row_elems, o_bf16, "download o");
  }
  res.final_state = Tensor<float>({B, HV, K, V});
  check_cuda(
      cudaMemcpy(res.final_state.data(), final_state.get(), final_state.bytes(), cudaMemcpyDeviceToHost),
      "download final state");
  res.event_mask = Tensor<uint8_t>({B, HV, N});
  check_cuda(cudaMemcpy(res.event_mask.data(), mask.get(), mask.bytes(), cudaMemcpyDeviceToHost),
             "download mask");
  res.event_score = Tensor<float>({B, HV, N});
  check_cuda(cudaMemcpy(res.event_score.data(), score.get(), score.bytes(), cudaMemcpyDeviceToHost),
             "download scores");
  res.budget = Tensor<int32_t>({B, units});
  check_cuda(cudaMemcpy(res.budget.data(), budget.get(), budget.bytes(), cudaMemcpyDeviceToHost),
             "download budget");
  const EngineCost cost = engine_cost(shape, config, res.event_mask);  // the same cost model as run_cpu
  res.flops = cost.flops;
  res.dense_flops = cost.dense_flops;
  res.sequential_flops = cost.sequential_flops;
  if (config.keep_snapshots) {
    const cuda::SnapshotView view = cuda::snapshot_view(p, workspace.get());
    std::vector<int32_t> counts(size_t(B * HV)), chunks(size_t(view.max_slots));
    check_cuda(cudaMemcpy(counts.data(), view.snapshot_count, counts.size() * 4, cudaMemcpyDeviceToHost),
               "download");
    check_cuda(cudaMemcpy(chunks.data(), view.snapshot_chunk, chunks.size() * 4, cudaMemcpyDeviceToHost),
               "download");
    int64_t total = 0;
    for (int32_t c : counts) total += c;
    res.snapshots = Tensor<float>({total, K, V});
    res.snapshot_index = Tensor<int32_t>({total, 3});
    int64_t row = 0;
    const size_t elem = view.snapshots_bf16 ? 2 : 4;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < HV; ++h) {
        // Fixed-length batch: chunk_offset[b] = b N.
        const int64_t base = cuda::snapshot_slot_base(b * N, b, int(HV), int(h), N);
        const int64_t count = counts[size_t(b * HV + h)];
        download_floats(res.snapshots.data() + row * K * V,
                        reinterpret_cast<const char*>(view.snapshots) + size_t(base * K * V) * elem,
                        count * K * V, view.snapshots_bf16, "download snapshots");
        for (int64_t m = 0; m < count; ++m, ++row) {
          res.snapshot_index[row * 3 + 0] = int32_t(b);
          res.snapshot_index[row * 3 + 1] = int32_t(h);
          res.snapshot_index[row * 3 + 2] = chunks[size_t(base + m)];
        }
      }
  }
  return res;
}

}  // namespace sgdn
