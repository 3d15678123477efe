// The `file` workload (data/file_workload.h): inputs written in schema v1 read back exactly, and every way a
// file can be wrong gives an error naming the file, the dataset and what was expected.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <random>
#include "support/scratch_dir.h"

#include "core/error.h"
#include "data/file_workload.h"

namespace fs = std::filesystem;
using namespace sgdn;

using sgdn::test::ScratchDir;

namespace {

// Valid inputs whose values are float32-representable, so a float32 round trip gives them back exactly.
Inputs<double> float_exact_inputs(const Shape& shape, uint64_t seed, bool with_initial_state) {
  Inputs<double> inputs = make_inputs<double>(shape, with_initial_state);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  for (Tensor<double>* t : {&inputs.q, &inputs.k, &inputs.v, &inputs.initial_state}) {
    for (double& x : t->values()) x = normal(rng);
  }
  for (double& x : inputs.g.values()) x = -unit(rng);
  for (double& x : inputs.beta.values()) x = unit(rng);
  return inputs;
}

Shape small_shape() {
  Shape shape;
  shape.batch = 2;
  shape.tokens = 37;
  shape.qk_heads = 2;
  shape.v_heads = 4;
  shape.key_dim = 8;
  shape.value_dim = 6;
  return shape;
}

void require_same_inputs(const Inputs<double>& a, const Inputs<double>& b) {
  CHECK(a.shape.str() == b.shape.str());
  CHECK(a.q.dims() == b.q.dims());
  CHECK(a.q.values() == b.q.values());
  CHECK(a.k.values() == b.k.values());
  CHECK(a.v.values() == b.v.values());
  CHECK(a.g.values() == b.g.values());
  CHECK(a.beta.values() == b.beta.values());
  CHECK(a.initial_state.dims() == b.initial_state.dims());
  CHECK(a.initial_state.values() == b.initial_state.values());
  CHECK(a.scale == b.scale);
  CHECK(a.allow_negative_eigenvalues == b.allow_negative_eigenvalues);
}

// A file with one well-formed workload "w0", whose datasets the test then replaces one at a time.
std::string write_valid_file(const ScratchDir& dir, const Inputs<double>& inputs) {
  const std::string path = dir.file("workloads.h5");
  h5::File file = h5::File::create(path);
  write_schema_attributes(file);
  write_workload_inputs(file, "w0", inputs, {{"generator", std::string("test")}});
  return path;
}

void replace_dataset(const std::string& path, const std::string& dataset, const Tensor<float>& data) {
  h5::File file = h5::File::open(path, h5::Mode::read_write);
  file.remove(dataset);
  file.write(dataset, data);
}

}  // namespace

TEST_CASE("file workload: inputs, attributes and exact outputs round-trip", "[file_workload]") {
  ScratchDir dir;
  const std::string path = dir.file("experiment.h5");
  Inputs<double> with_state = float_exact_inputs(small_shape(), 1, true);
  with_state.scale = 0.25;
  with_state.allow_negative_eigenvalues = true;
  Shape long_shape = small_shape();
  long_shape.batch = 1;
  long_shape.tokens = 300;  // large enough for chunked, compressed datasets
  long_shape.key_dim = 32;
  long_shape.value_dim = 32;
  const Inputs<double> without_state = float_exact_inputs(long_shape, 2, false);
  Tensor<double> exact_outputs({1, long_shape.tokens, long_shape.v_heads, long_shape.value_dim}, 0.75);

  h5::write_atomically(path, [&](h5::File& file) {
    write_schema_attributes(file);
    write_workload_inputs(file, "needle_single", with_state,
                          {{"generator", std::string("needle")}, {"seed", int64_t{7}}, {"depth", 0.5}});
    write_workload_inputs(file, "random_T300", without_state, {{"generator", std::string("random")}});
    write_exact_outputs(file, "random_T300", exact_outputs);
  });

  CHECK(list_workloads(path) == std::vector<std::string>{"needle_single", "random_T300"});

  const FileWorkload needle = load_file_workload(path, "needle_single");
  CHECK(needle.id == "needle_single");
  require_same_inputs(needle.inputs, with_state);
  CHECK(needle.attributes.at("generator") == "needle");
  CHECK(needle.attributes.at("seed") == "7");
  CHECK(needle.attributes.at("depth") == "0.5");
  CHECK(needle.attributes.at("scale") == "0.25");

  const std::vector<FileWorkload> all = load_file_workloads(path);
  REQUIRE(all.size() == 2);
  CHECK(all[1].id == "random_T300");
  require_same_inputs(all[1].inputs, without_state);
  CHECK_FALSE(all[1].inputs.has_initial_state());
  CHECK(load_file_workloads(path, "random_T300").size() == 1);

  const h5::File file = h5::File::open(path);
  CHECK(file.attr_int("/", "schema_version") == kSchemaVersion);
  CHECK(file.dataset_info("/workloads/random_T300/inputs/q").element_bytes == 4);  // stored as float32
  CHECK(has_exact_outputs(file, "random_T300"));
  CHECK_FALSE(has_exact_outputs(file, "needle_single"));
  CHECK(load_exact_outputs(file, "random_T300", long_shape).values() == exact_outputs.values());
  CHECK_THROWS_WITH(load_exact_outputs(file, "random_T300", small_shape()), Catch::Contains("exact/o"));
}

