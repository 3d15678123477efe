// The synthetic workloads of SPEC §9: the portable RNG (golden values), the `random` generator (shapes,
// ranges, reproducibility) and the `needle` generator (structure, truth round trip, and recall of the exact
// float64 token recurrence on every variant).
#include <catch2/catch.hpp>
#include <cstdio>
#include <set>

#include "algorithms/engine.h"
#include "core/error.h"
#include "data/needle_workload.h"
#include "data/random_workload.h"
#include "data/rng.h"

namespace sgdn {
namespace {

double norm_of(const double* x, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += x[i] * x[i];
  return std::sqrt(s);
}

template <class T>
bool same_values(const Tensor<T>& a, const Tensor<T>& b) {
  return a.dims() == b.dims() && a.values() == b.values();
}

bool same_inputs(const Inputs<double>& a, const Inputs<double>& b) {
  return same_values(a.q, b.q) && same_values(a.k, b.k) && same_values(a.v, b.v) && same_values(a.g, b.g) &&
         same_values(a.beta, b.beta) && same_values(a.initial_state, b.initial_state);
}

// Expects `make` to throw sgdn::Error whose message contains `key`.
template <class F>
void require_error_naming(F make, const std::string& key) {
  try {
    make();
    FAIL("no error for " << key);
  } catch (const Error& e) {
    INFO(e.what());
    CHECK(std::string(e.what()).find(key) != std::string::npos);
  }
}

}  // namespace

TEST_CASE("rng: SplitMix64 streams match the published generator and golden values", "[workload][rng]") {
  // A stream started from key 0 is plain SplitMix64 seeded with 0, whose outputs are published
  // (the reference implementation by Vigna).
  rng::Stream plain(uint64_t{0});
  CHECK(plain.next_u64() == 0xe220a8397b1dcdafULL);
  CHECK(plain.next_u64() == 0x6e789e6aa1b965f4ULL);
  CHECK(plain.next_u64() == 0x06c45d188009454fULL);

  // Keyed streams: integers are exact everywhere; normals go through libm (log, cos, sin) and are compared
  // to a tolerance of a few ulps.
  rng::Stream keyed(7, rng::Tag::value, {1, 2, 3});
  CHECK(keyed.next_u64() == 0x03dd99b79ef6a2d1ULL);
  CHECK(keyed.next_u64() == 0xdf84ceeb9fc1f3c0ULL);
  rng::Stream normals(0, rng::Tag::value, {0, 0, 0});
  const double golden[4] = {0.49497441635722644, 0.95275463320956588, -0.48150527778247965,
                            -0.63327685412581536};
  for (double g : golden) CHECK(normals.normal() == Approx(g).epsilon(1e-14).margin(1e-15));
}

TEST_CASE("rng: keys separate coordinates, uniforms are open, normals are standard", "[workload][rng]") {
  std::set<uint64_t> keys;
  for (uint64_t a = 0; a < 16; ++a)
    for (uint64_t b = 0; b < 16; ++b) keys.insert(rng::derive_key(0, {a, b}));
  CHECK(keys.size() == 256);
  CHECK(rng::derive_key(0, {1, 2}) != rng::derive_key(0, {2, 1}));
  CHECK(rng::derive_key(0, {1}) != rng::derive_key(1, {1}));

  rng::Stream stream(3, rng::Tag::query, {5});
  const int n = 200000;
  double sum = 0, sum2 = 0, sum4 = 0, umin = 1, umax = 0;
  for (int i = 0; i < n; ++i) {
    const double u = stream.uniform();
    umin = std::min(umin, u);
    umax = std::max(umax, u);
    const double z = stream.normal();
    sum += z;
    sum2 += z * z;
    sum4 += z * z * z * z;
  }
  CHECK(umin > 0);
  CHECK(umax < 1);
  CHECK(std::abs(sum / n) < 0.01);
  CHECK(sum2 / n == Approx(1.0).epsilon(0.015));
  CHECK(sum4 / n == Approx(3.0).epsilon(0.04));  // the fourth moment of N(0, 1)
}

TEST_CASE("random workload: shapes and value ranges", "[workload]") {
  const Shape shape = Shape::of(2, 96, 4, 8, 16, 12);
  const GeneratedWorkload w = random_workload(shape, 11);
  const Inputs<double>& in = w.inputs;
  REQUIRE_NOTHROW(validate(in));
  CHECK(in.q.dims() == std::vector<int64_t>{2, 96, 4, 16});
  CHECK(in.v.dims() == std::vector<int64_t>{2, 96, 8, 12});
  CHECK(in.g.dims() == std::vector<int64_t>{2, 96, 8});
  CHECK(!in.has_initial_state());
  for (int64_t row = 0; row < in.q.size() / 16; ++row) {
    REQUIRE(norm_of(in.q.data() + row * 16, 16) == Approx(1.0).epsilon(1e-13));
    REQUIRE(norm_of(in.k.data() + row * 16, 16) == Approx(1.0).epsilon(1e-13));
  }
  for (int64_t i = 0; i < in.g.size(); ++i) {
    REQUIRE(in.g[i] < 0);
    REQUIRE(in.beta[i] > 0);
    REQUIRE(in.beta[i] < 1);
  }
  double vsum = 0, v2 = 0;
  for (double x : in.v.values()) {
    vsum += x;
    v2 += x * x;
  }
  CHECK(std::abs(vsum / double(in.v.size())) < 0.05);
  CHECK(v2 / double(in.v.size()) == Approx(1.0).epsilon(0.05));
  CHECK(w.attributes.at("generator") == "random");
  CHECK(w.attributes.at("seed") == "11");
}

TEST_CASE("random workload: per-head decay rates lie in the stated ranges", "[workload]") {
  const std::vector<HeadDecay> decays = random_head_decays(5, 256);
  double a_min = 1e9, a_max = 0, s_min = 1e9, s_max = 0;
  for (const HeadDecay& d : decays) {
    REQUIRE(d.a >= 1.0);
    REQUIRE(d.a <= 16.0);
    REQUIRE(d.softplus_b >= 1e-3);
    REQUIRE(d.softplus_b <= 1e-1);
    REQUIRE(softplus(d.b) == Approx(d.softplus_b).epsilon(1e-12));
    a_min = std::min(a_min, d.a), a_max = std::max(a_max, d.a);
    s_min = std::min(s_min, d.softplus_b), s_max = std::max(s_max, d.softplus_b);
  }
  // Log-uniform: the whole range is covered, in log space.
  CHECK(a_min < 1.2);
  CHECK(a_max > 13);
  CHECK(s_min < 1.3e-3);
  CHECK(s_max > 0.08);

  // The mean of -g / A_h over tokens is E[softplus(x + b_h)], x ~ N(0, 1): compare with quadrature. (For
  // small softplus(b) it is about e^0.5 softplus(b), so per-token decay rates span ~1.6e-3 to ~2.7: memories
  // from hundreds of tokens down to one.)
  const int64_t T = 4000;
  const GeneratedWorkload w = random_workload(Shape::of(1, T, 1, 4, 4, 4), 5);
  for (int64_t h = 0; h < 4; ++h) {
    const HeadDecay& d = decays[size_t(h)];
    double mean = 0;
    for (int64_t t = 0; t < T; ++t) mean += -w.inputs.g[t * 4 + h] / d.a;
    mean /= double(T);
    double expected = 0;
    const double dx = 1e-3;
    for (double x = -10; x <= 10; x += dx) expected += softplus(x + d.b) * std::exp(-0.5 * x * x) * dx;
    expected /= std::sqrt(2 * 3.141592653589793);
    CHECK(mean == Approx(expected).epsilon(0.08));  // 4000 samples: a few percent of noise
  }
}

TEST_CASE("random workload: reproducible by seed, independent of T and B", "[workload]") {
  const Shape shape = Shape::of(2, 64, 2, 4, 8, 8);
  const GeneratedWorkload a = random_workload(shape, 42);
  const GeneratedWorkload b = random_workload(shape, 42);
  const GeneratedWorkload c = random_workload(shape, 43);
  CHECK(same_inputs(a.inputs, b.inputs));
  CHECK_FALSE(same_values(a.inputs.q, c.inputs.q));
  CHECK_FALSE(same_values(a.inputs.v, c.inputs.v));
  CHECK_FALSE(same_values(a.inputs.g, c.inputs.g));

  // A shorter, smaller batch is a prefix of the longer one: tokens own their streams.
  const GeneratedWorkload shorter = random_workload(Shape::of(1, 40, 2, 4, 8, 8), 42);
  for (int64_t t = 0; t < 40; ++t) {
    for (int64_t i = 0; i < 2 * 8; ++i) REQUIRE(shorter.inputs.k[t * 16 + i] == a.inputs.k[t * 16 + i]);
    for (int64_t h = 0; h < 4; ++h) REQUIRE(shorter.inputs.g[t * 4 + h] == a.inputs.g[t * 4 + h]);
  }
}

TEST_CASE("random workload: golden first values", "[workload]") {
  // Catches a change of the generator or of the platform's libm beyond rounding.
  const GeneratedWorkload w = random_workload(Shape::of(1, 4, 2, 4, 8, 8), 0);
  const Inputs<double>& in = w.inputs;
  CHECK(in.q[0] == Approx(-0.12451661650658935).epsilon(1e-12));
  CHECK(in.k[0] == Approx(-0.10032943749949776).epsilon(1e-12));
  CHECK(in.v[0] == Approx(0.49497441635722644).epsilon(1e-12));
  CHECK(in.g[0] == Approx(-0.00039572065052777229).epsilon(1e-12));
  CHECK(in.beta[0] == Approx(0.63226489627604454).epsilon(1e-12));
  const std::vector<HeadDecay> decays = random_head_decays(0, 2);
  CHECK(decays[0].a == Approx(1.2774539478523237).epsilon(1e-12));
  CHECK(decays[0].softplus_b == Approx(0.0018506639460160719).epsilon(1e-12));
}

TEST_CASE("random workload: optional initial state", "[workload]") {
  const Shape shape = Shape::of(2, 8, 2, 4, 32, 16);
  RandomWorkloadOptions options;
  options.initial_state = true;
  options.initial_state_std = 2.0;
  const GeneratedWorkload w = random_workload(shape, 1, options);
  REQUIRE(w.inputs.has_initial_state());
  CHECK(w.inputs.initial_state.dims() == std::vector<int64_t>{2, 4, 32, 16});
  double sum2 = 0;
  for (double x : w.inputs.initial_state.values()) sum2 += x * x;
  // Entries ~ N(0, std^2 / K).
  CHECK(sum2 / double(w.inputs.initial_state.size()) == Approx(4.0 / 32).epsilon(0.1));
  CHECK(w.attributes.at("initial_state") == "true");
  // The rest of the batch is unchanged by the option.
  CHECK(same_values(w.inputs.v, random_workload(shape, 1).inputs.v));
}

TEST_CASE("random workload: parameter errors name the key", "[workload]") {
  require_error_naming(
      [] {
        RandomWorkloadOptions::from_params(Params("workload", {{"initial_state_std", "-1"}}));
      },
      "workload.initial_state_std");
  require_error_naming(
      [] {
        RandomWorkloadOptions::from_params(Params("workload", {{"initial_state", "maybe"}}));
      },
      "workload.initial_state");
  const RandomWorkloadOptions o =
      RandomWorkloadOptions::from_params(Params("workload", {{"initial_state", "true"}, {"tokens", "5"}}));
  CHECK(o.initial_state);
}

TEST_CASE("needle workload: parameter errors name the key", "[workload][needle]") {
  const Shape shape = Shape::of(1, 512, 4, 8, 32, 32);
  auto make = [&](std::map<std::string, std::string> values) {
    return [=] { needle_workload(shape, 0, NeedleOptions::from_params(Params("workload", values))); };
  };
  require_error_naming(make({{"task", "haystack"}}), "workload.task");
  require_error_naming(make({{"task", "haystack"}}), "multiquery");  // lists the allowed tasks
  require_error_naming(make({{"depths", "0 150"}}), "workload.depths");
  require_error_naming(make({{"depths", "0,50"}}), "workload.depths");
  require_error_naming(make({{"depths", ""}}), "workload.depths");
  require_error_naming(make({{"needles", "3"}}), "workload.needles");  // single has one needle
  require_error_naming(make({{"task", "multikey"}, {"needles", "1"}}), "workload.needles");
  require_error_naming(make({{"task", "multiquery"}, {"queries", "5"}}), "workload.queries");
  require_error_naming(make({{"queries", "2"}}), "workload.queries");
  require_error_naming(make({{"task", "multikey"}, {"codebook", "4"}}), "workload.codebook");
  require_error_naming(make({{"retrieval_fraction", "0"}}), "workload.retrieval_fraction");
  require_error_naming(make({{"retrieval_fraction", "1.5"}}), "workload.retrieval_fraction");
  require_error_naming(make({{"leakage", "1"}}), "workload.leakage");
  require_error_naming(make({{"needle_dims", "32"}}), "workload.needle_dims");
  require_error_naming(make({{"task", "multikey"}, {"needles", "8"}, {"needle_dims", "4"}}),
                       "workload.needle_dims");
  require_error_naming(make({{"retrieval_log_decay", "-1"}}), "workload.retrieval_log_decay");
  require_error_naming(make({{"task", "multivalue"}, {"needle_spacing", "200"}}), "workload.needle_spacing");
  require_error_naming(make({{"needle_spacing", "0"}}), "workload.needle_spacing");
  require_error_naming(make({{"positions", "middle"}}), "workload.positions");
  require_error_naming(make({{"key_overlap", "1.5"}}), "workload.key_overlap");
  require_error_naming(make({{"strong_writes", "-0.1"}}), "workload.strong_writes");
  require_error_naming(make({{"decay_spectrum", "long"}}), "workload.decay_spectrum");
  require_error_naming(make({{"value_norm", "unit"}}), "workload.value_norm");
  CHECK_NOTHROW(make({{"task", "multiquery"}, {"needles", "3"}, {"queries", "2"}, {"depths", "10 90"}})());

  // The declared defaults are values: a config that spells every key out with its default is valid, for
  // each task.
  std::map<std::string, std::string> defaults;
  for (const ParamSpec& s : NeedleOptions::param_specs()) defaults[s.key] = s.default_value;
  for (const char* task : {"single", "multikey", "multivalue", "multiquery"}) {
    defaults["task"] = task;
    CHECK_NOTHROW(make(defaults)());
  }

  // Every key the generator reads is declared, with the haystack's.
  std::set<std::string> declared;
  for (const ParamSpec& s : NeedleOptions::param_specs()) declared.insert(s.key);
  for (const char* key : {"task", "depths", "needles", "queries", "codebook", "retrieval_fraction", "leakage",
                          "needle_dims", "retrieval_log_decay", "needle_spacing", "positions", "key_overlap",
                          "strong_writes", "decay_spectrum", "value_norm", "initial_state"})
    CHECK(declared.count(key) == 1);
}

TEST_CASE("needle workload: structure of the haystack, the needles and the truth", "[workload][needle]") {
  const int64_t T = 1024, K = 32, m = 8;
  const Shape shape = Shape::of(3, T, 4, 8, K, 16);
  NeedleOptions options;
  options.task = NeedleTask::multiquery;
  options.needles = 3;
  options.queries = 2;
  options.needle_dims = m;
  options.leakage = 0.05;
  options.depths = {0, 100, 50};
  const NeedleWorkload w = needle_workload(shape, 9, options);
  const Inputs<double>& in = w.inputs;
  const NeedleTruth& truth = w.truth;
  REQUIRE_NOTHROW(validate(in));

  // One retrieval group of the 4 q/k heads (round(0.25 * 4)), with both of its value heads.
  REQUIRE(truth.retrieval_heads == std::vector<int32_t>{0, 1});
  CHECK(w.attributes.at("retrieval_qk_heads") == "0");
  CHECK(truth.codebook.dims() == std::vector<int64_t>{64, 2, 16});
  REQUIRE(truth.num_queries() == 6);
  REQUIRE(truth.needle_token.size() == 9);

  std::set<int64_t> needle_tokens;
  for (size_t i = 0; i < truth.needle_token.size(); ++i)
    needle_tokens.insert(truth.needle_sequence[i] * T + truth.needle_token[i]);
  const int64_t context = T - 2;
  for (int64_t b = 0; b < 3; ++b) {
    double total_decay = 0;
    for (int64_t t = 0; t < T; ++t) {
      total_decay += in.g[(b * T + t) * 8 + 0];
      const double* k = in.k.data() + ((b * T + t) * 4 + 0) * K;
      REQUIRE(norm_of(k, K) == Approx(1.0).epsilon(1e-12));
      // Haystack keys leak exactly `leakage` into the needle subspace; needle keys live inside it.
      const double needle_part = norm_of(k, m);
      if (needle_tokens.count(b * T + t))
        REQUIRE(needle_part == Approx(1.0).epsilon(1e-12));
      else
        REQUIRE(needle_part == Approx(0.05).epsilon(1e-12));
    }
    CHECK(-total_decay == Approx(0.5).epsilon(0.1));  // retrieval_log_decay over the sequence
  }
  // Depths place the clusters: 0 % at token 0, 100 % with the last write just before the queries.
  CHECK(truth.needle_token[0] == 0);
  CHECK(truth.needle_token[1] == 64);
  CHECK(truth.needle_token[5] == context - 1);
  CHECK(truth.needle_token[3] == context - 1 - 128);

  for (size_t i = 0; i < truth.needle_token.size(); ++i) {
    const int64_t b = truth.needle_sequence[i], t = truth.needle_token[i];
    for (int64_t h : {0, 1}) {
      CHECK(in.beta[(b * T + t) * 8 + h] == 1.0);
      const float* entry = truth.codebook.data() + (truth.needle_value[i] * 2 + h) * 16;
      for (int64_t j = 0; j < 16; ++j) REQUIRE(in.v[((b * T + t) * 8 + h) * 16 + j] == double(entry[j]));
    }
    // Non-retrieval heads keep the `random` haystack at needle tokens.
    CHECK(in.beta[(b * T + t) * 8 + 2] < 1.0);
  }
  // Each query asks a distinct needle of its own sequence with the needle's key; the third needle is not
  // asked.
  for (int64_t q = 0; q < 6; ++q) {
    const int64_t b = truth.query_sequence[size_t(q)], t = truth.query_token[size_t(q)];
    CHECK(t == context + q % 2);
    CHECK(truth.query_depth[size_t(q)] == float(options.depths[size_t(b)]));
    const int64_t needle = b * 3 + q % 2;
    CHECK(truth.needle_query[size_t(needle)] == q);
    CHECK(truth.answer[q] == truth.needle_value[size_t(needle)]);
    const double* query = in.q.data() + ((b * T + t) * 4 + 0) * K;
    const double* key = in.k.data() + ((b * T + truth.needle_token[size_t(needle)]) * 4 + 0) * K;
    for (int64_t i = 0; i < K; ++i) REQUIRE(query[i] == key[i]);
  }
  CHECK(truth.needle_query[2] == -1);
  // Needle keys of one sequence are orthonormal.
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 3; ++j) {
      const double* a = in.k.data() + ((0 * T + truth.needle_token[size_t(i)]) * 4) * K;
      const double* c = in.k.data() + ((0 * T + truth.needle_token[size_t(j)]) * 4) * K;
      double dot = 0;
      for (int64_t d = 0; d < K; ++d) dot += a[d] * c[d];
      CHECK(dot == Approx(i == j ? 1.0 : 0.0).margin(1e-12));
    }

