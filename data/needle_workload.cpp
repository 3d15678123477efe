#include "data/needle_workload.h"

#include <algorithm>
#include <set>
#include <sstream>

#include "core/error.h"
#include "data/rng.h"

namespace sgdn {

namespace {

constexpr int64_t kDefaultMultiNeedles = 4;  // RULER's default number of keys / values / queries

const std::vector<std::string>& task_names() {
  static const std::vector<std::string> names = {"single", "multikey", "multivalue", "multiquery"};
  return names;
}
// The names of the construction choices, in the order of their enums.
const std::vector<std::string> kPositionNames = {"depths", "random"};
const std::vector<std::string> kDecaySpectrumNames = {"mixed", "pair_mixed", "all_long", "all_short"};
const std::vector<std::string> kValueNormNames = {"codebook", "haystack"};

// Strong haystack writes: beta uniform in [kStrongBetaMin, 1).
constexpr double kStrongBetaMin = 0.9;

template <class Choice>
Choice parse_choice(const Params& p, const std::string& key, const std::vector<std::string>& names) {
  const std::string text = p.get_string(key, names.front());
  for (size_t i = 0; i < names.size(); ++i)
    if (text == names[i]) return Choice(i);
  fail(p.qualified(key), " = '", text, "' is not allowed (allowed: ", join(names, ", "), ")");
}

// Writes at the depth (the cluster): the other needles of multikey are distractors at random positions.
int64_t cluster_writes(const NeedleOptions& o) {
  return (o.task == NeedleTask::single || o.task == NeedleTask::multikey) ? 1 : o.needles;
}

// Distinct needle keys per sequence and q/k head: multivalue puts all its values under one key.
int64_t distinct_keys(const NeedleOptions& o) {
  return o.task == NeedleTask::multivalue ? 1 : o.needles;
}

// `count` orthonormal vectors inside the first m coordinates of a K-vector (the needle subspace), by
// Gram–Schmidt on Gaussian vectors; the second pass of re-orthogonalisation makes them orthonormal to
// rounding even when two draws happen to be close.
std::vector<std::vector<double>> orthonormal_needle_keys(rng::Stream& stream, int64_t count, int64_t m,
                                                         int64_t K) {
  std::vector<std::vector<double>> keys;
  while (int64_t(keys.size()) < count) {
    std::vector<double> x(size_t(K), 0.0);
    for (int64_t i = 0; i < m; ++i) x[size_t(i)] = stream.normal();
    for (int pass = 0; pass < 2; ++pass) {
      for (const auto& e : keys) {
        double dot = 0;
        for (int64_t i = 0; i < m; ++i) dot += e[size_t(i)] * x[size_t(i)];
        for (int64_t i = 0; i < m; ++i) x[size_t(i)] -= dot * e[size_t(i)];
      }
    }
    double norm2 = 0;
    for (int64_t i = 0; i < m; ++i) norm2 += x[size_t(i)] * x[size_t(i)];
    if (norm2 < 1e-6) continue;  // (almost) dependent on the previous keys: draw again
    const double inv = 1.0 / std::sqrt(norm2);
    for (int64_t i = 0; i < m; ++i) x[size_t(i)] *= inv;
    keys.push_back(std::move(x));
  }
  return keys;
}

template <class Scalar>
double euclidean_norm(const Scalar* x, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += double(x[i]) * double(x[i]);
  return std::sqrt(s);
}

// One needle write of one sequence.
struct NeedleWrite {
  int64_t token = 0;
  int64_t key = 0;    // index into the sequence's needle keys
  int64_t value = 0;  // codebook entry
  double beta = 1.0;
  int64_t query = -1;  // local query index, or -1
};

std::vector<double> parse_depths(const std::string& what, const std::string& text) {
  std::istringstream in(text);
  std::vector<double> depths;
  std::string item;
  while (in >> item) depths.push_back(parse_double(what, item));
  return depths;
}

std::string depths_text(const std::vector<double>& depths) {
  std::string out;
  for (size_t i = 0; i < depths.size(); ++i) out += (i ? " " : "") + attribute_number(depths[i]);
  return out;
}

template <class OutScalar>
std::vector<NeedleScore> score_queries(const NeedleTruth& truth, const OutScalar* o, const Shape& shape) {
  const int64_t R = int64_t(truth.retrieval_heads.size());
  const int64_t V = shape.value_dim, HV = shape.v_heads, T = shape.tokens;
  require(truth.codebook.dims().size() == 3 && truth.codebook.dim(1) == R && truth.codebook.dim(2) == V,
          "needle truth: codebook has shape ", dims_str(truth.codebook.dims()), " but [M, ", R, ", ", V,
          "] is needed for ", R, " retrieval heads and value_dim ", V);
  const int64_t M = truth.codebook.dim(0);
  for (int32_t h : truth.retrieval_heads)
    require(h >= 0 && h < HV, "needle truth: retrieval head ", h, " is outside the ", HV, " value heads");
  const int64_t n_answers = truth.answer.dims().size() == 2 ? truth.answer.dim(1) : 0;
  const int64_t Q = truth.num_queries();
  require(truth.answer.dims().size() == 2 && truth.answer.dim(0) == Q && n_answers >= 1 && n_answers < M,
          "needle truth: answer has shape ", dims_str(truth.answer.dims()), " but [", Q,
          ", n] with 1 <= n < ", M, " is needed");

  std::vector<double> entry_norm(size_t(M), 0.0);
  for (int64_t c = 0; c < M; ++c) {
    for (int64_t i = 0; i < R * V; ++i) {
      const double x = truth.codebook[c * R * V + i];
      entry_norm[size_t(c)] += x * x;
    }
    entry_norm[size_t(c)] = std::sqrt(entry_norm[size_t(c)]);
  }

  std::vector<NeedleScore> scores(static_cast<size_t>(Q));
  std::vector<double> readout(static_cast<size_t>(R * V)), cosine(static_cast<size_t>(M));
  for (int64_t q = 0; q < Q; ++q) {
    const int64_t b = truth.query_sequence[size_t(q)], t = truth.query_token[size_t(q)];
    require(b >= 0 && b < shape.batch && t >= 0 && t < T, "needle truth: query ", q, " reads sequence ", b,
            ", token ", t, ", outside the batch shape ", shape.str());
    double readout_norm = 0;
    for (int64_t j = 0; j < R; ++j) {
      const OutScalar* row = o + ((b * T + t) * HV + truth.retrieval_heads[size_t(j)]) * V;
      for (int64_t i = 0; i < V; ++i) {
        readout[size_t(j * V + i)] = double(row[i]);
        readout_norm += double(row[i]) * double(row[i]);
      }
    }
    readout_norm = std::sqrt(readout_norm);
    for (int64_t c = 0; c < M; ++c) {
      double dot = 0;
      for (int64_t i = 0; i < R * V; ++i) dot += readout[size_t(i)] * double(truth.codebook[c * R * V + i]);
      const double denominator = readout_norm * entry_norm[size_t(c)];
      cosine[size_t(c)] = denominator > 0 ? dot / denominator : 0.0;  // a zero read-out answers nothing
    }
    std::vector<bool> is_answer(size_t(M), false);
    for (int64_t a = 0; a < n_answers; ++a) {
      const int32_t c = truth.answer[q * n_answers + a];
      require(c >= 0 && c < M, "needle truth: answer ", c, " of query ", q,
              " is not a codebook entry (M = ", M, ")");
      is_answer[size_t(c)] = true;
    }
    double answer_min = 2, wrong_max = -2;
    for (int64_t c = 0; c < M; ++c) {
      if (is_answer[size_t(c)])
        answer_min = std::min(answer_min, cosine[size_t(c)]);
      else
        wrong_max = std::max(wrong_max, cosine[size_t(c)]);
    }
    // Strict: ties (a zero read-out) count as wrong.
    scores[size_t(q)] = {answer_min > wrong_max ? 1 : 0, answer_min, wrong_max};
  }
  return scores;
}

template <class OutScalar>
std::vector<int32_t> correct_of(const NeedleTruth& truth, const OutScalar* o, const Shape& shape) {
  std::vector<int32_t> correct;
  for (const NeedleScore& s : score_queries(truth, o, shape)) correct.push_back(s.correct);
  return correct;
}

Tensor<int32_t> vector_tensor(const std::vector<int32_t>& xs) {
  Tensor<int32_t> t({int64_t(xs.size())});
  std::copy(xs.begin(), xs.end(), t.data());
  return t;
}

}  // namespace

NeedleTask parse_needle_task(const std::string& text) {
  const auto& names = task_names();
  for (size_t i = 0; i < names.size(); ++i)
    if (text == names[i]) return NeedleTask(i);
  fail("workload.task = '", text, "' is not a needle task (allowed: ", join(names, ", "), ")");
}

const char* needle_task_name(NeedleTask task) {
  return task_names().at(size_t(task)).c_str();
}

NeedleOptions NeedleOptions::from_params(const Params& p) {
  NeedleOptions o;
  o.task = parse_needle_task(p.get_string("task", needle_task_name(o.task)));
  if (p.has("depths")) o.depths = parse_depths(p.qualified("depths"), p.get_string("depths", ""));
  // 0 (the default) means the task's default, so a resolved config can always spell these keys out.
  o.needles = p.get_int_at_least("needles", o.needles, 0);
  o.queries = p.get_int_at_least("queries", o.queries, 0);
  o.codebook = p.get_int_at_least("codebook", o.codebook, 2);
  o.retrieval_fraction = p.get_double_in("retrieval_fraction", o.retrieval_fraction, 0.0, 1.0, true);
  o.leakage = p.get_double("leakage", o.leakage);
  o.needle_dims = p.get_int_at_least("needle_dims", o.needle_dims, 1);
  o.retrieval_log_decay = p.get_double("retrieval_log_decay", o.retrieval_log_decay);
  o.needle_spacing = p.get_int_at_least("needle_spacing", o.needle_spacing, 1);
  o.positions = parse_choice<NeedlePositions>(p, "positions", kPositionNames);
  o.key_overlap = p.get_double("key_overlap", o.key_overlap);
  o.strong_writes = p.get_double("strong_writes", o.strong_writes);
  o.decay_spectrum = parse_choice<DecaySpectrum>(p, "decay_spectrum", kDecaySpectrumNames);
  o.value_norm = parse_choice<NeedleValueNorm>(p, "value_norm", kValueNormNames);
  o.haystack = RandomWorkloadOptions::from_params(p);
  return o;
}

std::vector<ParamSpec> NeedleOptions::param_specs() {
  std::vector<ParamSpec> specs = {
      {"task", "single", "needle task: single | multikey | multivalue | multiquery"},
      {"depths", "0 25 50 75 100",
       "needle depths in percent, space-separated; sequence b gets depths[b % n]"},
      {"needles", "0",
       "needles per sequence (0: 1 for single, else 4); multikey counts the queried one and its distractors, "
       "multivalue the values"},
      {"queries", "0", "multiquery: how many of the needles are queried (0: all); the other tasks have 1"},
      {"codebook", "64", "candidate values the answer is chosen from (> needles)"},
      {"retrieval_fraction", "0.25", "fraction of q/k heads that are long-memory retrieval groups, (0, 1]"},
      {"leakage", "0.01", "norm of a haystack key's part in the needle subspace (retrieval groups), [0, 1)"},
      {"needle_dims", "16", "dimensions of the needle subspace of the key space, [keys, K - 1]"},
      {"retrieval_log_decay", "0.5", "total -log decay of retrieval heads over the sequence, >= 0"},
      {"needle_spacing", "64", "tokens between the needle writes clustered at the depth, >= 1"},
      {"positions", "depths", "where the needles go: depths (the depths key) | random (uniform, by seed)"},
      {"key_overlap", "0",
       "share of a needle key in each haystack key of a retrieval group, [0, 1]: 0 disjoint, 1 equal"},
      {"strong_writes", "0", "fraction of haystack tokens written with beta in [0.9, 1), [0, 1]"},
      {"decay_spectrum", "mixed",
       "long-memory value heads: mixed (the retrieval heads) | pair_mixed (every other head of a retrieval "
       "group) | all_long | all_short"},
      {"value_norm", "codebook",
       "needle values: codebook entries | haystack (scaled to the size of the haystack write they replace)"}};
  for (ParamSpec& s : RandomWorkloadOptions::param_specs()) specs.push_back(std::move(s));
  return specs;
}

NeedleOptions NeedleOptions::resolved(const Shape& shape) const {
  shape.validate();
  NeedleOptions o = *this;
  o.haystack.validate();
  const bool multi = o.task != NeedleTask::single;
  if (o.needles == 0) o.needles = multi ? kDefaultMultiNeedles : 1;
  if (o.queries == 0) o.queries = o.task == NeedleTask::multiquery ? o.needles : 1;
  const char* task_name = needle_task_name(o.task);
  switch (o.task) {
    case NeedleTask::single:
      require(o.needles == 1, "workload.needles = ", o.needles, " but task single has exactly 1 needle");
      break;
    case NeedleTask::multikey:
    case NeedleTask::multivalue:
      require(o.needles >= 2, "workload.needles = ", o.needles, " but task ", task_name, " needs >= 2");
      break;
    case NeedleTask::multiquery:
      require(o.needles >= 1, "workload.needles = ", o.needles, " must be >= 1");
      break;
  }
  if (o.task == NeedleTask::multiquery) {
    require(o.queries >= 1 && o.queries <= o.needles, "workload.queries = ", o.queries,
            " is outside [1, needles = ", o.needles, "]");
  } else {
    require(o.queries == 1, "workload.queries = ", o.queries, " but task ", task_name,
            " has one query (only multiquery takes more)");
  }
  require(!o.depths.empty(), "workload.depths is empty; give depths in percent, space-separated");
  for (double d : o.depths)
    require(d >= 0 && d <= 100 && std::isfinite(d), "workload.depths holds ", d,
            ", outside [0, 100] (percent)");
  require(o.codebook > o.needles, "workload.codebook = ", o.codebook,
          " must exceed workload.needles = ", o.needles,
          " (distinct values per sequence, and at least one wrong candidate)");
  require(o.codebook <= (int64_t(1) << 30), "workload.codebook = ", o.codebook, " is too large");
  require(o.retrieval_fraction > 0 && o.retrieval_fraction <= 1,
          "workload.retrieval_fraction = ", o.retrieval_fraction, " is outside (0, 1]");
  require(o.leakage >= 0 && o.leakage < 1, "workload.leakage = ", o.leakage, " is outside [0, 1)");
  require(shape.key_dim >= 2, "workload.key_dim = ", shape.key_dim,
          " leaves no room for a needle subspace and a hay subspace (needs >= 2)");
  require(o.needle_dims >= distinct_keys(o) && o.needle_dims <= shape.key_dim - 1,
          "workload.needle_dims = ", o.needle_dims, " is outside [", distinct_keys(o),
          ", key_dim - 1 = ", shape.key_dim - 1,
          "] (it must hold the orthonormal needle keys and leave a hay subspace)");
  require(o.key_overlap >= 0 && o.key_overlap <= 1, "workload.key_overlap = ", o.key_overlap,
          " is outside [0, 1]");
  require(o.strong_writes >= 0 && o.strong_writes <= 1, "workload.strong_writes = ", o.strong_writes,
          " is outside [0, 1]");
  require(o.decay_spectrum != DecaySpectrum::pair_mixed || shape.group_ratio() >= 2,
          "workload.decay_spectrum = pair_mixed needs two value heads per q/k head to mix, but v_heads / "
          "qk_heads = ",
          shape.group_ratio());
  require(o.retrieval_log_decay >= 0 && std::isfinite(o.retrieval_log_decay),
          "workload.retrieval_log_decay = ", o.retrieval_log_decay, " must be a finite number >= 0");
  require(o.needle_spacing >= 1, "workload.needle_spacing = ", o.needle_spacing, " must be >= 1");
  const int64_t context = shape.tokens - o.queries;
  require(context >= 1, "workload.tokens = ", shape.tokens, " leaves no context before the ", o.queries,
          " query token(s)");
  const int64_t span = (cluster_writes(o) - 1) * o.needle_spacing;
  require(span <= context - 1, "workload.needle_spacing = ", o.needle_spacing, ": ", cluster_writes(o),
          " needle writes that far apart need ", span + 1,
          " context tokens, but workload.tokens = ", shape.tokens, " leaves ", context);
  require(context >= o.needles, "workload.tokens = ", shape.tokens, " is too short for ", o.needles,
          " needles");
  return o;
}

NeedleWorkload needle_workload(const Shape& shape, uint64_t seed, const NeedleOptions& options) {
  const NeedleOptions o = options.resolved(shape);
  const int64_t B = shape.batch, T = shape.tokens, H = shape.qk_heads, HV = shape.v_heads;
  const int64_t K = shape.key_dim, V = shape.value_dim, r = shape.group_ratio(), m = o.needle_dims;
  const int64_t M = o.codebook, Q = o.queries, context = T - Q;

  // Retrieval groups, spread evenly over the q/k heads.
  const int64_t groups = std::max<int64_t>(1, std::min<int64_t>(H, std::llround(o.retrieval_fraction * H)));
  std::vector<bool> retrieval_qk(size_t(H), false), retrieval_v(size_t(HV), false);
  std::vector<int32_t> retrieval_qk_heads, retrieval_heads;
  for (int64_t j = 0; j < groups; ++j) {
    const int64_t hq = j * H / groups;
    retrieval_qk[size_t(hq)] = true;
    retrieval_qk_heads.push_back(int32_t(hq));
    for (int64_t i = 0; i < r; ++i) {
      retrieval_v[size_t(hq * r + i)] = true;
      retrieval_heads.push_back(int32_t(hq * r + i));
    }
  }
  const int64_t R = int64_t(retrieval_heads.size());

  // The value heads that get the long retrieval memory (decay_spectrum).
  std::vector<bool> long_memory(size_t(HV), false);
  for (int64_t h = 0; h < HV; ++h) {
    switch (o.decay_spectrum) {
      case DecaySpectrum::mixed:
        long_memory[size_t(h)] = retrieval_v[size_t(h)];
        break;
      case DecaySpectrum::pair_mixed:
        long_memory[size_t(h)] = retrieval_v[size_t(h)] && (h % r) % 2 == 0;
        break;
      case DecaySpectrum::all_long:
        long_memory[size_t(h)] = true;
        break;
      case DecaySpectrum::all_short:
        break;
    }
  }

  // Needle keys per sequence and retrieval q/k head: needle writes, query reads and overlapping haystack
  // keys use them.
  const int64_t keys_per_sequence = distinct_keys(o);
  std::vector<std::vector<std::vector<std::vector<double>>>> needle_keys(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) {
    needle_keys[size_t(b)].resize(size_t(H));
    for (int32_t hq : retrieval_qk_heads) {
      rng::Stream stream(seed, rng::Tag::needle_keys, {uint64_t(b), uint64_t(hq)});
      needle_keys[size_t(b)][size_t(hq)] = orthonormal_needle_keys(stream, keys_per_sequence, m, K);
    }
  }

  NeedleWorkload out;
  Inputs<double>& in = out.inputs;
  in = make_inputs<double>(shape, false);
  const std::vector<HeadDecay> decays = random_head_decays(seed, HV);

  // The haystack: `random` everywhere, then the retrieval heads' keys and decays replaced (SPEC-level
  // design in the header). Every token has its own streams, so the loop runs in parallel.
  const double leak = o.leakage, hay_weight = std::sqrt(1.0 - o.leakage * o.leakage);
  const double overlap = o.key_overlap, overlap_rest = std::sqrt(1.0 - o.key_overlap * o.key_overlap);
  const double decay_per_token = o.retrieval_log_decay / double(T);
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      fill_random_token(in, seed, b, t, decays);
      const uint64_t ub = uint64_t(b), ut = uint64_t(t);
      for (int64_t hq = 0; hq < H; ++hq) {
        if (!retrieval_qk[size_t(hq)]) continue;
        // Hay part from the first K - m numbers of the key stream, needle part from the next m.
        rng::Stream key_stream(seed, rng::Tag::key, {ub, ut, uint64_t(hq)});
        double* k = in.k.data() + ((b * T + t) * H + hq) * K;
        random_unit_vector(key_stream, k + m, K - m);
        random_unit_vector(key_stream, k, m);
        for (int64_t i = 0; i < m; ++i) k[i] *= leak;
        for (int64_t i = m; i < K; ++i) k[i] *= hay_weight;
        if (overlap > 0) {
          rng::Stream overlap_stream(seed, rng::Tag::key_overlap, {ub, ut, uint64_t(hq)});
          const std::vector<double>& n =
              needle_keys[size_t(b)][size_t(hq)][overlap_stream.below(uint64_t(keys_per_sequence))];
          for (int64_t i = 0; i < K; ++i) k[i] = overlap * n[size_t(i)] + overlap_rest * k[i];
          const double inv = 1.0 / euclidean_norm(k, K);
          for (int64_t i = 0; i < K; ++i) k[i] *= inv;
        }
      }
      if (o.strong_writes > 0) {
        rng::Stream strong_stream(seed, rng::Tag::strong_write, {ub, ut});
        if (strong_stream.uniform() < o.strong_writes)
          for (int64_t h = 0; h < HV; ++h)
            in.beta[(b * T + t) * HV + h] = strong_stream.uniform(kStrongBetaMin, 1.0);
      }
      for (int64_t h = 0; h < HV; ++h) {
        if (!long_memory[size_t(h)]) continue;
        // g = -(lambda / T) * 2 sigmoid(x): mean total decay lambda over the sequence, with per-token jitter.
        rng::Stream x_stream(seed, rng::Tag::decay_noise, {ub, ut, uint64_t(h)});
        in.g[(b * T + t) * HV + h] = -decay_per_token * 2.0 * sigmoid(x_stream.normal());
      }
    }
  }
  if (o.haystack.initial_state) fill_random_initial_state(in, seed, o.haystack.initial_state_std);

  // The codebook, rounded to float so that the stored truth holds exactly the values that were written.
  NeedleTruth& truth = out.truth;
  truth.retrieval_heads = retrieval_heads;
  truth.codebook = Tensor<float>({M, R, V});
  for (int64_t c = 0; c < M; ++c) {
    for (int64_t j = 0; j < R; ++j) {
      rng::Stream stream(seed, rng::Tag::codebook, {uint64_t(c), uint64_t(retrieval_heads[size_t(j)])});
      float* entry = truth.codebook.data() + (c * R + j) * V;
      for (int64_t i = 0; i < V; ++i) entry[i] = float(stream.normal());
    }
  }
  const int64_t n_answers = o.task == NeedleTask::multivalue ? o.needles : 1;
  truth.answer = Tensor<int32_t>({B * Q, n_answers});

  const int64_t span = (cluster_writes(o) - 1) * o.needle_spacing;
  for (int64_t b = 0; b < B; ++b) {
    // The cluster's first write: at the depth, or uniformly random in [0, context - 1 - span].
    double depth = 0;
    int64_t start = 0;
    if (o.positions == NeedlePositions::depths) {
      depth = o.depths[size_t(b) % o.depths.size()];
      start = std::llround(depth / 100.0 * double(context - 1 - span));
    } else {
      rng::Stream position(seed, rng::Tag::needle_position, {uint64_t(b)});
      start = int64_t(position.below(uint64_t(context - span)));
      depth = context - 1 - span > 0 ? 100.0 * double(start) / double(context - 1 - span) : 0.0;
    }
    rng::Stream layout(seed, rng::Tag::needle_layout, {uint64_t(b)});

    // Distinct codebook entries for the needles of this sequence (a partial Fisher–Yates shuffle).
    std::vector<int64_t> entries(static_cast<size_t>(M));
    for (int64_t c = 0; c < M; ++c) entries[size_t(c)] = c;
    for (int64_t i = 0; i < o.needles; ++i)
      std::swap(entries[size_t(i)], entries[size_t(i + int64_t(layout.below(uint64_t(M - i))))]);

    std::vector<NeedleWrite> writes;
    switch (o.task) {
      case NeedleTask::single:
        writes.push_back({start, 0, entries[0], 1.0, 0});
        break;
      case NeedleTask::multikey: {
        writes.push_back({start, 0, entries[0], 1.0, 0});
        std::set<int64_t> taken = {start};
        for (int64_t j = 1; j < o.needles; ++j) {
          int64_t token;
          do token = int64_t(layout.below(uint64_t(context)));
          while (taken.count(token));
          taken.insert(token);
          writes.push_back({token, j, entries[size_t(j)], 1.0, -1});
        }
        break;
      }
      case NeedleTask::multivalue:
        // beta = 1/(j+1) for the (j+1)-th value: S^T n becomes the running mean of the values.
        for (int64_t j = 0; j < o.needles; ++j)
          writes.push_back({start + j * o.needle_spacing, 0, entries[size_t(j)], 1.0 / double(j + 1), 0});
        break;
      case NeedleTask::multiquery:
        for (int64_t j = 0; j < o.needles; ++j)
          writes.push_back({start + j * o.needle_spacing, j, entries[size_t(j)], 1.0, j < Q ? j : -1});
        break;
    }

    const std::vector<std::vector<std::vector<double>>>& keys = needle_keys[size_t(b)];
    for (const NeedleWrite& w : writes) {
      for (int32_t hq : retrieval_qk_heads) {
        const std::vector<double>& key = keys[size_t(hq)][size_t(w.key)];
        std::copy(key.begin(), key.end(), in.k.data() + ((b * T + w.token) * H + hq) * K);
      }
      // value_norm = haystack: one factor for all retrieval heads, so the read-out stays a multiple of the
      // entry; it makes sum_h beta ||v_h|| that of the haystack write at this token.
      double value_scale = 1.0;
      if (o.value_norm == NeedleValueNorm::haystack) {
        double haystack_write = 0, entry_write = 0;
        for (int64_t j = 0; j < R; ++j) {
          const int64_t h = retrieval_heads[size_t(j)];
          const int64_t row = (b * T + w.token) * HV + h;
          haystack_write += in.beta[row] * euclidean_norm(in.v.data() + row * V, V);
          entry_write += w.beta * euclidean_norm(truth.codebook.data() + (w.value * R + j) * V, V);
        }
        value_scale = haystack_write / entry_write;
      }
      for (int64_t j = 0; j < R; ++j) {
        const int64_t h = retrieval_heads[size_t(j)];
        const float* entry = truth.codebook.data() + (w.value * R + j) * V;
        double* v = in.v.data() + ((b * T + w.token) * HV + h) * V;
        if (o.value_norm == NeedleValueNorm::codebook)
          std::copy(entry, entry + V, v);
        else
          for (int64_t i = 0; i < V; ++i) v[i] = value_scale * double(entry[i]);
        in.beta[(b * T + w.token) * HV + h] = w.beta;
      }
      truth.needle_sequence.push_back(int32_t(b));
      truth.needle_token.push_back(int32_t(w.token));
      truth.needle_value.push_back(int32_t(w.value));
      truth.needle_query.push_back(w.query < 0 ? -1 : int32_t(b * Q + w.query));
    }

    // Queries: the last Q tokens; query i asks for needle i's key (multiquery) or the single key.
    for (int64_t i = 0; i < Q; ++i) {
      const int64_t t = context + i;
      const int64_t key_index = o.task == NeedleTask::multiquery ? i : 0;
      for (int32_t hq : retrieval_qk_heads) {
        const std::vector<double>& key = keys[size_t(hq)][size_t(key_index)];
        std::copy(key.begin(), key.end(), in.q.data() + ((b * T + t) * H + hq) * K);
      }
      const int64_t query = b * Q + i;
      truth.query_sequence.push_back(int32_t(b));
      truth.query_token.push_back(int32_t(t));
      truth.query_depth.push_back(float(depth));
      int64_t a = 0;
      for (const NeedleWrite& w : writes)
        if (w.query == i) truth.answer[query * n_answers + a++] = int32_t(w.value);
    }
  }
  validate(in);

  std::vector<double> a, softplus_b;
  for (int64_t h = 0; h < HV; ++h) {
    a.push_back(long_memory[size_t(h)] ? 0.0 : decays[size_t(h)].a);
    softplus_b.push_back(decays[size_t(h)].softplus_b);
  }
  std::vector<double> qk_list(retrieval_qk_heads.begin(), retrieval_qk_heads.end());
  std::vector<double> v_list(retrieval_heads.begin(), retrieval_heads.end());
  out.attributes = {{"generator", "needle"},
                    {"seed", std::to_string(seed)},
                    {"rng", "splitmix64 streams keyed by (seed, tensor, b, t, head); Box-Muller normals"},
                    {"task", needle_task_name(o.task)},
                    {"depths", depths_text(o.depths)},
                    {"needles", std::to_string(o.needles)},
                    {"queries", std::to_string(o.queries)},
                    {"codebook", std::to_string(o.codebook)},
                    {"retrieval_fraction", attribute_number(o.retrieval_fraction)},
                    {"leakage", attribute_number(o.leakage)},
                    {"needle_dims", std::to_string(o.needle_dims)},
                    {"retrieval_log_decay", attribute_number(o.retrieval_log_decay)},
                    {"needle_spacing", std::to_string(o.needle_spacing)},
                    {"positions", kPositionNames[size_t(o.positions)]},
                    {"key_overlap", attribute_number(o.key_overlap)},
                    {"strong_writes", attribute_number(o.strong_writes)},
                    {"decay_spectrum", kDecaySpectrumNames[size_t(o.decay_spectrum)]},
                    {"value_norm", kValueNormNames[size_t(o.value_norm)]},
                    {"initial_state", o.haystack.initial_state ? "true" : "false"},
                    {"initial_state_std", attribute_number(o.haystack.initial_state_std)},
                    {"retrieval_qk_heads", attribute_list(qk_list)},
                    {"retrieval_v_heads", attribute_list(v_list)},
                    // Short-memory heads only; long-memory heads use retrieval_log_decay (A listed as 0).
                    {"decay_scale_A", attribute_list(a)},
                    {"decay_softplus_b", attribute_list(softplus_b)}};
  return out;
}