TEST_CASE("file workload: float64 inputs written by another tool are read too", "[file_workload]") {
  ScratchDir dir;
  const std::string path = dir.file("float64.h5");
  const Inputs<double> inputs = float_exact_inputs(small_shape(), 3, false);
  {
    h5::File file = h5::File::create(path);
    file.write("/workloads/captured/inputs/q", inputs.q);
    file.write("/workloads/captured/inputs/k", inputs.k);
    file.write("/workloads/captured/inputs/v", inputs.v);
    file.write("/workloads/captured/inputs/g", inputs.g);
    file.write("/workloads/captured/inputs/beta", inputs.beta);
    file.set_attr("/workloads/captured/inputs", "allow_negative_eigenvalues", "false");
  }
  const FileWorkload loaded = load_file_workload(path, "captured");
  require_same_inputs(loaded.inputs, inputs);
}

TEST_CASE("file workload: wrong files and wrong datasets give errors that say what is wrong",
          "[file_workload]") {
  ScratchDir dir;
  const Shape shape = small_shape();
  const Inputs<double> inputs = float_exact_inputs(shape, 4, true);

  SECTION("a missing file") {
    CHECK_THROWS_WITH(load_file_workloads(dir.file("absent.h5")), Catch::Contains("no such file"));
  }
  SECTION("a file that is not HDF5") {
    const std::string path = dir.file("notes.h5");
    std::ofstream(path) << "q,k,v\n1,2,3\n";
    CHECK_THROWS_WITH(load_file_workload(path, "w0"), Catch::Contains("not an HDF5 file"));
  }
  SECTION("an HDF5 file without /workloads") {
    const std::string path = dir.file("other.h5");
    h5::File::create(path).write("/data", Tensor<float>({3}));
    CHECK_THROWS_WITH(list_workloads(path), Catch::Contains("has no /workloads group"));
  }
  SECTION("another schema version") {
    const std::string path = write_valid_file(dir, inputs);
    h5::File::open(path, h5::Mode::read_write).set_attr("/", "schema_version", kSchemaVersion + 1);
    CHECK_THROWS_WITH(load_file_workload(path, "w0"),
                      Catch::Contains("schema_version " + std::to_string(kSchemaVersion + 1)));
  }
  SECTION("an unknown workload id lists the known ones") {
    const std::string path = write_valid_file(dir, inputs);
    {
      h5::File file = h5::File::open(path, h5::Mode::read_write);
      write_workload_inputs(file, "w1", inputs, {});
    }
    CHECK_THROWS_WITH(load_file_workload(path, "w9"),
                      Catch::Contains("workload 'w9' is not in") && Catch::Contains("it holds: w0, w1"));
    CHECK_THROWS_WITH(load_file_workloads(path, "w9"), Catch::Contains("it holds: w0, w1"));
  }
  SECTION("a dataset whose shape disagrees with q and v") {
    const std::string path = write_valid_file(dir, inputs);
    replace_dataset(path, "/workloads/w0/inputs/beta", Tensor<float>({2, 36, 4}, 0.5f));
    CHECK_THROWS_WITH(load_file_workload(path, "w0"),
                      Catch::Contains("'/workloads/w0/inputs/beta'") && Catch::Contains("[2, 36, 4]") &&
                          Catch::Contains("[B, T, HV] = [2, 37, 4] is expected"));
  }
  SECTION("v with another number of tokens") {
    const std::string path = write_valid_file(dir, inputs);
    replace_dataset(path, "/workloads/w0/inputs/v", Tensor<float>({2, 40, 4, 6}));
    CHECK_THROWS_WITH(load_file_workload(path, "w0"),
                      Catch::Contains("'/workloads/w0/inputs/v'") && Catch::Contains("[2, 37, 4, 6]"));
  }
  SECTION("an initial state of the wrong size") {
    const std::string path = write_valid_file(dir, inputs);
    replace_dataset(path, "/workloads/w0/inputs/initial_state", Tensor<float>({2, 4, 6, 8}));
    CHECK_THROWS_WITH(load_file_workload(path, "w0"),
                      Catch::Contains("initial_state") && Catch::Contains("[B, HV, K, V] = [2, 4, 8, 6]"));
  }
  SECTION("a dataset of the wrong rank") {
    const std::string path = write_valid_file(dir, inputs);
    replace_dataset(path, "/workloads/w0/inputs/g", Tensor<float>({2, 37}));
    CHECK_THROWS_WITH(load_file_workload(path, "w0"),
                      Catch::Contains("'/workloads/w0/inputs/g'") && Catch::Contains("must have rank 3"));
  }
  SECTION("integer data") {
    const std::string path = write_valid_file(dir, inputs);
    {
      h5::File file = h5::File::open(path, h5::Mode::read_write);
      file.remove("/workloads/w0/inputs/k");
      file.write("/workloads/w0/inputs/k", Tensor<int32_t>({2, 37, 2, 8}, 1));
    }
    CHECK_THROWS_WITH(load_file_workload(path, "w0"),
                      Catch::Contains("'/workloads/w0/inputs/k'") && Catch::Contains("floating-point"));
  }
  SECTION("a missing dataset") {
    const std::string path = write_valid_file(dir, inputs);
    h5::File::open(path, h5::Mode::read_write).remove("/workloads/w0/inputs/beta");
    CHECK_THROWS_WITH(
        load_file_workload(path, "w0"),
        Catch::Contains("missing dataset '/workloads/w0/inputs/beta'") && Catch::Contains("[B, T, HV]"));
  }
  SECTION("HV not a multiple of H") {
    const std::string path = write_valid_file(dir, inputs);
    {
      h5::File file = h5::File::open(path, h5::Mode::read_write);
      file.remove("/workloads/w0");
      file.write("/workloads/w0/inputs/q", Tensor<float>({1, 4, 2, 8}));
      file.write("/workloads/w0/inputs/k", Tensor<float>({1, 4, 2, 8}));
      file.write("/workloads/w0/inputs/v", Tensor<float>({1, 4, 3, 6}));
      file.write("/workloads/w0/inputs/g", Tensor<float>({1, 4, 3}));
      file.write("/workloads/w0/inputs/beta", Tensor<float>({1, 4, 3}));
    }
    CHECK_THROWS_WITH(load_file_workload(path, "w0"),
                      Catch::Contains("workload 'w0'") && Catch::Contains("must be a multiple of qk_heads"));
  }
  SECTION("values that break the model (g > 0, NaN)") {
    const std::string path = write_valid_file(dir, inputs);
    replace_dataset(path, "/workloads/w0/inputs/g", Tensor<float>({2, 37, 4}, 0.5f));
    CHECK_THROWS_WITH(load_file_workload(path, "w0"), Catch::Contains("workload 'w0' in '" + path + "'") &&
                                                          Catch::Contains("g must be <= 0"));
    replace_dataset(path, "/workloads/w0/inputs/g", Tensor<float>({2, 37, 4}, std::nanf("")));
    CHECK_THROWS_WITH(load_file_workload(path, "w0"), Catch::Contains("non-finite"));
  }
  SECTION("the writer refuses bad ids, invalid inputs and duplicates") {
    const std::string path = write_valid_file(dir, inputs);
    h5::File file = h5::File::open(path, h5::Mode::read_write);
    CHECK_THROWS_WITH(write_workload_inputs(file, "a/b", inputs, {}), Catch::Contains("without '/'"));
    CHECK_THROWS_WITH(write_workload_inputs(file, "w0", inputs, {}), Catch::Contains("exists"));
    Inputs<double> bad = inputs;
    bad.beta[0] = 1.5;
    CHECK_THROWS_WITH(write_workload_inputs(file, "w2", bad, {}), Catch::Contains("beta"));
    CHECK_FALSE(file.exists("/workloads/w2"));
  }
}
