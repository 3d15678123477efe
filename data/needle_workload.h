// The `needle` workload (SPEC §9): RULER's needle-in-a-haystack tasks carried into the state space of GDN.
//
// Why the haystack is not simply `random`: with the delta rule, every write k v^T first erases what the
// state returns for k. A random unit key overlaps a stored key n by about 1/sqrt(K), so each write removes a
// fraction ~beta/K of the association n -> v_n, and after ~K/beta tokens (a few hundred) the needle is gone.
// Decay alone would do the same on short-memory heads. So recall needs heads built for it, as trained models
// have them. The design:
//
//   - Retrieval groups: a fraction of the q/k heads (`retrieval_fraction`, all r value heads of each such
//     group) are long-memory heads. Their log decay is tiny: g = -(retrieval_log_decay / T) * 2 sigmoid(x),
//     x ~ N(0, 1), so the total decay over the sequence is about e^-0.5 by default.
//   - Key space split: the first `needle_dims` = m coordinates of the key space form the needle subspace,
//     the other K - m the hay subspace. Haystack keys of retrieval groups are
//         k = sqrt(1 - eps^2) u_hay + eps u_needle     (u_* random unit vectors in each subspace)
//     with eps = `leakage`, so ordinary writes touch a needle direction n only through n^T k ~ eps/sqrt(m):
//     they erase a fraction ~beta eps^2 / m of it per token and add noise of relative size
//     ~eps sqrt(T beta^2 / m). With the defaults, dense exact GDN reads the needle back with cosine ~0.99
//     at T = 8192. Measured at the Qwen3.5 head shape, T = 4096 (answer cosine at depth 0 %): leakage 0.05
//     -> 0.76; 0.1 -> 0.28 (multivalue fails at depth 0); 0.2 -> lost for depths <= 25 %; 0.35 (about
//     isotropic keys, i.e. the plain `random` haystack) -> only the needle at depth 100 % survives. So
//     leakage is the difficulty knob; 0 would make dense recall exact.
//   - Needle keys are orthonormal vectors inside the needle subspace (a random orthonormal set per sequence
//     and q/k head), so needles never interfere with each other; at most m distinct keys.
//   - Needles are written with beta = 1, which makes the state return exactly v_n for n right after the
//     write, whatever was there before. Their values are entries of a codebook of candidate values (per
//     retrieval value head, N(0, 1) entries, rounded to float so that the stored codebook is exact).
//   - Queries are the last tokens of the sequence; in retrieval groups their q is the queried needle's key.
//     The answer is read from the outputs of all retrieval value heads, concatenated, and compared (cosine)
//     with every codebook entry, concatenated the same way.
//   - Everything else -- the other heads, and in retrieval heads the q of context tokens, v and beta -- is
//     the `random` haystack with the same seed (query tokens also write, with a hay key). Needle tokens
//     are ordinary haystack in non-retrieval heads.
//
// Variants (`task`), following RULER:
//   single      one needle, one query.
//   multikey    `needles` needles with distinct keys and values: the queried one at the depth, the
//               needles - 1 distractors at random context positions; one query.
//   multivalue  `needles` values under one key, written at the depth with beta = 1, 1/2, 1/3, ... so that the
//               state holds their mean; correct when the top-`needles` candidates are exactly those values.
//   multiquery  `needles` needles with distinct keys and values at the depth; the first `queries` of them are
//               queried, one query token each.
// The needles of one sequence that sit at the depth form a cluster with `needle_spacing` tokens between
// consecutive writes (one chunk by default, so each write is its own recurrent event). The cluster starts at
// round(depth / 100 * (T_ctx - 1 - span)), where T_ctx = T - queries and span = (writes - 1) * spacing:
// depth 0 puts the first write at token 0, depth 100 the last write just before the queries.
// Sequence b of the batch gets depth depths[b % len(depths)].
//
// Constructions: what real retrieval varies and a selector must not be tuned to. Each knob's default is the
// construction above, bit for bit.
//   positions       depths: the cluster starts at the depths above. random: at a uniformly random start in
//                   [0, T_ctx - 1 - span] per sequence (its own stream, so the rest of the batch is
//                   unchanged); the query's depth is then that start in percent.
//   key_overlap     omega in [0, 1]: each haystack key of a retrieval group becomes
//                       k = normalise(omega n_j + sqrt(1 - omega^2) k_hay)
//                   with n_j one of the sequence's needle keys, drawn per token, and k_hay the key above (the
//                   noise). 0 is the construction above (with leakage 0, haystack keys are orthogonal to
//                   every needle key); 1 makes every haystack key a needle key. A later write erases a
//                   fraction ~beta omega^2 / keys of the needle, so dense recall survives while omega^2 T
//                   beta / keys stays below ~1: omega ~ 0.02 at T = 4096.
//   strong_writes   f in [0, 1]: a fraction f of the tokens (drawn per token, the same for every value head)
//   are
//                   strong haystack writes with beta uniform in [0.9, 1) instead of sigmoid(1.5 n), so that
//                   the needles (beta = 1) are not the only strong writes. Needle writes keep their beta.
//   decay_spectrum  which value heads are long-memory (the retrieval decay above); the others take the
//                   `random` haystack's log-uniform decays (short to medium memory).
//                     mixed       the retrieval heads (the construction above);
//                     pair_mixed  inside each retrieval group, value heads 0, 2, 4, ... long and 1, 3, ...
//                     short,
//                                 so one decision per head pair covers both kinds (needs v_heads / qk_heads
//                                 >= 2);
//                     all_long    every value head;
//                     all_short   none: the needle must outlive the haystack's decays.
//   value_norm      codebook: needle values are the codebook entries. haystack: each needle write's value is
//                   the entry scaled by one factor over the retrieval heads so that the write's size
//                   sum_h beta ||v_h|| equals that of the haystack write it replaces (beta stays, so the
//                   state still holds a multiple of the entry and the cosine scoring is unchanged).
// Several needles in one chunk: multiquery (or multivalue) with needle_spacing < chunk size. Needles near the
// query: depths close to 100. The codebook size is `codebook`; key and value sizes and the GVA ratio are the
// shape keys.
//
// Parameters (config section [workload], besides the shape keys and `seed`; errors name the key):
//   task                 = single        single | multikey | multivalue | multiquery
//   depths               = 0 25 50 75 100
//                                        percent, each in [0, 100], space-separated (commas are for sweeps)
//   needles              = 0             0: the task's default (1 for single, else 4). single: 1;
//                                        multikey: >= 2 (the queried one and distractors);
//                                        multivalue: >= 2 values; multiquery: >= 1
//   queries              = 0             multiquery: 0 (all needles) or 1..needles; the others have 1
//   codebook             = 64            candidate values M, > needles
//   retrieval_fraction   = 0.25          fraction of q/k heads that are retrieval groups, in (0, 1];
//                                        at least one group; the groups are spread evenly over the heads
//   leakage              = 0.01          eps above, in [0, 1)
//   needle_dims          = 16            m, in [distinct keys, K - 1]
//   retrieval_log_decay  = 0.5           total -log decay of retrieval heads over the sequence, >= 0
//   needle_spacing       = 64            tokens between clustered needle writes, >= 1
//   positions            = depths        depths | random
//   key_overlap          = 0             omega above, in [0, 1]
//   strong_writes        = 0             f above, in [0, 1]
//   decay_spectrum       = mixed         mixed | pair_mixed | all_long | all_short
//   value_norm           = codebook      codebook | haystack
//   initial_state, initial_state_std     as for `random`
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/inputs.h"
#include "core/params.h"
#include "data/random_workload.h"