  // The truth survives the trip through plain arrays (as it is stored in HDF5).
  const NeedleTruth back = NeedleTruth::from_tensors(truth.to_tensors());
  CHECK(back.retrieval_heads == truth.retrieval_heads);
  CHECK(same_values(back.codebook, truth.codebook));
  CHECK(back.query_sequence == truth.query_sequence);
  CHECK(back.query_token == truth.query_token);
  CHECK(back.query_depth == truth.query_depth);
  CHECK(same_values(back.answer, truth.answer));
  CHECK(back.needle_token == truth.needle_token);
  CHECK(back.needle_query == truth.needle_query);
  NeedleTruth::Arrays broken = truth.to_tensors();
  broken.ints.erase("answer");
  require_error_naming([&] { NeedleTruth::from_tensors(broken); }, "answer");

  // Reproducible by seed.
  CHECK(same_inputs(needle_workload(shape, 9, options).inputs, in));
  CHECK_FALSE(same_values(needle_workload(shape, 10, options).inputs.k, in.k));
}

TEST_CASE("needle scoring: perfect and empty read-outs", "[workload][needle]") {
  const int64_t T = 256, HV = 4, V = 64;
  const Shape shape = Shape::of(2, T, 2, HV, 16, V);
  NeedleOptions options;
  options.task = NeedleTask::multivalue;
  options.needles = 3;
  options.needle_dims = 4;
  options.needle_spacing = 16;
  options.depths = {20, 80};
  const NeedleWorkload w = needle_workload(shape, 3, options);
  const NeedleTruth& truth = w.truth;
  REQUIRE(truth.answer.dims() == std::vector<int64_t>{2, 3});
  Tensor<float> o({2, T, HV, V});
  CHECK(needle_correct(truth, o.data(), shape) == std::vector<int32_t>{0, 0});  // zero output: no answer

  // Write the mean of the answers into the read-out: every query is right.
  const int64_t R = int64_t(truth.retrieval_heads.size());
  for (int64_t q = 0; q < 2; ++q) {
    const int64_t row = truth.query_sequence[size_t(q)] * T + truth.query_token[size_t(q)];
    for (int64_t j = 0; j < R; ++j)
      for (int64_t a = 0; a < 3; ++a)
        for (int64_t i = 0; i < V; ++i)
          o[(row * HV + truth.retrieval_heads[size_t(j)]) * V + i] +=
              truth.codebook[(truth.answer[q * 3 + a] * R + j) * V + i] / 3.0f;
  }
  CHECK(needle_correct(truth, o.data(), shape) == std::vector<int32_t>{1, 1});
  const NeedleAccuracy acc = needle_accuracy(truth, {1, 0});
  CHECK(acc.depths == std::vector<double>{20, 80});
  CHECK(acc.accuracy == std::vector<double>{1.0, 0.0});
  CHECK(acc.overall == 0.5);
}

