/* SparseGDN CUDA backend: a plain C ABI (SPEC §12) for callers outside C++, e.g. Python through ctypes
 * (kernels/python/sgdn_cuda.py).
 *
 * All tensors are dense, row-major, on the current CUDA device, 16-byte aligned:
 *   q, k          [total_tokens, H, K]    input dtype (float32 or bfloat16)
 *   v             [total_tokens, HV, V]   input dtype
 *   g             [total_tokens, HV]      float32, log decay (<= 0)
 *   beta          [total_tokens, HV]      input dtype
 *   cu_seqlens    [num_seqs + 1]          int32 (may be NULL when num_seqs == 1), as in FLA's varlen path
 *   initial_state [num_seqs, HV, K, V]    float32 or NULL
 *   o             [total_tokens, HV, V]   output dtype
 *   final_state   [num_seqs, HV, K, V]    float32 or NULL
 *   event_mask    uint8, event_score float32: [N_total * HV] or NULL, where sequence s owns the block
 *                 [off_s * HV, off_{s+1} * HV) laid out [HV, N_s], N_s = ceil(len_s / chunk), off_s =
 *                 the running sum of N over the sequences before s
 *   budget        [num_seqs, units] int32 or NULL; units = H (pair granularity) or HV (head)
 *
 * Every call is asynchronous on `stream`; nothing synchronises. The workspace is caller-owned device memory
 * of at least sgdn_cuda_workspace_size() bytes. Errors return a status; sgdn_cuda_last_error() gives the
 * message (per thread).
 */
#ifndef SGDN_CUDA_H
#define SGDN_CUDA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SGDN_CUDA_ABI_VERSION 4

typedef struct CUstream_st* sgdn_cuda_stream; /* the same type as cudaStream_t; NULL is the default stream */

typedef enum {
  SGDN_CUDA_OK = 0,
  SGDN_CUDA_INVALID_ARGUMENT = 1, /* a null, misaligned or host pointer, or inconsistent sizes */
  SGDN_CUDA_UNSUPPORTED = 2,      /* valid but not implemented on the GPU (head dim, chunk size, ...) */
  SGDN_CUDA_WORKSPACE_TOO_SMALL = 3,
  SGDN_CUDA_CUDA_ERROR = 4 /* a CUDA call failed */
} sgdn_cuda_status;

typedef enum { SGDN_CUDA_FLOAT32 = 0, SGDN_CUDA_BFLOAT16 = 1 } sgdn_cuda_dtype;

/* The strategy codes come from the project's one table of strategies, core/strategies.def (found relative
 * to this header), e.g. SGDN_CUDA_SELECT_HEAD_BUDGET = 4; the names go with them, as
 * sgdn_cuda_strategy_name() gives them. Each enum ends with its count of codes. */
typedef enum {
#define SGDN_SCORE(name, NAME, code) SGDN_CUDA_SCORE_##NAME = code,
#include "../core/strategies.def"
  SGDN_CUDA_SCORE_COUNT
} sgdn_cuda_score;
typedef enum {
#define SGDN_SELECTOR(name, NAME, code) SGDN_CUDA_SELECT_##NAME = code,
#include "../core/strategies.def"
  SGDN_CUDA_SELECT_COUNT
} sgdn_cuda_selector;
typedef enum {
#define SGDN_GRANULARITY(name, NAME, code) SGDN_CUDA_GRANULARITY_##NAME = code,
#include "../core/strategies.def"
  SGDN_CUDA_GRANULARITY_COUNT
} sgdn_cuda_granularity;
/* The families of sgdn_cuda_strategy_count() and sgdn_cuda_strategy_name(). Solvers have no field of their
 * own: solver_band < 0 is `exact`, a band >= 0 `block_adjacent`. */
typedef enum {
  SGDN_CUDA_SOLVERS = 0,
  SGDN_CUDA_SCORES = 1,
  SGDN_CUDA_SELECTORS = 2,
  SGDN_CUDA_GRANULARITIES = 3
} sgdn_cuda_strategy_family;

