// PTX wrappers of sm_90a that the tensor-core kernels use: warpgroup products (wgmma) on 128- and 64-byte
// swizzled tiles and their descriptors, the async proxy's fences, mbarriers, tensor copies (TMA) and bulk
// copies in both directions, the L2 prefetch, and the warpgroup products built from them.
#pragma once
#include <cuda.h>  // CUtensorMap
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/common/records.h"
#include "kernels/common/sm80.h"

namespace sgdn {
namespace cuda {
namespace detail {
namespace tc {

// ---- warpgroup products (wgmma, sm_90a) for the pre-pass: the block's four warps issue one 64-row product
// together; B (and A, unless it comes from registers) is read from shared memory through a descriptor, once
// for the whole warpgroup (mma.sync has every warp load its own copy of B through ldmatrix). The
// accumulator's thread layout is mma.sync's m16n8 C fragment: warp w on rows 16w.., entries 4j..4j+3 for
// columns 8j...
// Operand tiles (64 x 128 bf16) use the 128-byte swizzle that wgmma reads (sw128): two halves of 64 columns,
// each 64 rows of 128 bytes whose 16-byte pieces are permuted by the row (piece p of row r at p ^ r % 8),
// aligned to 1024 bytes. A copy or a read of one row's half by a quarter-warp is one 128-byte line, and a
// warp's copies take two whole rows of memory. The descriptor's strides are 1024 bytes (8 rows); a step of k
// (16) moves the start by 32 bytes read k-major (k along the columns: K Kᵀ, U Uᵀ) or by 2048 bytes read
// mn-major (k along the rows: the second operand of A V and A K, whose 64 columns are one half).
// (sw128_rows: the same for a tile of R rows, whose halves are R rows apart: the output stage's 128-row
// state.)
template <int R>
__device__ __forceinline__ int sw128_rows(int r, int c) {
  return (c >> 6) * (R * 64) + r * 64 + ((((c >> 3) & 7) ^ (r & 7)) << 3) + (c & 7);
}
__device__ __forceinline__ int sw128(int r, int c) {
  return sw128_rows<kC>(r, c);
}
constexpr uint32_t kSwKMajorStep = 32 >> 4, kSwMnMajorStep = 2048 >> 4;  // k steps, in descriptor units
__device__ __forceinline__ uint64_t sw128_desc(const bf16* tile) {
  return uint64_t(smem_addr(tile) >> 4) | (uint64_t(1024 >> 4) << 16) | (uint64_t(1024 >> 4) << 32) |
         (uint64_t(1) << 62);
}
// Before the first product of a group: the accumulator and A registers written by ordinary instructions.
__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
// Waits for this warpgroup's committed products; the empty asm keeps the accumulator's uses below the wait.
template <int N>
__device__ __forceinline__ void wgmma_wait_all(float (&d)[N]) {
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
// Shared-memory writes by ordinary stores and cp.async made visible to later wgmma reads (then a barrier).
__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// Bulk copies by the tensor memory accelerator (TMA) into shared memory, each completing its bytes on an
// mbarrier that the waiting threads test by phase parity.
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(arrivals) : "memory");
}
__device__ __forceinline__ void mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void mbar_expect_bytes(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  uint32_t done;
  do
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, "
        "p;\n}\n"
        : "=r"(done)
        : "r"(smem_addr(bar)), "r"(parity)
        : "memory");
  while (!done);
}
__device__ __forceinline__ void tma_load_2d(void* dst, const CUtensorMap* map, int x, int y, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], "
      "[%4];\n" ::"r"(smem_addr(dst)),
      "l"(map), "r"(x), "r"(y), "r"(smem_addr(bar))
      : "memory");
}
__device__ __forceinline__ void tma_load_3d(void* dst, const CUtensorMap* map, int x, int y, int z,
                                            uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], "
      "[%5];\n" ::"r"(smem_addr(dst)),
      "l"(map), "r"(x), "r"(y), "r"(z), "r"(smem_addr(bar))
      : "memory");
}
// A sw128 tile of `Rows` rows x 128 columns as its two 64-column boxes, from row `row` of a 2D map or token
// `token` of a head of a 3D one ([token][head][128]), completing on `bar` (one thread issues them).
template <int Rows = kC>
__device__ __forceinline__ void tma_load_tile(bf16* tile, const CUtensorMap* map, int row, uint64_t* bar) {
  tma_load_2d(tile, map, 0, row, bar);
  tma_load_2d(tile + Rows * 64, map, 64, row, bar);
}
__device__ __forceinline__ void tma_load_tile(bf16* tile, const CUtensorMap* map, int head, int token,
                                              uint64_t* bar) {
  tma_load_3d(tile, map, 0, head, token, bar);
  tma_load_3d(tile + kC * 64, map, 64, head, token, bar);
}
__device__ __forceinline__ void bulk_load(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
          smem_addr(dst)),
      "l"(src), "r"(bytes), "r"(smem_addr(bar))
      : "memory");
}
// A tile from shared memory to global memory by the tensor memory accelerator (this thread's bulk
// async-group; the writers of the tile fence_proxy_async() and a barrier before it is issued).
__device__ __forceinline__ void tma_store_2d(const CUtensorMap* map, int x, int y, const void* src) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];\n" ::"l"(map),
               "r"(x), "r"(y), "r"(smem_addr(src))
               : "memory");
}
// The bulk async-groups of this thread's copies from shared to global memory.
__device__ __forceinline__ void bulk_commit() {
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}
// Waits until this thread's bulk groups but the newest `Pending` have read their source (the shared memory
// may be written again) ...
template <int Pending>
__device__ __forceinline__ void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(Pending) : "memory");
}
// ... or have written their destination, which is then ordered before this thread's later ordinary
// accesses (a release by another thread of the block after a barrier publishes it).
template <int Pending>
__device__ __forceinline__ void bulk_wait_written() {
  asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(Pending) : "memory");
  asm volatile("fence.proxy.async.global;\n" ::: "memory");
}
// The 32 fp32 accumulators of an m64n64 warpgroup product: asm operands %0..%31 of the helpers below.
#define SGDN_WGMMA_ACC32_REGS                                                                                \
  "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%" \
  "28,%29,%30,%31}"