namespace {

// A fingerprint of a needle batch: per input tensor a position-weighted sum (any changed entry moves it far
// beyond the tolerance, while a last-bit difference of the platform's libm does not), and the truth's
// integer arrays exactly (as a sum of index-weighted entries).
struct NeedleFingerprint {
  std::vector<double> sums;  // q, k, v, g, beta, codebook
  int64_t truth = 0;
};

template <class T>
double weighted_sum(const Tensor<T>& x) {
  double s = 0;
  for (int64_t i = 0; i < x.size(); ++i) s += double(x[i]) * (1.0 + double(i % 101) / 101.0);
  return s;
}

NeedleFingerprint fingerprint_of(const NeedleWorkload& w) {
  NeedleFingerprint f;
  const Inputs<double>& in = w.inputs;
  f.sums = {weighted_sum(in.q), weighted_sum(in.k),    weighted_sum(in.v),
            weighted_sum(in.g), weighted_sum(in.beta), weighted_sum(w.truth.codebook)};
  const NeedleTruth& t = w.truth;
  int64_t i = 0;
  for (const std::vector<int32_t>* xs :
       {&t.retrieval_heads, &t.query_sequence, &t.query_token, &t.needle_sequence, &t.needle_token,
        &t.needle_value, &t.needle_query})
    for (int32_t x : *xs) f.truth += ++i * int64_t(x);
  for (int64_t j = 0; j < t.answer.size(); ++j) f.truth += ++i * int64_t(t.answer[j]);
  for (float d : t.query_depth) f.truth += ++i * int64_t(d);
  return f;
}

// Runs the exact float64 recurrence on a needle batch and returns the accuracy; prints it per depth.
NeedleAccuracy recall_of(const Shape& shape, NeedleTask task, uint64_t seed, bool print) {
  NeedleOptions options;
  options.task = task;
  const NeedleWorkload w = needle_workload(shape, seed, options);
  const TokenRecurrenceResult exact = token_recurrence(w.inputs);
  const std::vector<NeedleScore> scores = needle_scores(w.truth, exact.o.data(), shape);
  std::vector<int32_t> correct;
  double worst_margin = 1e9;
  for (const NeedleScore& s : scores) {
    correct.push_back(s.correct);
    worst_margin = std::min(worst_margin, s.answer_cosine - s.best_wrong_cosine);
  }
  const NeedleAccuracy acc = needle_accuracy(w.truth, correct);
  if (print) {
    std::printf(
        "needle %-10s T=%-6lld H=%lld HV=%lld K=%lld V=%lld  overall %.3f  worst cosine margin %.3f  |",
        needle_task_name(task), (long long)shape.tokens, (long long)shape.qk_heads, (long long)shape.v_heads,
        (long long)shape.key_dim, (long long)shape.value_dim, acc.overall, worst_margin);
    for (size_t i = 0; i < acc.depths.size(); ++i) std::printf(" %g%%: %.2f", acc.depths[i], acc.accuracy[i]);
    std::printf("\n");
  }
  return acc;
}

}  // namespace