typedef struct {
  int64_t num_seqs;                              /* sequences packed in the batch (>= 1) */
  int64_t total_tokens;                          /* tokens of all sequences together */
  int32_t qk_heads, v_heads, key_dim, value_dim; /* H, HV (multiple of H), K, V (16..128, multiples of 16) */
  int32_t chunk;                                 /* C, 1..64 (default 64) */
  int32_t group;                                 /* G, output window in chunks (default 1) */
  int32_t solver_block;                          /* b, divides C (default 16) */
  int32_t solver_band;                           /* kept sub-diagonal blocks (default 1); < 0: exact */
  int32_t score;                                 /* sgdn_cuda_score */
  int32_t survival_skip_own_group;               /* 0 or 1 */
  int32_t selector;                              /* sgdn_cuda_selector */
  int32_t head_granularity;                      /* 0: pair (one decision per head group), 1: head */
  double rho;                                    /* (0, 1] */
  double tau;                                    /* threshold selector, >= 0 */
  uint64_t seed;                                 /* random selector */
  int64_t min_per_head;                          /* head_budget selector, >= 0 */
  float scale;                                   /* <= 0: 1 / sqrt(K) */
  int32_t input_dtype;                           /* sgdn_cuda_dtype of q, k, v, beta */
  int32_t output_dtype;                          /* sgdn_cuda_dtype of o */
  int32_t tensor_cores; /* 1 (default): bf16 tensor-core kernels where they apply (bf16 inputs, K = V = 128,
                           C = 64; error vs float64 ~3e-3); 0: fp32 arithmetic everywhere (ABI version 2) */
  double max_fraction;  /* head_budget: a unit keeps at most round(max_fraction N) events, in [rho, 1];
                           default 1 (no cap) (ABI version 3) */
} sgdn_cuda_config;

typedef struct {
  const void* q;
  const void* k;
  const void* v;
  const float* g;
  const void* beta;
  const int32_t* cu_seqlens;
  const float* initial_state;
  void* o;
  float* final_state;
  uint8_t* event_mask;
  float* event_score;
  int32_t* budget;
} sgdn_cuda_tensors;

/* Fills a config with the project's defaults (core/defaults.h, as the sgdn program): C = 64, G = 1, the
 * block_adjacent solver (block 16, band 1), the head_budget selector at rho 0.29 with the update_norm score,
 * pair granularity, seed 0; num_seqs 1, float32 inputs and outputs, tensor cores where they apply. The
 * sizes (tokens, heads, head dims) are left 0 for the caller. */
void sgdn_cuda_default_config(sgdn_cuda_config* config);
/* The number of strategies of a family (sgdn_cuda_strategy_family; 0 for an unknown one): their codes
 * are 0 .. count - 1. */
int32_t sgdn_cuda_strategy_count(int32_t family);
/* The name of strategy `code` of a family as the configuration spells it ("head_budget"); NULL for an
 * unknown family or code. The string is static. */
const char* sgdn_cuda_strategy_name(int32_t family, int32_t code);
/* Bytes of device workspace the forward call needs for this configuration. */
sgdn_cuda_status sgdn_cuda_workspace_size(const sgdn_cuda_config* config, size_t* bytes);
/* The prefill: outputs, final state, events. */
sgdn_cuda_status sgdn_cuda_forward(const sgdn_cuda_config* config, const sgdn_cuda_tensors* tensors,
                                   void* workspace, size_t workspace_bytes, sgdn_cuda_stream stream);
/* The message of the last failing call on this thread ("" after a success). */
const char* sgdn_cuda_last_error(void);
const char* sgdn_cuda_status_name(sgdn_cuda_status status);
int sgdn_cuda_abi_version(void);

#ifdef __cplusplus
}
#endif

#endif /* SGDN_CUDA_H */