NeedleTruth::Arrays NeedleTruth::to_tensors() const {
  Arrays arrays;
  arrays.ints["retrieval_heads"] = vector_tensor(retrieval_heads);
  arrays.ints["query_sequence"] = vector_tensor(query_sequence);
  arrays.ints["query_token"] = vector_tensor(query_token);
  arrays.ints["answer"] = answer;
  arrays.ints["needle_sequence"] = vector_tensor(needle_sequence);
  arrays.ints["needle_token"] = vector_tensor(needle_token);
  arrays.ints["needle_value"] = vector_tensor(needle_value);
  arrays.ints["needle_query"] = vector_tensor(needle_query);
  arrays.floats["codebook"] = codebook;
  Tensor<float> depth({int64_t(query_depth.size())});
  std::copy(query_depth.begin(), query_depth.end(), depth.data());
  arrays.floats["query_depth"] = depth;
  return arrays;
}

NeedleTruth NeedleTruth::from_tensors(const Arrays& arrays) {
  auto int_array = [&](const std::string& name) -> const Tensor<int32_t>& {
    auto it = arrays.ints.find(name);
    require(it != arrays.ints.end(), "needle truth: the int32 array '", name, "' is missing");
    return it->second;
  };
  auto float_array = [&](const std::string& name) -> const Tensor<float>& {
    auto it = arrays.floats.find(name);
    require(it != arrays.floats.end(), "needle truth: the float array '", name, "' is missing");
    return it->second;
  };
  auto vector_of = [&](const std::string& name, int64_t length) {
    const Tensor<int32_t>& t = int_array(name);
    require(t.dims().size() == 1 && (length < 0 || t.dim(0) == length), "needle truth: '", name,
            "' has shape ", dims_str(t.dims()),
            length < 0 ? std::string(", not 1-D") : concat(", not [", length, "]"));
    return t.values();
  };
  NeedleTruth truth;
  truth.retrieval_heads = vector_of("retrieval_heads", -1);
  truth.codebook = float_array("codebook");
  require(truth.codebook.dims().size() == 3 && truth.codebook.dim(1) == int64_t(truth.retrieval_heads.size()),
          "needle truth: 'codebook' has shape ", dims_str(truth.codebook.dims()), ", not [M, ",
          truth.retrieval_heads.size(), ", V]");
  truth.query_sequence = vector_of("query_sequence", -1);
  const int64_t Q = int64_t(truth.query_sequence.size());
  truth.query_token = vector_of("query_token", Q);
  const Tensor<float>& depth = float_array("query_depth");
  require(depth.dims() == std::vector<int64_t>{Q}, "needle truth: 'query_depth' has shape ",
          dims_str(depth.dims()), ", not [", Q, "]");
  truth.query_depth = depth.values();
  truth.answer = int_array("answer");
  require(truth.answer.dims().size() == 2 && truth.answer.dim(0) == Q, "needle truth: 'answer' has shape ",
          dims_str(truth.answer.dims()), ", not [", Q, ", n]");
  truth.needle_sequence = vector_of("needle_sequence", -1);
  const int64_t N = int64_t(truth.needle_sequence.size());
  truth.needle_token = vector_of("needle_token", N);
  truth.needle_value = vector_of("needle_value", N);
  truth.needle_query = vector_of("needle_query", N);
  return truth;
}