TEST_CASE("needle workload: dense exact GDN recalls every variant", "[workload][needle]") {
  // Five sequences, one per default depth (0, 25, 50, 75, 100 %).
  const Shape shape = Shape::of(5, 2048, 4, 8, 64, 64);
  for (NeedleTask task :
       {NeedleTask::single, NeedleTask::multikey, NeedleTask::multivalue, NeedleTask::multiquery}) {
    SECTION(needle_task_name(task)) {
      const NeedleAccuracy acc = recall_of(shape, task, 1, false);
      INFO("task " << needle_task_name(task));
      CHECK(acc.overall >= 0.95);
      CHECK(acc.depths.size() == 5);
    }
  }
}

// The construction with every knob at its default is the one the needle results were measured on: these
// fingerprints were taken before the construction knobs existed.
TEST_CASE("needle workload: the default construction reproduces the original inputs", "[workload][needle]") {
  struct Case {
    NeedleTask task;
    Shape shape;
    NeedleFingerprint expected;
  };
  const std::vector<Case> cases = {
      {NeedleTask::single,
       Shape::of(3, 300, 4, 8, 32, 16),
       {{114.70504781772311, 87.007755999759425, 597.66931709369567, -658.84952400620284, 5351.5733344882447,
         21.53265651324449},
        14838}},
      {NeedleTask::multikey,
       Shape::of(3, 300, 2, 4, 32, 32),
       {{85.016153333994183, 65.092854409018031, -217.07831279997725, -104.3335172859375, 2717.4727369568182,
         -29.63521351620064},
        80266}},
      {NeedleTask::multivalue,
       Shape::of(2, 400, 2, 2, 64, 16),
       {{85.887241582108331, 29.28817807787674, -133.15420853277047, -220.57022466609055, 1182.2735849627354,
         17.724617279667235},
        44163}},
      {NeedleTask::multiquery,
       Shape::of(5, 500, 2, 8, 32, 16),
       {{49.531162180553842, -75.943471932468881, 417.83837848737721, -1593.9992411357582, 14950.003903747045,
         34.095442774991355},
        1058740}},
  };
  for (const Case& c : cases) {
    NeedleOptions options;
    options.task = c.task;
    options.needle_dims = 8;
    const NeedleFingerprint f = fingerprint_of(needle_workload(c.shape, 5, options));
    INFO("task " << needle_task_name(c.task));
    REQUIRE(f.sums.size() == c.expected.sums.size());
    for (size_t i = 0; i < f.sums.size(); ++i)
      CHECK(f.sums[i] == Approx(c.expected.sums[i]).epsilon(1e-12).margin(1e-8));
    CHECK(f.truth == c.expected.truth);
  }
}

