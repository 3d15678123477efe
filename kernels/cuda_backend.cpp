// Adapter from the CPU-side types (Inputs, EngineConfig with its strategies) to the plain-pointer GPU engine
// of gdn_device.h. Host tensors are uploaded, the engine runs on one stream, results come back into the
// EngineResult layout of run_cpu.
#include "kernels/cuda_backend.h"

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstring>
#include <vector>

#include "core/error.h"
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

// float -> bfloat16 bits, round to nearest even (NaN kept quiet).
uint16_t to_bf16_bits(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return uint16_t((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return uint16_t(bits >> 16);
}

// Uploads a float tensor in the requested precision.
std::unique_ptr<DeviceBuffer> upload(const Tensor<float>& host, CudaPrecision precision) {
  const size_t n = size_t(host.size());
  if (precision == CudaPrecision::float32) {
    auto buffer = std::make_unique<DeviceBuffer>(n * 4);
    check_cuda(cudaMemcpy(buffer->get(), host.data(), n * 4, cudaMemcpyHostToDevice), "upload");
    return buffer;
  }
  std::vector<uint16_t> bits(n);
  for (size_t i = 0; i < n; ++i) bits[i] = to_bf16_bits(host[int64_t(i)]);
  auto buffer = std::make_unique<DeviceBuffer>(n * 2);
  check_cuda(cudaMemcpy(buffer->get(), bits.data(), n * 2, cudaMemcpyHostToDevice), "upload");
  return buffer;
}

float bf16_bits_to_float(uint16_t b) {
  const uint32_t bits = uint32_t(b) << 16;
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

cuda::Problem make_problem(const Inputs<float>& inputs, const EngineConfig& config,
                           const CudaRunOptions& options) {
  const Shape& shape = inputs.shape;
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
          "' has no GPU implementation on the CUDA backend (it needs a banded form; available: exact, "
          "block_adjacent)");
  const int64_t blocks = form->block > 0 ? (config.chunk + form->block - 1) / form->block : 1;
  if (form->band >= blocks - 1 || config.chunk % form->block != 0) {
    // Every block kept: the exact inverse, whatever the block size.
    p.solver_block = p.chunk;
    p.solver_band = -1;
  } else {
    p.solver_block = int(form->block);
    p.solver_band = int(form->band);
  }

  const std::string& score = config.score->name();
  if (score == "update_norm") {
    p.score = cuda::ScoreKind::update_norm;
  } else if (score == "survival") {
    p.score = cuda::ScoreKind::survival;
    p.survival_skip_own_group = config.score->params().get_bool("skip_own_group", false);
  } else {
    fail("score '", score,
         "' has no GPU implementation on the CUDA backend; available: update_norm, survival");
  }

  const std::string& selector = config.selector->name();
  const Params& sp = config.selector->params();
  if (selector == "dense") {
    p.selector = cuda::SelectorKind::dense;
  } else if (selector == "random") {
    p.selector = cuda::SelectorKind::random;
    p.seed = uint64_t(sp.get_int("seed", 0));
  } else if (selector == "stride") {
    p.selector = cuda::SelectorKind::stride;
  } else if (selector == "topk") {
    p.selector = cuda::SelectorKind::topk;
  } else if (selector == "head_budget") {
    p.selector = cuda::SelectorKind::head_budget;
    p.min_per_head = sp.get_int("min_per_head", 0);
  } else if (selector == "threshold") {
    p.selector = cuda::SelectorKind::threshold;
    p.tau = sp.get_double("tau", 1.0);
  } else {
    fail("selector '", selector,
         "' has no GPU implementation on the CUDA backend; available: dense, random, stride, topk, "
         "head_budget, threshold");
  }
  if (p.selector != cuda::SelectorKind::dense && p.selector != cuda::SelectorKind::threshold)
    p.rho = sp.get_double("rho", 0.29);
  p.pair_granularity = config.granularity == Granularity::pair;
  p.scale = float(inputs.effective_scale());
  p.input_dtype =
      options.input_precision == CudaPrecision::bfloat16 ? cuda::DType::bfloat16 : cuda::DType::float32;
  p.output_dtype =
      options.output_precision == CudaPrecision::bfloat16 ? cuda::DType::bfloat16 : cuda::DType::float32;
  p.tensor_cores = options.tensor_cores;

  if (p.selector == cuda::SelectorKind::head_budget && p.min_per_head > 0) {
    // The CPU selector's error, raised here because the kernel cannot throw.
    const int64_t n = num_chunks(shape.tokens, config.chunk), units = p.units();
    const int64_t floor_each = std::min<int64_t>(p.min_per_head, n);
    const int64_t budget = budget_of(p.rho, n * units);
    require(floor_each * units <= budget, "selector.min_per_head = ", p.min_per_head, " needs ",
            floor_each * units, " events but the budget round(rho N heads) is ", budget);
  }
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

EngineResult<float> run_cuda(const Inputs<float>& inputs, const EngineConfig& config,
                             const CudaRunOptions& options) {
  validate(inputs);
  config.validate(inputs.shape);
  const cuda::Problem p = make_problem(inputs, config, options);
  const auto start = std::chrono::steady_clock::now();
  check_cuda(cudaSetDevice(options.device), "cudaSetDevice");

  const Shape& shape = inputs.shape;
  const int64_t B = shape.batch, T = shape.tokens, HV = shape.v_heads, K = shape.key_dim, V = shape.value_dim;
  const int64_t N = num_chunks(T, config.chunk);
  const int64_t units = p.units();

  auto q = upload(inputs.q, options.input_precision);
  auto k = upload(inputs.k, options.input_precision);
  auto v = upload(inputs.v, options.input_precision);
  auto beta = upload(inputs.beta, options.input_precision);
  auto g = upload(inputs.g, CudaPrecision::float32);
  std::unique_ptr<DeviceBuffer> s0;
  if (inputs.has_initial_state()) s0 = upload(inputs.initial_state, CudaPrecision::float32);
  std::vector<int32_t> cu(size_t(B + 1));
  for (int64_t b = 0; b <= B; ++b) cu[size_t(b)] = int32_t(b * T);
  DeviceBuffer cu_dev(cu.size() * 4);
  check_cuda(cudaMemcpy(cu_dev.get(), cu.data(), cu.size() * 4, cudaMemcpyHostToDevice), "upload cu_seqlens");

  const size_t out_elem = p.output_dtype == cuda::DType::bfloat16 ? 2 : 4;
  DeviceBuffer o(size_t(B * T * HV * V) * out_elem);
  DeviceBuffer final_state(size_t(B * HV * K * V) * 4);
  DeviceBuffer mask(size_t(B * HV * N));
  DeviceBuffer score(size_t(B * HV * N) * 4);
  DeviceBuffer budget(size_t(B * units) * 4);
  DeviceBuffer workspace(cuda::workspace_bytes(p));

  cuda::DeviceTensors t;
  t.q = q->get();
  t.k = k->get();
  t.v = v->get();
  t.g = g->as<float>();
  t.beta = beta->get();
  t.cu_seqlens = cu_dev.as<int32_t>();
  t.initial_state = s0 ? s0->as<float>() : nullptr;
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
  const std::string error = cuda::forward(p, t, workspace.get(), workspace.bytes(), nullptr);
  if (!error.empty()) fail("CUDA backend: ", error);
  check_cuda(cudaDeviceSynchronize(), "the CUDA engine");

  EngineResult<float> res;
  res.o = Tensor<float>({B, T, HV, V});
  if (p.output_dtype == cuda::DType::bfloat16) {
    std::vector<uint16_t> bits(size_t(res.o.size()));
    check_cuda(cudaMemcpy(bits.data(), o.get(), bits.size() * 2, cudaMemcpyDeviceToHost), "download o");
    for (size_t i = 0; i < bits.size(); ++i) res.o[int64_t(i)] = bf16_bits_to_float(bits[i]);
  } else {
    check_cuda(cudaMemcpy(res.o.data(), o.get(), size_t(res.o.size()) * 4, cudaMemcpyDeviceToHost),
               "download o");
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
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < HV; ++h) {
        // Fixed-length batch: chunk_offset[b] = b N.
        const int64_t base = (b * N + b) * HV + h * (N + 1);
        const int64_t count = counts[size_t(b * HV + h)];
        if (view.snapshots_bf16) {
          std::vector<uint16_t> bits(size_t(count * K * V));
          check_cuda(cudaMemcpy(bits.data(), reinterpret_cast<const uint16_t*>(view.snapshots) + base * K * V,
                                bits.size() * 2, cudaMemcpyDeviceToHost),
                     "download snapshots");
          for (size_t i = 0; i < bits.size(); ++i)
            res.snapshots.data()[row * K * V + int64_t(i)] = bf16_bits_to_float(bits[i]);
        } else {
          check_cuda(cudaMemcpy(res.snapshots.data() + row * K * V, view.snapshots + base * K * V,
                                size_t(count * K * V) * 4, cudaMemcpyDeviceToHost),
                     "download snapshots");
        }
        for (int64_t m = 0; m < count; ++m, ++row) {
          res.snapshot_index[row * 3 + 0] = int32_t(b);
          res.snapshot_index[row * 3 + 1] = int32_t(h);
          res.snapshot_index[row * 3 + 2] = chunks[size_t(base + m)];
        }
      }
  }
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return res;
}

}  // namespace sgdn