std::vector<NeedleScore> needle_scores(const NeedleTruth& truth, const double* o, const Shape& shape) {
  return score_queries(truth, o, shape);
}
std::vector<NeedleScore> needle_scores(const NeedleTruth& truth, const float* o, const Shape& shape) {
  return score_queries(truth, o, shape);
}
std::vector<int64_t> needle_query_tokens(const NeedleTruth& truth, const Shape& shape) {
  std::vector<int64_t> tokens;
  for (int64_t q = 0; q < truth.num_queries(); ++q)
    tokens.push_back(int64_t(truth.query_sequence[size_t(q)]) * shape.tokens + truth.query_token[size_t(q)]);
  return tokens;
}

std::vector<NeedleScore> needle_scores_on_query_rows(const NeedleTruth& truth, const float* o_rows,
                                                     const Shape& shape) {
  // The same questions asked of a batch of one sequence whose token q is query q.
  NeedleTruth on_rows = truth;
  for (int64_t q = 0; q < truth.num_queries(); ++q) {
    on_rows.query_sequence[size_t(q)] = 0;
    on_rows.query_token[size_t(q)] = int32_t(q);
  }
  Shape rows_shape = shape;
  rows_shape.batch = 1;
  rows_shape.tokens = truth.num_queries();
  return score_queries(on_rows, o_rows, rows_shape);
}

