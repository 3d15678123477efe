// The C ABI of kernels/sgdn_cuda.h: checks every argument it can see without synchronising (null, host or
// misaligned pointers, sizes, strategy codes) and runs sgdn::cuda::forward. No exception crosses it.
#include "kernels/sgdn_cuda.h"

#include <cuda_runtime_api.h>

#include <cstdint>
#include <exception>
#include <string>
#include <string_view>

#include "core/defaults.h"
#include "core/strategy_table.h"
#include "kernels/gdn_device.h"

namespace {

using sgdn::StrategyFamily;
static_assert(int(StrategyFamily::solver) == SGDN_CUDA_SOLVERS &&
                  int(StrategyFamily::score) == SGDN_CUDA_SCORES &&
                  int(StrategyFamily::selector) == SGDN_CUDA_SELECTORS &&
                  int(StrategyFamily::granularity) == SGDN_CUDA_GRANULARITIES,
              "sgdn_cuda_strategy_family numbers the families as sgdn::StrategyFamily");

thread_local std::string last_error;

sgdn_cuda_status set_error(sgdn_cuda_status status, std::string message) {
  last_error = std::move(message);
  return status;
}

struct Failure {
  sgdn_cuda_status status;
  std::string message;
};

sgdn::cuda::Problem to_problem(const sgdn_cuda_config& c) {
  using namespace sgdn::cuda;
  for (auto [family, code] :
       {std::pair{StrategyFamily::score, c.score}, {StrategyFamily::selector, c.selector}})
    if (!sgdn::strategy_name(family, code))
      throw Failure{SGDN_CUDA_INVALID_ARGUMENT, std::string(sgdn::family_name(family)) + " = " +
                                                    std::to_string(code) + " is not one of " +
                                                    sgdn::strategy_codes(family)};
  for (auto [name, dtype] :
       {std::pair<const char*, int32_t>{"input_dtype", c.input_dtype}, {"output_dtype", c.output_dtype}})
    if (dtype != SGDN_CUDA_FLOAT32 && dtype != SGDN_CUDA_BFLOAT16)
      throw Failure{SGDN_CUDA_INVALID_ARGUMENT, std::string(name) + " = " + std::to_string(dtype) +
                                                    " is not 0 (float32) or 1 (bfloat16)"};
  Problem p;
  p.num_seqs = c.num_seqs;
  p.total_tokens = c.total_tokens;
  p.qk_heads = c.qk_heads;
  p.v_heads = c.v_heads;
  p.key_dim = c.key_dim;
  p.value_dim = c.value_dim;
  p.chunk = c.chunk;
  p.group = c.group;
  p.solver_block = c.solver_block;
  p.solver_band = c.solver_band;
  p.score = ScoreKind(c.score);
  p.survival_skip_own_group = c.survival_skip_own_group != 0;
  p.selector = SelectorKind(c.selector);
  p.pair_granularity = c.head_granularity == SGDN_CUDA_GRANULARITY_PAIR;
  p.rho = c.rho;
  p.tau = c.tau;
  p.seed = c.seed;
  p.min_per_head = c.min_per_head;
  p.max_fraction = c.max_fraction;
  p.scale = c.scale;
  p.input_dtype = DType(c.input_dtype);
  p.output_dtype = DType(c.output_dtype);
  p.tensor_cores = c.tensor_cores != 0;
  if (p.qk_heads >= 1 && p.v_heads >= 1 && p.v_heads % p.qk_heads != 0)
    throw Failure{SGDN_CUDA_INVALID_ARGUMENT,
                  "v_heads = " + std::to_string(p.v_heads) +
                      " is not a multiple of qk_heads = " + std::to_string(p.qk_heads)};
  if (std::string problem = check_problem(p); !problem.empty()) {
    const bool unsupported = problem.find("not supported") != std::string::npos;
    throw Failure{unsupported ? SGDN_CUDA_UNSUPPORTED : SGDN_CUDA_INVALID_ARGUMENT, problem};
  }
  return p;
}

// A pointer the kernels will read or write: not null (unless optional), device memory, 16-byte aligned.
void check_pointer(const void* ptr, const char* name, bool optional) {
  if (!ptr) {
    if (optional) return;
    throw Failure{SGDN_CUDA_INVALID_ARGUMENT, std::string(name) + " is null"};
  }
  if (reinterpret_cast<uintptr_t>(ptr) % 16 != 0)
    throw Failure{SGDN_CUDA_INVALID_ARGUMENT, std::string(name) + " is not 16-byte aligned"};
  cudaPointerAttributes attributes{};
  const cudaError_t status = cudaPointerGetAttributes(&attributes, ptr);
  if (status != cudaSuccess) {
    cudaGetLastError();
    throw Failure{SGDN_CUDA_INVALID_ARGUMENT,
                  std::string(name) + ": cannot query the pointer (" + cudaGetErrorString(status) + ")"};
  }
  if (attributes.type != cudaMemoryTypeDevice && attributes.type != cudaMemoryTypeManaged)
    throw Failure{SGDN_CUDA_INVALID_ARGUMENT, std::string(name) + " is not device memory"};
}

}  // namespace