namespace sgdn {

enum class NeedleTask { single, multikey, multivalue, multiquery };
NeedleTask parse_needle_task(const std::string& text);
const char* needle_task_name(NeedleTask task);

enum class NeedlePositions { depths, random };
enum class DecaySpectrum { mixed, pair_mixed, all_long, all_short };
enum class NeedleValueNorm { codebook, haystack };

struct NeedleOptions {
  NeedleTask task = NeedleTask::single;
  std::vector<double> depths = {0, 25, 50, 75, 100};
  int64_t needles = 0;  // 0: the task's default (1 for single, else 4)
  int64_t queries = 0;  // 0: the task's default (needles for multiquery, else 1)
  int64_t codebook = 64;
  double retrieval_fraction = 0.25;
  double leakage = 0.01;
  int64_t needle_dims = 16;
  double retrieval_log_decay = 0.5;
  int64_t needle_spacing = 64;
  NeedlePositions positions = NeedlePositions::depths;
  double key_overlap = 0.0;
  double strong_writes = 0.0;
  DecaySpectrum decay_spectrum = DecaySpectrum::mixed;
  NeedleValueNorm value_norm = NeedleValueNorm::codebook;
  RandomWorkloadOptions haystack;

  static NeedleOptions from_params(const Params& params);
  static std::vector<ParamSpec> param_specs();  // includes the haystack's keys
  // The options with the task defaults filled in, checked against the shape; errors name the key.
  NeedleOptions resolved(const Shape& shape) const;
};

// What a needle batch asks and the right answers: everything needle_correct needs, as plain arrays.
// Q = queries over the whole batch, R = retrieval value heads, M = codebook entries, N = needle writes.
struct NeedleTruth {
  std::vector<int32_t> retrieval_heads;  // [R] the value heads whose outputs are read, ascending
  Tensor<float> codebook;                // [M, R, V] candidate values (entry i is one value per head)
  std::vector<int32_t> query_sequence;   // [Q] b
  std::vector<int32_t> query_token;      // [Q] t (one of the last tokens)
  std::vector<float> query_depth;        // [Q] the depth (percent) of the queried needle(s)
  Tensor<int32_t> answer;                // [Q, n] the correct codebook entries (n = 1, or the values of
                                         // multivalue); a query is right when its top-n set equals them
  std::vector<int32_t> needle_sequence;  // [N] b of every needle write
  std::vector<int32_t> needle_token;     // [N] its token
  std::vector<int32_t> needle_value;     // [N] its codebook entry
  std::vector<int32_t> needle_query;     // [N] the query that reads it, or -1 for a distractor