// The dot products of a haystack key of (b, t, head hq) with the sequence's needle keys (the keys the
// queries carry).
std::vector<double> needle_dots(const NeedleWorkload& w, int64_t b, int64_t t, int64_t hq) {
  const Shape& s = w.inputs.shape;
  const int64_t T = s.tokens, H = s.qk_heads, K = s.key_dim;
  std::vector<double> dots;
  for (int64_t q = 0; q < w.truth.num_queries(); ++q) {
    if (w.truth.query_sequence[size_t(q)] != b) continue;
    const double* n = w.inputs.q.data() + ((b * T + w.truth.query_token[size_t(q)]) * H + hq) * K;
    const double* k = w.inputs.k.data() + ((b * T + t) * H + hq) * K;
    double dot = 0;
    for (int64_t i = 0; i < K; ++i) dot += n[i] * k[i];
    dots.push_back(dot);
  }
  return dots;
}

std::set<int64_t> needle_tokens_of(const NeedleTruth& truth, int64_t T) {
  std::set<int64_t> tokens;
  for (size_t i = 0; i < truth.needle_token.size(); ++i)
    tokens.insert(truth.needle_sequence[i] * T + truth.needle_token[i]);
  return tokens;
}

TEST_CASE("needle construction: random positions are reproducible by seed and within range",
          "[workload][needle]") {
  const int64_t T = 600;
  const Shape shape = Shape::of(8, T, 2, 4, 32, 16);
  NeedleOptions options;
  options.task = NeedleTask::multiquery;
  options.needles = 3;
  options.needle_spacing = 10;
  options.needle_dims = 8;
  options.positions = NeedlePositions::random;
  const NeedleWorkload a = needle_workload(shape, 4, options), b = needle_workload(shape, 4, options);
  CHECK(a.truth.needle_token == b.truth.needle_token);
  CHECK(same_inputs(a.inputs, b.inputs));
  CHECK(a.attributes.at("positions") == "random");
  const int64_t context = T - 3, span = 2 * 10;
  std::set<int32_t> starts;
  for (size_t i = 0; i < a.truth.needle_token.size(); i += 3) {
    const int32_t start = a.truth.needle_token[i];
    CHECK(start >= 0);
    CHECK(start <= context - 1 - span);
    CHECK(a.truth.needle_token[i + 2] == start + span);  // the cluster keeps its spacing
    starts.insert(start);
  }
  for (size_t q = 0; q < size_t(a.truth.num_queries()); ++q) {
    const int32_t start = a.truth.needle_token[size_t(a.truth.query_sequence[q]) * 3];
    CHECK(a.truth.query_depth[q] == Approx(100.0 * start / double(context - 1 - span)));
  }
  CHECK(starts.size() >= 6);  // uniform starts: the 8 sequences do not share a few depths
  CHECK(needle_workload(shape, 5, options).truth.needle_token != a.truth.needle_token);
  // Dense exact GDN still answers them.
  const TokenRecurrenceResult exact = token_recurrence(a.inputs);
  int correct = 0;
  for (int32_t c : needle_correct(a.truth, exact.o.data(), shape)) correct += c;
  CHECK(correct >= a.truth.num_queries() - 1);
}