#define SGDN_WGMMA_ACC32(d)                                                                                 \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),           \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
      "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]),            \
      "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),            \
      "+f"(d[30]), "+f"(d[31])
// d (64 x 64) (+)= A B, both from shared memory through descriptors, both stored k-major. Accumulates when
// `accumulate` is nonzero, else overwrites.
__device__ __forceinline__ void wgmma_m64n64k16_ss(float (&d)[32], uint64_t da, uint64_t db, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " SGDN_WGMMA_ACC32_REGS
      ", %32, %33, p, 1, 1, 0, 0;\n}\n"
      : SGDN_WGMMA_ACC32(d)
      : "l"(da), "l"(db), "r"(accumulate));
}
// The same with B stored mn-major (transposed: its 16-byte pieces run along n).
__device__ __forceinline__ void wgmma_m64n64k16_ss_t(float (&d)[32], uint64_t da, uint64_t db,
                                                     int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " SGDN_WGMMA_ACC32_REGS
      ", %32, %33, p, 1, 1, 0, 1;\n}\n"
      : SGDN_WGMMA_ACC32(d)
      : "l"(da), "l"(db), "r"(accumulate));
}
// d (64 x 64) (+)= A B, A from registers (this warp's 16 x 16 fragment, mma.sync's A layout), B from shared
// memory stored mn-major (transposed: its 16-byte pieces run along n).
__device__ __forceinline__ void wgmma_m64n64k16_rs_t(float (&d)[32], const uint32_t (&a)[4], uint64_t db,
                                                     int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " SGDN_WGMMA_ACC32_REGS
      ", {%32,%33,%34,%35}, %36, p, 1, 1, 1;\n}\n"
      : SGDN_WGMMA_ACC32(d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accumulate));
}
// This warp's rows of a wgmma accumulator (16 x 64 at column c0; the warp's rank in its warpgroup picks the
// rows), rounded to bf16, into an sw128 tile (a warp's 4-byte stores for one n8 tile fall in 32 distinct
// banks).
__device__ __forceinline__ void store_acc_sw128(bf16* tile, const float (&acc)[32], int c0) {
  const int lane = threadIdx.x & 31, gq = lane >> 2, tq = lane & 3;
  const int r = ((threadIdx.x >> 5) & 3) * 16 + gq;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int c = c0 + j * 8 + tq * 2;
    *reinterpret_cast<uint32_t*>(tile + sw128(r, c)) = pack_bf16(acc[4 * j], acc[4 * j + 1]);
    *reinterpret_cast<uint32_t*>(tile + sw128(r + 8, c)) = pack_bf16(acc[4 * j + 2], acc[4 * j + 3]);
  }
}
// The 16 fp32 accumulators of an m64n32 warpgroup product: asm operands %0..%15.
#define SGDN_WGMMA_ACC16_REGS "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}"
#define SGDN_WGMMA_ACC16(d)                                                                       \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
// 32-column operands stored mn-major in the 64-byte swizzle (sw64: rows of 64 bytes whose 16-byte pieces are
// permuted by the row pair, piece p of row r at p ^ (r / 2) % 4; the tensor copies' SWIZZLE_64B and the
// recurrence's swz_u<32>), aligned to 512 bytes: 8-row groups 512 bytes apart, a step of k (16 rows) 1024.
constexpr uint32_t kSw64MnMajorStep = 1024 >> 4;
__device__ __forceinline__ uint64_t sw64_desc(const bf16* tile) {
  return uint64_t(smem_addr(tile) >> 4) | (uint64_t(512 >> 4) << 16) | (uint64_t(512 >> 4) << 32) |
         (uint64_t(2) << 62);
}
// d (64 x 32) (+)= A B, A k-major through its descriptor (sw128), B mn-major (sw64).
__device__ __forceinline__ void wgmma_m64n32k16_ss_t(float (&d)[16], uint64_t da, uint64_t db,
                                                     int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 " SGDN_WGMMA_ACC16_REGS
      ", %16, %17, p, 1, 1, 0, 1;\n}\n"
      : SGDN_WGMMA_ACC16(d)
      : "l"(da), "l"(db), "r"(accumulate));
}
// d (64 x 32) += A B, A from registers (this warp's 16 x 16 fragment), B mn-major (sw64).
__device__ __forceinline__ void wgmma_m64n32k16_rs_t(float (&d)[16], const uint32_t (&a)[4], uint64_t db) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 " SGDN_WGMMA_ACC16_REGS
      ", {%16,%17,%18,%19}, %20, p, 1, 1, 1;\n}\n"
      : SGDN_WGMMA_ACC16(d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}