  int64_t num_queries() const { return int64_t(query_token.size()); }

  // The arrays by name, for /workloads/<wid>/needle/<name>; from_tensors reads them back (sgdn::Error
  // naming a missing or inconsistent array).
  struct Arrays {
    std::map<std::string, Tensor<int32_t>> ints;
    std::map<std::string, Tensor<float>> floats;
  };
  Arrays to_tensors() const;
  static NeedleTruth from_tensors(const Arrays& arrays);
};

struct NeedleWorkload {
  Inputs<double> inputs;
  std::map<std::string, std::string> attributes;  // generator = needle, seed, every resolved option
  NeedleTruth truth;
};

NeedleWorkload needle_workload(const Shape& shape, uint64_t seed, const NeedleOptions& options = {});

// Per query: the cosine of the read-out (retrieval heads of o[b, t], concatenated) with each right answer's
// codebook entry, and the best cosine among the wrong entries. correct = 1 when the right answers are the
// top-n (all of them beat every wrong entry). o is [B, T, HV, V], row-major, as the engine returns it.
struct NeedleScore {
  int32_t correct = 0;
  double answer_cosine = 0;      // the smallest cosine among the right answers
  double best_wrong_cosine = 0;  // the largest cosine among the other entries
};
std::vector<NeedleScore> needle_scores(const NeedleTruth& truth, const double* o, const Shape& shape);
std::vector<NeedleScore> needle_scores(const NeedleTruth& truth, const float* o, const Shape& shape);
std::vector<int32_t> needle_correct(const NeedleTruth& truth, const double* o, const Shape& shape);
std::vector<int32_t> needle_correct(const NeedleTruth& truth, const float* o, const Shape& shape);
// The query rows of o (flat tokens b T + t, in query order) and the same scores from those rows alone, o_rows
// being [n, HV, V] (n = queries): what a backend downloads when the needle metrics are all it is asked for.
std::vector<int64_t> needle_query_tokens(const NeedleTruth& truth, const Shape& shape);
std::vector<NeedleScore> needle_scores_on_query_rows(const NeedleTruth& truth, const float* o_rows,
                                                     const Shape& shape);

// Fraction correct per depth (ascending) and overall.
struct NeedleAccuracy {
  std::vector<double> depths;
  std::vector<double> accuracy;
  std::vector<int64_t> queries;
  double overall = 0;
};
NeedleAccuracy needle_accuracy(const NeedleTruth& truth, const std::vector<int32_t>& correct);

}  // namespace sgdn