TEST_CASE("needle construction: key overlap runs from disjoint to shared needle keys", "[workload][needle]") {
  const int64_t T = 300, K = 32;
  const Shape shape = Shape::of(2, T, 2, 4, K, 16);
  NeedleOptions options;
  options.task = NeedleTask::multiquery;
  options.needles = 2;
  options.needle_dims = 8;
  options.depths = {30, 70};
  options.leakage = 0;
  for (double overlap : {0.0, 0.3, 1.0}) {
    options.key_overlap = overlap;
    const NeedleWorkload w = needle_workload(shape, 6, options);
    const std::set<int64_t> needles = needle_tokens_of(w.truth, T);
    INFO("key_overlap " << overlap);
    CHECK(w.attributes.at("key_overlap") == attribute_number(overlap));
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t t = 0; t < T - 2; ++t) {
        if (needles.count(b * T + t)) continue;
        const double* k = w.inputs.k.data() + ((b * T + t) * 2 + 0) * K;
        REQUIRE(norm_of(k, K) == Approx(1.0).epsilon(1e-12));
        double largest = 0;
        for (double dot : needle_dots(w, b, t, 0)) largest = std::max(largest, std::abs(dot));
        if (overlap == 0) {
          REQUIRE(largest < 1e-12);  // orthogonal to every needle key
        } else if (overlap == 1) {
          REQUIRE(largest == Approx(1.0).epsilon(1e-12));  // a needle key itself
        } else {
          // omega n_j plus an orthogonal unit remainder: exactly omega along n_j.
          REQUIRE(largest == Approx(overlap).epsilon(1e-12));
        }
      }
  }
}

