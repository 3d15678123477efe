// PTX wrappers of sm_80 and later that the tensor-core kernels use: release / acquire flags, ldmatrix,
// mma.sync (bf16 m16n8k16 and tf32 m16n8k8) with the fragment loads and stores built on them, and cp.async.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/common/records.h"

namespace sgdn {
namespace cuda {
namespace detail {
namespace tc {

// Progress flags between the recurrence and the output stage, which runs beside it (programmatic dependent
// launch). The publisher calls publish() after a barrier that follows every store it covers; the waiter's
// threads 0-3 acquire a head's four flags, then a barrier hands the data to the block.
__device__ __forceinline__ void publish_progress(int32_t* flag, int32_t value) {
  __threadfence();
  asm volatile("st.release.gpu.global.s32 [%0], %1;\n" ::"l"(flag), "r"(value) : "memory");
}
__device__ __forceinline__ int32_t acquire_progress(const int32_t* flag) {
  int32_t value;
  asm volatile("ld.acquire.gpu.global.s32 %0, [%1];\n" : "=r"(value) : "l"(flag) : "memory");
  return value;
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
// A value the compiler must keep in a register: it cannot recompute what it cannot see (thread-constant
// offsets used at every event of a loop would otherwise be rebuilt from the thread index each time).
__device__ __forceinline__ int opaque(int x) {
  asm volatile("" : "+r"(x));
  return x;
}
__device__ __forceinline__ void ldsm_x4(uint32_t r[4], const bf16* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t r[4], const bf16* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void mma(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// This lane's element offset for a fragment's ldmatrix (a thread constant plus the tile position): the A
// fragment (16 x 16) at (m0, k0) of a [m][k] tile whose element (r, c) is at at(r, c) ...
template <class At>
__device__ __forceinline__ int a_lane_at(At at, int m0, int k0) {
  const int lane = threadIdx.x & 31;
  return at(m0 + (lane & 15), k0 + (lane >> 4) * 8);
}
// ... of a tile stored transposed, [k][m] ...
template <class At>
__device__ __forceinline__ int a_t_lane_at(At at, int m0, int k0) {
  const int lane = threadIdx.x & 31;
  return at(k0 + (lane & 7) + (lane >> 4) * 8, m0 + ((lane >> 3) & 1) * 8);
}
// ... and the B fragments of two n-tiles (k0..k0+15, n0..n0+15) of a [k][n] tile with row stride ld.
__device__ __forceinline__ int b_kn_lane(int ld, int k0, int n0) {
  const int lane = threadIdx.x & 31;
  return (k0 + (lane & 7) + ((lane >> 3) & 1) * 8) * ld + n0 + (lane >> 4) * 8;
}
// A fragment (16 x 16) at (m0, k0) of a [m][k] tile whose element (r, c) is at base + at(r, c).
template <class At>
__device__ __forceinline__ void load_a_at(uint32_t a[4], const bf16* base, At at, int m0, int k0) {
  ldsm_x4(a, base + a_lane_at(at, m0, k0));
}
// A fragment (16 x 16) at (m0, k0) of a tile stored transposed, [k][m], element (r, c) at base + at(r, c).
template <class At>
__device__ __forceinline__ void load_a_t_at(uint32_t a[4], const bf16* base, At at, int m0, int k0) {
  ldsm_x4_t(a, base + a_t_lane_at(at, m0, k0));
}
// The same from row-major tiles with row stride ld.
__device__ __forceinline__ void load_a(uint32_t a[4], const bf16* base, int ld, int m0, int k0) {
  load_a_at(
      a, base, [ld](int r, int c) { return r * ld + c; }, m0, k0);
}
__device__ __forceinline__ void load_a_t(uint32_t a[4], const bf16* base, int ld, int m0, int k0) {
  load_a_t_at(
      a, base, [ld](int r, int c) { return r * ld + c; }, m0, k0);
}
// B fragments of two n-tiles (k0..k0+15, n0..n0+15) of a [k][n] tile: b[0..1] tile n0, b[2..3] tile n0+8.
// (b_kn_lane's offset, added to the pointer in steps: as one integer offset the output stage compiles to
// other code, not yet measured on the device.)
__device__ __forceinline__ void load_b_kn(uint32_t b[4], const bf16* base, int ld, int k0, int n0) {
  const int lane = threadIdx.x & 31;
  ldsm_x4_t(b, base + (k0 + (lane & 7) + ((lane >> 3) & 1) * 8) * ld + n0 + (lane >> 4) * 8);
}
// The same from a tile stored [n][k] (e.g. K for Q Kᵀ).
__device__ __forceinline__ void load_b_nk(uint32_t b[4], const bf16* base, int ld, int k0, int n0) {
  const int lane = threadIdx.x & 31;
  ldsm_x4(b, base + (n0 + (lane & 7) + (lane >> 4) * 8) * ld + k0 + ((lane >> 3) & 1) * 8);
}
// e^x for the tensor-core kernels' decays: the hardware's 2^x of x log2 e, as __expf, without __expf's three
// instructions that keep results below 2^-126 (those flush to zero); e^-inf = 0, so that a masked entry's
// decay is zero without a branch around it.
__device__ __forceinline__ float exp_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x * 1.4426950408889634f));
  return y;
}
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}
__device__ __forceinline__ float2 unpack_bf16(uint32_t x) {
  __nv_bfloat162 v = *reinterpret_cast<__nv_bfloat162*>(&x);
  return __bfloat1622float2(v);
}
// One warp's m16 x (16 NP) tile: acc[2 NP][4] += A (16 rows from m0, k in [0, K)) B (k, 16 NP columns from
// n0). A is stored [m][k] (AT = false) or [k][m]; B is stored [k][n] (BT = false) or [n][k].
template <int NP, int K, bool AT, bool BT>
__device__ __forceinline__ void warp_tile_mma(float (&acc)[2 * NP][4], const bf16* a, int lda, int m0,
                                              const bf16* b, int ldb, int n0) {
  for (int k0 = 0; k0 < K; k0 += 16) {
    uint32_t af[4];
    if constexpr (AT)
      load_a_t(af, a, lda, m0, k0);
    else
      load_a(af, a, lda, m0, k0);
    for (int np = 0; np < NP; ++np) {
      uint32_t bf[4];
      if constexpr (BT)
        load_b_nk(bf, b, ldb, k0, n0 + np * 16);
      else
        load_b_kn(bf, b, ldb, k0, n0 + np * 16);
      mma(acc[2 * np], af, bf[0], bf[1]);
      mma(acc[2 * np + 1], af, bf[2], bf[3]);
    }
  }
}
// One warp's m16 x (8 NT) accumulator tile, rounded to bf16, into a row-major tile (row stride ld) at (m0,
// n0); the _at form takes this thread's first element, dst + (m0 + gq) ld + n0 + 2 tq.
template <int NT>
__device__ __forceinline__ void store_tile_bf16_at(bf16* at, int ld, const float (&acc)[NT][4]) {
  for (int nt = 0; nt < NT; ++nt) {
    *reinterpret_cast<uint32_t*>(at + nt * 8) = pack_bf16(acc[nt][0], acc[nt][1]);
    *reinterpret_cast<uint32_t*>(at + 8 * ld + nt * 8) = pack_bf16(acc[nt][2], acc[nt][3]);
  }
}
template <int NT>
__device__ __forceinline__ void store_tile_bf16(bf16* dst, int ld, int m0, int n0,
                                                const float (&acc)[NT][4]) {
  const int lane = threadIdx.x & 31, gq = lane >> 2, tq = lane & 3;
  store_tile_bf16_at(dst + (m0 + gq) * ld + n0 + tq * 2, ld, acc);
}

// 16-byte asynchronous copy; src_bytes = 0 writes zeros (rows past a sequence's end).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
               "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::);
}
__device__ __forceinline__ void cp_async_wait_all() {
  asm volatile("cp.async.wait_all;\n" ::: "memory");
}
// Waits for all committed copy groups but the newest `Pending`.
template <int Pending>
__device__ __forceinline__ void cp_async_wait_group() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending) : "memory");
}
// The same for a count known at run time, at most Max (1 or 2): Max, ..., 1, or 0 or less (all of them).
template <int Max = 1>
__device__ __forceinline__ void cp_async_wait_but(int pending) {
  static_assert(Max == 1 || Max == 2, "one or two groups pending");
  if (Max == 2 && pending >= 2)
    cp_async_wait_group<2>();
  else if (pending >= 1)
    cp_async_wait_group<1>();
  else
    cp_async_wait_all();
}