// Rows len.. of a 64-row sw128 tile (two 64-column halves) set to zero: the tokens after a short chunk's
// end, which a tensor copy brings (block-wide; a barrier before the tile is read).
__device__ __forceinline__ void zero_rows_sw128(bf16* tile, int len) {
  for (int e = threadIdx.x; e < (kC - len) * (kD / 8); e += blockDim.x) {
    const int i = len + e / (kD / 8), col = (e % (kD / 8)) * 8;
    *reinterpret_cast<uint4*>(tile + sw128(i, col)) = make_uint4(0u, 0u, 0u, 0u);
  }
}
// Asks L2 for bytes [first, first + bytes) of a tensor (widened to 16-byte bounds, which never leave the
// allocation's pages): a hint, completing on nothing.
__device__ __forceinline__ void prefetch_l2(const void* base, int64_t first, int64_t bytes) {
  const int64_t lo = first & ~int64_t(15), hi = (first + bytes + 15) & ~int64_t(15);
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(static_cast<const char*>(base) + lo),
               "r"(uint32_t(hi - lo))
               : "memory");
}
// Bytes of a 64 x 128 bf16 tile, what its two 64-column tensor copies deliver.
constexpr uint32_t kTileBytes = kC * kD * sizeof(bf16);
// Orders this thread's earlier generic accesses to global memory (an acquire) before its later tensor copies.
__device__ __forceinline__ void fence_proxy_async_global() {
  asm volatile("fence.proxy.async.global;\n" ::: "memory");
}
// D (64 x 64) = A B (or D += A B) over k = 64: A this warp's fragments `f`, B columns c0..c0+63 of an sw128
// tile read mn-major (V, K, U, W: k runs along the tile's rows).
__device__ __forceinline__ void rs_product(float (&acc)[32], const uint32_t (&f)[4][4], const bf16* b, int c0,
                                           bool accumulate = false) {
  const uint64_t desc = sw128_desc(b + (c0 >> 6) * (kC * 64));
  wgmma_fence();
#pragma unroll
  for (int ks = 0; ks < kC / 16; ++ks)
    wgmma_m64n64k16_rs_t(acc, f[ks], desc + ks * kSwMnMajorStep, accumulate || ks);
  wgmma_commit();
  wgmma_wait_all(acc);
}
// d (64 x 64) = X Yᵀ over k = 128 for sw128 tiles X, Y (Q Kᵀ): four steps in each 64-column half. Issued, not
// committed.
__device__ __forceinline__ void times_abt(float (&d)[32], const bf16* x, const bf16* y) {
#pragma unroll
  for (int ks = 0; ks < kD / 16; ++ks)
    wgmma_m64n64k16_ss(d, sw128_desc(x + (ks >> 2) * (kC * 64)) + (ks & 3) * kSwKMajorStep,
                       sw128_desc(y + (ks >> 2) * (kC * 64)) + (ks & 3) * kSwKMajorStep, ks);
}
// D (64 x 64) = X Yᵀ committed and waited for (K Kᵀ, U Uᵀ).
__device__ __forceinline__ void abt_product(float (&acc)[32], const bf16* x, const bf16* y) {
  wgmma_fence();
  times_abt(acc, x, y);
  wgmma_commit();
  wgmma_wait_all(acc);
}
}  // namespace tc
}  // namespace detail
}  // namespace cuda
}  // namespace sgdn