TEST_CASE("needle construction: strong haystack writes", "[workload][needle]") {
  const int64_t T = 2000, HV = 4;
  const Shape shape = Shape::of(2, T, 2, HV, 16, 16);
  NeedleOptions options;
  options.needle_dims = 4;
  auto strong_tokens = [&](const NeedleWorkload& w) {
    const std::set<int64_t> needles = needle_tokens_of(w.truth, T);
    int64_t strong = 0, haystack = 0;
    for (int64_t bt = 0; bt < 2 * T; ++bt) {
      if (needles.count(bt)) continue;
      ++haystack;
      bool all_strong = true;
      for (int64_t h = 0; h < HV; ++h) {
        const double beta = w.inputs.beta[bt * HV + h];
        all_strong = all_strong && beta >= 0.9 && beta < 1.0;
      }
      strong += all_strong ? 1 : 0;
    }
    return double(strong) / double(haystack);
  };
  CHECK(strong_tokens(needle_workload(shape, 2, options)) < 0.01);  // sigmoid(1.5 n) alone: rarely all >= 0.9
  options.strong_writes = 0.25;
  const NeedleWorkload w = needle_workload(shape, 2, options);
  CHECK(strong_tokens(w) == Approx(0.25).margin(0.03));
  CHECK(w.attributes.at("strong_writes") == "0.25");
  options.strong_writes = 1;
  CHECK(strong_tokens(needle_workload(shape, 2, options)) == 1.0);
  // Needle writes keep beta = 1.
  for (size_t i = 0; i < w.truth.needle_token.size(); ++i)
    CHECK(w.inputs.beta[(w.truth.needle_sequence[i] * T + w.truth.needle_token[i]) * HV + 0] == 1.0);
}

TEST_CASE("needle construction: per-head decay spectra", "[workload][needle]") {
  const int64_t T = 2048, HV = 8;
  const Shape shape = Shape::of(1, T, 4, HV, 16, 16);  // one retrieval group: q/k head 0, value heads 0, 1
  NeedleOptions options;
  options.needle_dims = 4;
  auto long_heads = [&](DecaySpectrum spectrum) {
    options.decay_spectrum = spectrum;
    const NeedleWorkload w = needle_workload(shape, 3, options);
    std::vector<int64_t> heads;
    for (int64_t h = 0; h < HV; ++h) {
      double total = 0;
      for (int64_t t = 0; t < T; ++t) total -= w.inputs.g[t * HV + h];
      INFO("head " << h << " total decay " << total);
      if (total < 0.7) {
        CHECK(total == Approx(0.5).epsilon(0.1));  // retrieval_log_decay
        heads.push_back(h);
      } else {
        CHECK(total > 2.0);  // the haystack's short to medium memory
      }
    }
    return heads;
  };
  CHECK(long_heads(DecaySpectrum::mixed) == std::vector<int64_t>{0, 1});
  CHECK(long_heads(DecaySpectrum::pair_mixed) == std::vector<int64_t>{0});
  CHECK(long_heads(DecaySpectrum::all_long) == std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7});
  CHECK(long_heads(DecaySpectrum::all_short).empty());
  // Mixing inside a pair needs a pair.
  options.decay_spectrum = DecaySpectrum::pair_mixed;
  require_error_naming([&] { needle_workload(Shape::of(1, 256, 4, 4, 16, 16), 0, options); },
                       "workload.decay_spectrum");
}

TEST_CASE("needle construction: needle values with the haystack's write size", "[workload][needle]") {
  const int64_t T = 700, HV = 4, V = 16;
  const Shape shape = Shape::of(3, T, 2, HV, 32, V);  // retrieval value heads 0, 1
  NeedleOptions options;
  options.task = NeedleTask::multiquery;
  options.needles = 2;
  options.needle_dims = 8;
  options.depths = {0, 50, 100};
  options.value_norm = NeedleValueNorm::haystack;
  const NeedleWorkload w = needle_workload(shape, 8, options);
  const Inputs<double> haystack = random_workload(shape, 8).inputs;  // same v and beta outside needles
  for (size_t i = 0; i < w.truth.needle_token.size(); ++i) {
    const int64_t bt = w.truth.needle_sequence[i] * T + w.truth.needle_token[i];
    double write = 0, haystack_write = 0, scale = 0;
    for (int64_t h : {0, 1}) {
      const double* v = w.inputs.v.data() + (bt * HV + h) * V;
      write += w.inputs.beta[bt * HV + h] * norm_of(v, V);
      haystack_write += haystack.beta[bt * HV + h] * norm_of(haystack.v.data() + (bt * HV + h) * V, V);
      // One factor for both heads: v = scale * entry.
      const float* entry = w.truth.codebook.data() + (w.truth.needle_value[i] * 2 + h) * V;
      if (scale == 0) scale = v[0] / double(entry[0]);
      for (int64_t j = 0; j < V; ++j) REQUIRE(v[j] == Approx(scale * double(entry[j])).epsilon(1e-12));
    }
    CHECK(write == Approx(haystack_write).epsilon(1e-12));
    CHECK(std::abs(scale - 1.0) > 1e-3);  // the values did change
  }
  const TokenRecurrenceResult exact = token_recurrence(w.inputs);
  int correct = 0;
  for (int32_t c : needle_correct(w.truth, exact.o.data(), shape)) correct += c;
  CHECK(correct == w.truth.num_queries());
}