// rows x 128 bf16 from global rows (row stride `gstride` elements) into a tile whose element (r, c) is at
// dst + at(r, c); rows >= len become zeros. `Threads` threads take part (the block's, or those of rank 0 ..
// Threads − 1 by `rank`, e.g. one warpgroup's), 16
// consecutive threads per row, `rows` a multiple of Threads / 16. With the thread count known at compile
// time each thread's column and row step are constants, and the passes unroll into back-to-back copies
// (Unrolled) or stay a loop that issues one copy per turn (for blocks that run beside a dense recurrence,
// see output_tc_block).
template <int Threads, bool Unrolled, class At>
__device__ __forceinline__ void copy_rows_at(bf16* dst, At at, const bf16* src, int64_t gstride, int len,
                                             int rows = kC, int rank = int(threadIdx.x)) {
  constexpr int kPieces = kD / 8, kRowStep = Threads / kPieces;  // 16-byte pieces per row; rows per pass
  static_assert(Threads % kPieces == 0, "whole rows per pass");
  const int r0 = rank / kPieces, col = (rank % kPieces) * 8;
  constexpr int kUnroll = Unrolled ? 8 : 1;  // every pass (rows / kRowStep is at most 8), or one at a time
  const bf16* from = src + r0 * gstride + col;
#pragma unroll kUnroll
  for (int pass = 0; pass < rows / kRowStep; ++pass, from += kRowStep * gstride) {
    const int i = r0 + pass * kRowStep;
    const bool valid = i < len;
    cp_async16(dst + at(i, col), valid ? from : src, valid);
  }
}
// The same into a [rows][kLd] tile.
template <int Threads, bool Unrolled>
__device__ __forceinline__ void copy_rows(bf16* dst, const bf16* src, int64_t gstride, int len,
                                          int rows = kC) {
  copy_rows_at<Threads, Unrolled>(
      dst, [](int r, int c) { return r * kLd + c; }, src, gstride, len, rows);
}
__device__ __forceinline__ uint32_t to_tf32(float x) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
  return r;
}
// acc (16 x 16: two n8 tiles) += A B for 16 x 16 fp32 tiles in shared memory (row strides lda, ldb), tf32
// operands, fp32 accumulation.
__device__ __forceinline__ void mma_16x16_tf32(float (&acc)[2][4], const float* a, int lda, const float* b,
                                               int ldb) {
  const int lane = threadIdx.x & 31, gq = lane >> 2, tq = lane & 3;
  for (int k0 = 0; k0 < 16; k0 += 8) {
    const uint32_t a0 = to_tf32(a[gq * lda + k0 + tq]), a1 = to_tf32(a[(gq + 8) * lda + k0 + tq]);
    const uint32_t a2 = to_tf32(a[gq * lda + k0 + tq + 4]), a3 = to_tf32(a[(gq + 8) * lda + k0 + tq + 4]);
    for (int nt = 0; nt < 2; ++nt) {
      const int r0 = k0 + tq, r1 = k0 + tq + 4, c = nt * 8 + gq;
      const uint32_t b0 = to_tf32(b[r0 * ldb + c]);
      const uint32_t b1 = to_tf32(b[r1 * ldb + c]);
      asm volatile(
          "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
          "{%0,%1,%2,%3};\n"
          : "+f"(acc[nt][0]), "+f"(acc[nt][1]), "+f"(acc[nt][2]), "+f"(acc[nt][3])
          : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    }
  }
}
}  // namespace tc
}  // namespace detail
}  // namespace cuda
}  // namespace sgdn
