// A measuring aid (not part of the library): how long a group of warpgroup products takes on one
// multiprocessor, from the first wgmma's issue to the group's wait, in clock cycles, for the shapes the
// recurrence's event is made of. One block of one or two warpgroups; the operands are shared-memory tiles in
// the layouts the recurrence uses (A k-major sw128, B mn-major sw64 for 32 columns, sw128 for 64); their
// contents do not matter to the timing. Build and run (sm_90a):
//   nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -I. \
//        experiments/perf/wgmma_probe.cu -o build-cuda/wgmma_probe -lcuda && build-cuda/wgmma_probe
#include "kernels/gdn_kernels.cu"

namespace sgdn {
namespace cuda {
namespace {
namespace tc {

constexpr int kReps = 64;
// The cases: what one warpgroup issues between its fence and its wait.
enum Case : int {
  kSs32x8,        // W Sb: 8 x m64n32k16, A sw128 k-major, B sw64 mn-major, one accumulator
  kSs32x8Two,     // the same in two accumulators (k even, odd)
  kSs32x4,        // 4 of them (k = 64)
  kSs32x1,        // one
  kRs32x4,        // the state's update: 4 x m64n32k16, A from registers
  kSs64x8,        // 8 x m64n64k16 (B sw128 mn-major)
  kSs64x4,        // 4 x m64n64k16
  kSs32x8Split,   // two groups of 4 committed apart, waited together
  kSs32x4Halves,  // 4 x m64n32k16, warpgroup g on W's half g and Sb's rows 64 g..
  kXchg,          // the same, then half of the sums handed to the other warpgroup (both issuing only)
  kStores,        // no product: 8 shared stores of 4 bytes per thread
  kStoresFence,   // the same, then fence.proxy.async
  kCases
};
const char* const kNames[kCases] = {"ss n32 x8 (W Sb)",
                                    "ss n32 x8, two accumulators",
                                    "ss n32 x4",
                                    "ss n32 x1",
                                    "rs n32 x4 (state update)",
                                    "ss n64 x8",
                                    "ss n64 x4",
                                    "ss n32 2 groups of 4",
                                    "ss n32 x4, halves by g",
                                    "ss n32 x4 halves + exchange",
                                    "8 st.shared",
                                    "8 st.shared + proxy fence"};

struct ProbeSmem {
  alignas(1024) bf16 a[kC * kD];  // 64 x 128, sw128 (two halves)
  alignas(1024) bf16 b[kD * 64];  // 128 x 64 mn-major
  float4 xchg[2][256];
};

// cycles[wg][case]: the mean over kReps groups (one more, the first, not counted), per warpgroup; cycles[2 +
// wg][case]: of that, the time from the fence to past the group's commit (the issue alone).
__global__ void probe_kernel(long long* cycles, int wgs_busy) {
  extern __shared__ __align__(16) unsigned char raw[];
  ProbeSmem& sm = *reinterpret_cast<ProbeSmem*>(raw + ((1024 - (smem_addr(raw) & 1023)) & 1023));
  for (int i = threadIdx.x; i < kC * kD; i += blockDim.x) sm.a[i] = __float2bfloat16(0.001f * (i % 7));
  for (int i = threadIdx.x; i < kD * 64; i += blockDim.x) sm.b[i] = __float2bfloat16(0.002f * (i % 5));
  fence_proxy_async();
  __syncthreads();
  const int wg = threadIdx.x / 128;
  if (wg >= wgs_busy) return;
  const uint64_t da = sw128_desc(sm.a), db32 = sw64_desc(sm.b), db64 = sw128_desc(sm.b);
  // A at k-step ks (16 columns): the 32-byte steps within one sw128 half, the halves 64 x 128 bytes apart.
  auto a_at = [&](int ks) { return da + (ks >> 2) * (kC * 64 * 2 >> 4) + (ks & 3) * kSwKMajorStep; };
  // A chain of N products over k-steps 0..N-1 (N a compile-time count, so that the issue is unrolled), into
  // one accumulator: 32 columns (B sw64) or 64 (B sw128).
  auto chain32 = [&](auto n, float(&d)[16]) {
#pragma unroll
    for (int ks = 0; ks < decltype(n)::value; ++ks)
      wgmma_m64n32k16_ss_t(d, a_at(ks), db32 + ks * kSw64MnMajorStep, ks);
  };
  auto chain64 = [&](auto n, float(&d)[32]) {
#pragma unroll
    for (int ks = 0; ks < decltype(n)::value; ++ks)
      wgmma_m64n64k16_ss_t(d, a_at(ks), db64 + ks * kSwMnMajorStep, ks);
  };
  using Four = std::integral_constant<int, 4>;
  using Eight = std::integral_constant<int, 8>;
  uint32_t af[4] = {0x3c003c00u, 0x3c003c00u, 0x3c003c00u, 0x3c003c00u};
  float sink = 0.f;
  for (int c = 0; c < kCases; ++c) {
    if (c == kXchg && wgs_busy < 2) continue;
    long long total = 0, issued = 0;
    for (int rep = 0; rep <= kReps; ++rep) {
      float acc[16] = {}, acc2[16] = {}, acc64[32] = {};
      asm volatile("bar.sync %0, 128;" ::"r"(wg + 1));
      const long long t0 = clock64();
      if (c == kStores || c == kStoresFence) {
        uint32_t* to = reinterpret_cast<uint32_t*>(sm.b) + (threadIdx.x & 127);
#pragma unroll
        for (int i = 0; i < 8; ++i) to[i * 128] = rep + i;
        if (c == kStoresFence) fence_proxy_async();
        const long long t1 = clock64();
        if (rep > 0) total += t1 - t0;
        continue;
      }
      wgmma_fence();
      switch (c) {
        case kSs32x8:
          chain32(Eight{}, acc);
          break;
        case kSs32x8Two:
#pragma unroll
          for (int ks = 0; ks < 8; ++ks)
            wgmma_m64n32k16_ss_t(ks & 1 ? acc2 : acc, a_at(ks), db32 + ks * kSw64MnMajorStep, ks > 1);
          break;
        case kSs32x4:
        case kSs32x8Split:
          chain32(Four{}, acc);
          if (c == kSs32x8Split) {
            wgmma_commit();
#pragma unroll
            for (int ks = 4; ks < 8; ++ks)
              wgmma_m64n32k16_ss_t(acc2, a_at(ks), db32 + ks * kSw64MnMajorStep, ks > 4);
          }
          break;
        case kSs32x4Halves:
        case kXchg:
#pragma unroll
          for (int ks = 0; ks < 4; ++ks)
            wgmma_m64n32k16_ss_t(acc, a_at(wg * 4 + ks), db32 + (wg * 4 + ks) * kSw64MnMajorStep, ks);
          break;
        case kSs32x1:
          wgmma_m64n32k16_ss_t(acc, da, db32, 0);
          break;
        case kRs32x4:
#pragma unroll
          for (int ks = 0; ks < 4; ++ks) wgmma_m64n32k16_rs_t(acc, af, db32 + ks * kSw64MnMajorStep);
          break;
        case kSs64x8:
          chain64(Eight{}, acc64);
          break;
        case kSs64x4:
          chain64(Four{}, acc64);
          break;
      }
      wgmma_commit();
      // How long the issuing warp took to get past its products' issue (before any wait): whether a
      // product's issue holds the warp, or only its result is late.
      const long long ti = clock64();
      if (rep > 0) issued += ti - t0;
      wgmma_wait_all(acc);
      wgmma_wait_all(acc2);
      wgmma_wait_all(acc64);
      if (c == kXchg) {
        const int t = threadIdx.x & 127;
        float give[8];
#pragma unroll
        for (int i = 0; i < 8; ++i) give[i] = wg ? acc[i] : acc[8 + i];
        sm.xchg[wg][t] = make_float4(give[0], give[1], give[2], give[3]);
        sm.xchg[wg][128 + t] = make_float4(give[4], give[5], give[6], give[7]);
        named_barrier(1, 256);
        const float4 o = sm.xchg[1 - wg][t], o1 = sm.xchg[1 - wg][128 + t];
        acc[0] += o.x + o.y + o.z + o.w + o1.x + o1.y + o1.z + o1.w;
      }
      const long long t1 = clock64();
      if (rep > 0) total += t1 - t0;
      sink += acc[0] + acc2[0] + acc64[0];
    }
    if (threadIdx.x % 128 == 0) {
      cycles[wg * kCases + c] = total / kReps;
      cycles[(2 + wg) * kCases + c] = issued / kReps;
    }
  }
  if (sink == 12345.f) cycles[0] = -1;  // keeps the products
}

}  // namespace tc
}  // namespace
}  // namespace cuda
}  // namespace sgdn

int main() {
  using namespace sgdn::cuda::tc;
  long long* d = nullptr;
  cudaMalloc(&d, sizeof(long long) * 4 * kCases);
  const int smem = sizeof(ProbeSmem) + 1024;
  cudaFuncSetAttribute(probe_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  cudaDeviceProp p{};
  cudaGetDeviceProperties(&p, 0);
  std::printf("device %s\n", p.name);
  for (int busy = 1; busy <= 2; ++busy) {
    cudaMemset(d, 0, sizeof(long long) * 4 * kCases);
    probe_kernel<<<1, 256, smem>>>(d, busy);
    long long h[4 * kCases];
    if (cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost) != cudaSuccess) {
      std::printf("error %s\n", cudaGetErrorString(cudaGetLastError()));
      return 1;
    }
    for (int c = 0; c < kCases; ++c)
      std::printf(
          "warpgroups issuing %d | %-30s | cycles wg0 %5lld wg1 %5lld | of which issue wg0 %5lld wg1 %5lld\n",
          busy, kNames[c], h[c], busy > 1 ? h[kCases + c] : 0LL, h[2 * kCases + c],
          busy > 1 ? h[3 * kCases + c] : 0LL);
  }
  return 0;
}
