// The CUDA backend as the C++ program and tests see it: the same EngineResult as run_cpu (SPEC §12).
#pragma once
#include <memory>
#include <vector>

#include "algorithms/engine.h"

namespace sgdn {

enum class CudaPrecision { float32, bfloat16 };
CudaPrecision parse_cuda_precision(const std::string& text);  // float32 | bfloat16, else sgdn::Error

enum class CudaContextParallel { automatic, off, on };

struct CudaRunOptions {
  CudaPrecision input_precision = CudaPrecision::float32;  // q, k, v, beta on the device (g stays float32)
  CudaPrecision output_precision = CudaPrecision::float32;
  int device = 0;
  bool tensor_cores = false;  // bf16 tensor-core kernels where they apply (Problem::uses_tensor_cores)
  // Empty: o comes back whole, [B, T, HV, V]. Otherwise only these rows (flat token b T + t, in this order)
  // come back, as o of shape [1, n, HV, V]: a needle sweep at 128K needs a few query rows, not 2 GB.
  std::vector<int64_t> output_tokens;
  // The forward runs this many times on the device; `seconds` is the median GPU time (CUDA events).
  int timing_repeats = 1;
  // The sparse chain's context parallelism on the tensor-core path (cuda::Problem::context_parallel and
  // segment_events): the plan's choice, or forced off or on with segments of `segment_events` events (<= 0:
  // the plan's length).
  CudaContextParallel context_parallel = CudaContextParallel::automatic;
  int64_t segment_events = 0;
};

// True when a CUDA device is present (the GPU tests skip otherwise).
bool cuda_device_available();

// Inputs validated, converted (bf16 or fp32) and uploaded once, for several runs on one workload (a sweep
// over selectors): a run then costs the forward and the downloads, not the host conversion of gigabytes.
class CudaInputs {
 public:
  template <class S>
  CudaInputs(const Inputs<S>& inputs, CudaPrecision precision, int device = 0);
  ~CudaInputs();
  CudaInputs(const CudaInputs&) = delete;
  CudaInputs& operator=(const CudaInputs&) = delete;

  const Shape& shape() const;
  CudaPrecision precision() const;
  struct Impl;
  const Impl& impl() const { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

// Runs the GPU engine on a fixed-length batch: validates the configuration (sgdn::Error naming what is
// wrong; a solver without a banded form, or a score or selector the GPU lacks, is an error naming it), runs,
// and fills o, final_state, event_mask, event_score, budget, and snapshots / snapshot_index when
// config.keep_snapshots; flops / dense_flops / sequential_flops from engine_cost. chunk_states and
// state_error are not filled. `seconds` is the GPU time of the forward (stream events around it; the median
// over options.timing_repeats), without uploads and downloads. options.input_precision must equal the
// precision the inputs were uploaded in.
EngineResult<float> run_cuda(const CudaInputs& inputs, const EngineConfig& config,
                             const CudaRunOptions& options);
// The same after validating and uploading `inputs` for this run only.
EngineResult<float> run_cuda(const Inputs<float>& inputs, const EngineConfig& config,
                             const CudaRunOptions& options);

}  // namespace sgdn
