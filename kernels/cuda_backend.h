// The CUDA backend as the C++ program and tests see it: the same EngineResult as run_cpu (SPEC §12).
#pragma once
#include "algorithms/engine.h"

namespace sgdn {

enum class CudaPrecision { float32, bfloat16 };
CudaPrecision parse_cuda_precision(const std::string& text);  // float32 | bfloat16, else sgdn::Error

struct CudaRunOptions {
  CudaPrecision input_precision = CudaPrecision::float32;  // q, k, v, beta on the device (g stays float32)
  CudaPrecision output_precision = CudaPrecision::float32;
  int device = 0;
  bool tensor_cores = false;  // bf16 tensor-core kernels where they apply (Problem::uses_tensor_cores)
};

// True when a CUDA device is present (the GPU tests skip otherwise).
bool cuda_device_available();

// Runs the GPU engine on a fixed-length batch: validates the inputs and the configuration (sgdn::Error naming
// what is wrong; a solver without a banded form, or a score or selector the GPU lacks, is an error naming
// it), uploads, runs, and fills o, final_state, event_mask, event_score, budget, and snapshots /
// snapshot_index when config.keep_snapshots. chunk_states and state_error are not filled.
EngineResult<float> run_cuda(const Inputs<float>& inputs, const EngineConfig& config,
                             const CudaRunOptions& options);

}  // namespace sgdn