TEST_CASE("needle construction: several needles in one chunk, near the query, at every shape",
          "[workload][needle]") {
  // K = V = 64 and 128 with GVA ratios 1, 2 and 4; four needles 8 tokens apart (one chunk of 64) at depths
  // close to 100 %, and a larger codebook. Dense exact GDN answers them all.
  for (int64_t dim : {64, 128})
    for (int64_t ratio : {1, 2, 4}) {
      const int64_t T = 1024;
      const Shape shape = Shape::of(3, T, 2, 2 * ratio, dim, dim);
      NeedleOptions options;
      options.task = NeedleTask::multiquery;
      options.needles = 4;
      options.needle_spacing = 8;
      options.depths = {97, 98, 100};
      options.codebook = 256;
      const NeedleWorkload w = needle_workload(shape, 1, options);
      INFO("K = V = " << dim << ", GVA " << ratio);
      for (size_t i = 0; i < w.truth.needle_token.size(); i += 4) {
        CHECK(w.truth.needle_token[i] / 64 == w.truth.needle_token[i + 3] / 64);
        CHECK(w.truth.needle_token[i] >= (T - 4) * 95 / 100 - 24);
      }
      CHECK(int64_t(w.truth.retrieval_heads.size()) == ratio);
      const TokenRecurrenceResult exact = token_recurrence(w.inputs);
      int correct = 0;
      for (int32_t c : needle_correct(w.truth, exact.o.data(), shape)) correct += c;
      CHECK(correct == w.truth.num_queries());
    }
}

TEST_CASE("needle scoring from the query rows alone equals scoring the whole output", "[workload][needle]") {
  const Shape shape = Shape::of(3, 700, 2, 4, 32, 16);
  for (NeedleTask task : {NeedleTask::single, NeedleTask::multiquery}) {
    NeedleOptions options;
    options.task = task;
    options.needle_dims = 8;
    options.depths = {0, 50, 100};
    const NeedleWorkload w = needle_workload(shape, 11, options);
    const Tensor<float> o = token_recurrence(w.inputs).o.cast<float>();
    const std::vector<int64_t> tokens = needle_query_tokens(w.truth, shape);
    REQUIRE(int64_t(tokens.size()) == w.truth.num_queries());
    const int64_t row = shape.v_heads * shape.value_dim;
    Tensor<float> rows({1, int64_t(tokens.size()), shape.v_heads, shape.value_dim});
    for (size_t r = 0; r < tokens.size(); ++r)
      std::copy(o.data() + tokens[r] * row, o.data() + (tokens[r] + 1) * row, rows.data() + int64_t(r) * row);
    const std::vector<NeedleScore> whole = needle_scores(w.truth, o.data(), shape);
    const std::vector<NeedleScore> from_rows = needle_scores_on_query_rows(w.truth, rows.data(), shape);
    INFO("task " << needle_task_name(task));
    REQUIRE(whole.size() == from_rows.size());
    int correct = 0;
    for (size_t q = 0; q < whole.size(); ++q) {
      CHECK(from_rows[q].correct == whole[q].correct);
      CHECK(from_rows[q].answer_cosine == whole[q].answer_cosine);
      CHECK(from_rows[q].best_wrong_cosine == whole[q].best_wrong_cosine);
      correct += whole[q].correct;
    }
    CHECK(correct >=
          int(whole.size()) - 1);  // dense exact answers (nearly) all: the comparison is not vacuous
    // A row of zeros answers nothing: the rows are really read.
    Tensor<float> zeros({1, int64_t(tokens.size()), shape.v_heads, shape.value_dim});
    for (const NeedleScore& sc : needle_scores_on_query_rows(w.truth, zeros.data(), shape))
      CHECK(sc.correct == 0);
  }
}

// The project's default size (Qwen3.5 head shape). Slow (about a minute per T on 2 cores): hidden, run by
// hand with   sgdn_tests "[.needle_full]" -s
TEST_CASE("needle workload: recall at the Qwen3.5 head shape", "[.needle_full]") {
  for (int64_t T : {4096, 8192}) {
    const Shape shape = Shape::of(5, T, 16, 32, 128, 128);
    for (NeedleTask task :
         {NeedleTask::single, NeedleTask::multikey, NeedleTask::multivalue, NeedleTask::multiquery}) {
      const NeedleAccuracy acc = recall_of(shape, task, 0, true);
      CHECK(acc.overall >= 0.95);
    }
  }
}

}  // namespace sgdn