std::vector<int32_t> needle_correct(const NeedleTruth& truth, const double* o, const Shape& shape) {
  return correct_of(truth, o, shape);
}
std::vector<int32_t> needle_correct(const NeedleTruth& truth, const float* o, const Shape& shape) {
  return correct_of(truth, o, shape);
}

NeedleAccuracy needle_accuracy(const NeedleTruth& truth, const std::vector<int32_t>& correct) {
  require(int64_t(correct.size()) == truth.num_queries(), "needle_accuracy: ", correct.size(),
          " results for ", truth.num_queries(), " queries");
  std::map<double, std::pair<int64_t, int64_t>> by_depth;  // depth -> (right, asked)
  int64_t right = 0;
  for (size_t q = 0; q < correct.size(); ++q) {
    auto& tally = by_depth[double(truth.query_depth[q])];
    tally.first += correct[q] ? 1 : 0;
    tally.second += 1;
    right += correct[q] ? 1 : 0;
  }
  NeedleAccuracy acc;
  for (const auto& [depth, tally] : by_depth) {
    acc.depths.push_back(depth);
    acc.accuracy.push_back(double(tally.first) / double(tally.second));
    acc.queries.push_back(tally.second);
  }
  acc.overall = correct.empty() ? 0.0 : double(right) / double(correct.size());
  return acc;
}

}  // namespace sgdn