extern "C" {

void sgdn_cuda_default_config(sgdn_cuda_config* config) {
  if (!config) return;
  namespace d = sgdn::defaults;
  *config = sgdn_cuda_config{};
  config->num_seqs = 1;
  config->chunk = int32_t(d::kChunk);
  config->group = int32_t(d::kGroup);
  const bool exact = std::string_view(d::kSolver) == "exact";  // the C ABI's exact solver: band < 0
  config->solver_block = int32_t(exact ? d::kChunk : d::kSolverBlock);
  config->solver_band = int32_t(exact ? -1 : d::kSolverBand);
  config->score = sgdn::strategy_code(StrategyFamily::score, d::kScore);
  config->survival_skip_own_group = d::kSkipOwnGroup ? 1 : 0;
  config->selector = sgdn::strategy_code(StrategyFamily::selector, d::kSelector);
  config->head_granularity = sgdn::strategy_code(StrategyFamily::granularity, d::kGranularity);
  config->rho = d::kRho;
  config->tau = d::kTau;
  config->seed = d::kSeed;
  config->min_per_head = d::kMinPerHead;
  config->input_dtype = SGDN_CUDA_FLOAT32;
  config->output_dtype = SGDN_CUDA_FLOAT32;
  config->tensor_cores = 1;
  config->max_fraction = d::kMaxFraction;
}

int32_t sgdn_cuda_strategy_count(int32_t family) {
  for (StrategyFamily f : sgdn::kStrategyFamilies)
    if (int32_t(f) == family) return sgdn::strategies(f).count;
  return 0;
}

const char* sgdn_cuda_strategy_name(int32_t family, int32_t code) {
  for (StrategyFamily f : sgdn::kStrategyFamilies)
    if (int32_t(f) == family) return sgdn::strategy_name(f, code);
  return nullptr;
}

sgdn_cuda_status sgdn_cuda_workspace_size(const sgdn_cuda_config* config, size_t* bytes) {
  try {
    if (!config || !bytes) return set_error(SGDN_CUDA_INVALID_ARGUMENT, "config and bytes must not be null");
    *bytes = sgdn::cuda::workspace_bytes(to_problem(*config));
    last_error.clear();
    return SGDN_CUDA_OK;
  } catch (const Failure& f) {
    return set_error(f.status, f.message);
  } catch (const std::exception& e) {
    return set_error(SGDN_CUDA_INVALID_ARGUMENT, e.what());
  }
}

sgdn_cuda_status sgdn_cuda_forward(const sgdn_cuda_config* config, const sgdn_cuda_tensors* tensors,
                                   void* workspace, size_t workspace_bytes, sgdn_cuda_stream stream) {
  try {
    if (!config || !tensors)
      return set_error(SGDN_CUDA_INVALID_ARGUMENT, "config and tensors must not be null");
    const sgdn::cuda::Problem p = to_problem(*config);
    const sgdn_cuda_tensors& t = *tensors;
    check_pointer(t.q, "q", false);
    check_pointer(t.k, "k", false);
    check_pointer(t.v, "v", false);
    check_pointer(t.g, "g", false);
    check_pointer(t.beta, "beta", false);
    check_pointer(t.o, "o", false);
    check_pointer(t.cu_seqlens, "cu_seqlens", p.num_seqs == 1);
    check_pointer(t.initial_state, "initial_state", true);
    check_pointer(t.final_state, "final_state", true);
    check_pointer(t.event_mask, "event_mask", true);
    check_pointer(t.event_score, "event_score", true);
    check_pointer(t.budget, "budget", true);
    check_pointer(workspace, "workspace", false);
    const size_t needed = sgdn::cuda::workspace_bytes(p);
    if (workspace_bytes < needed)
      return set_error(SGDN_CUDA_WORKSPACE_TOO_SMALL, "workspace of " + std::to_string(workspace_bytes) +
                                                          " bytes is smaller than the " +
                                                          std::to_string(needed) + " needed");
    sgdn::cuda::DeviceTensors d;
    d.q = t.q;
    d.k = t.k;
    d.v = t.v;
    d.g = t.g;
    d.beta = t.beta;
    d.cu_seqlens = t.cu_seqlens;
    d.initial_state = t.initial_state;
    d.o = t.o;
    d.final_state = t.final_state;
    d.event_mask = t.event_mask;
    d.event_score = t.event_score;
    d.budget = t.budget;
    const std::string error =
        sgdn::cuda::forward(p, d, workspace, workspace_bytes, reinterpret_cast<cudaStream_t>(stream));
    if (!error.empty())
      return set_error(error.rfind("CUDA error", 0) == 0 ? SGDN_CUDA_CUDA_ERROR : SGDN_CUDA_INVALID_ARGUMENT,
                       error);
    last_error.clear();
    return SGDN_CUDA_OK;
  } catch (const Failure& f) {
    return set_error(f.status, f.message);
  } catch (const std::exception& e) {
    return set_error(SGDN_CUDA_INVALID_ARGUMENT, e.what());
  } catch (...) {
    return set_error(SGDN_CUDA_INVALID_ARGUMENT, "unknown error");
  }
}

const char* sgdn_cuda_last_error(void) {
  return last_error.c_str();
}

const char* sgdn_cuda_status_name(sgdn_cuda_status status) {
  switch (status) {
    case SGDN_CUDA_OK:
      return "ok";
    case SGDN_CUDA_INVALID_ARGUMENT:
      return "invalid argument";
    case SGDN_CUDA_UNSUPPORTED:
      return "unsupported";
    case SGDN_CUDA_WORKSPACE_TOO_SMALL:
      return "workspace too small";
    case SGDN_CUDA_CUDA_ERROR:
      return "CUDA error";
  }
  return "unknown status";
}

int sgdn_cuda_abi_version(void) {
  return SGDN_CUDA_ABI_VERSION;
}

}  // extern "C"
