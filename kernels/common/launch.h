// Host helpers of the stage launchers: CUDA errors as messages, and launch_kernel.
#pragma once
#include <cuda_runtime.h>

#include <string>

// Returns the message of a failed CUDA call, or of the last launch, from the enclosing function.
#define SGDN_TRY_CUDA(call)                                                              \
  do {                                                                                   \
    cudaError_t status_ = (call);                                                        \
    if (status_ != cudaSuccess)                                                          \
      return std::string("CUDA error in ") + #call + ": " + cudaGetErrorString(status_); \
  } while (0)
#define SGDN_TRY_LAUNCH(what)                                                              \
  do {                                                                                     \
    cudaError_t status_ = cudaGetLastError();                                              \
    if (status_ != cudaSuccess)                                                            \
      return std::string("CUDA error after ") + what + ": " + cudaGetErrorString(status_); \
  } while (0)
namespace sgdn {
namespace cuda {
namespace detail {

// Launches `kernel` (named `name` in errors) with its dynamic shared memory. early: programmatic dependent
// launch, the kernel's blocks may be placed while the kernel before it in the stream still runs (from the
// moment all of that kernel's blocks have called let_next_grid_start(), or have exited); the kernel calls
// wait_for_previous_grid() before it reads what came before. The score kernel, the rank and select kernels,
// the mask expansion, the tensor-core pre-pass and the recurrence are launched so (stride's, random's and
// threshold's marking kernels plainly): each one's launch overlaps the end of the one before, without
// the gap of a plain launch. The tensor-core output stage goes further: its blocks wait on the recurrence's
// progress flags, so each starts as soon as its group's snapshot exists, on the multiprocessors the
// recurrence leaves free (the recurrence never waits on it, so no launch order can deadlock). With a sparse
// selector on the tensor-core path the mask expansion comes between them without waiting for the recurrence
// (see expand_mask_kernel).
template <class... Params, class... Args>
std::string launch_kernel(const char* name, void (*kernel)(Params...), dim3 grid, int threads, size_t smem,
                          cudaStream_t stream, bool early, Args... args) {
  if (cudaError_t status =
          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
      status != cudaSuccess)
    return std::string("CUDA error setting the shared memory of ") + name + ": " + cudaGetErrorString(status);
  cudaLaunchAttribute overlap{};
  overlap.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  overlap.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = dim3(unsigned(threads));
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = &overlap;
  config.numAttrs = early ? 1 : 0;
  if (cudaError_t status = cudaLaunchKernelEx(&config, kernel, args...); status != cudaSuccess)
    return std::string("CUDA error launching ") + name + ": " + cudaGetErrorString(status);
  return {};
}

}  // namespace detail
}  // namespace cuda
}  // namespace sgdn
