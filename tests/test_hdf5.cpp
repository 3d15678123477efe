// The HDF5 plumbing (core/hdf5_file.h): round trips of every dtype and attribute type, compression, type
// conversion, groups, copies, atomic writes, and the errors for missing, foreign and corrupt files.
#include <hdf5.h>

#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include "support/scratch_dir.h"

#include "core/error.h"
#include "core/hdf5_file.h"

namespace fs = std::filesystem;
using sgdn::Tensor;
using namespace sgdn::h5;

using sgdn::test::ScratchDir;

namespace {

// Random values spanning the type, with its extremes (and, for floats, NaN, infinities, -0 and denormals)
// placed at the start so every round trip covers them.
template <class T>
Tensor<T> random_tensor(std::vector<int64_t> dims, uint64_t seed) {
  Tensor<T> tensor(std::move(dims));
  std::mt19937_64 rng(seed);
  if constexpr (std::is_floating_point_v<T>) {
    std::normal_distribution<double> normal;
    for (T& x : tensor.values()) x = static_cast<T>(normal(rng) * 100.0);
    const T specials[] = {std::numeric_limits<T>::max(),        std::numeric_limits<T>::lowest(),
                          std::numeric_limits<T>::denorm_min(), T(-0.0),
                          std::numeric_limits<T>::infinity(),   std::numeric_limits<T>::quiet_NaN()};
    for (size_t i = 0; i < std::size(specials) && i < tensor.values().size(); ++i)
      tensor.values()[i] = specials[i];
  } else {
    std::uniform_int_distribution<int64_t> uniform(std::numeric_limits<T>::min(),
                                                   std::numeric_limits<T>::max());
    for (T& x : tensor.values()) x = static_cast<T>(uniform(rng));
    if (tensor.size() >= 2) {
      tensor[0] = std::numeric_limits<T>::min();
      tensor[1] = std::numeric_limits<T>::max();
    }
  }
  return tensor;
}

template <class T>
bool bit_equal(const Tensor<T>& a, const Tensor<T>& b) {
  return a.dims() == b.dims() && a.values().size() == b.values().size() &&
         (a.values().empty() || std::memcmp(a.data(), b.data(), a.values().size() * sizeof(T)) == 0);
}

// How a dataset is stored, read with the C API: its filters and whether it is chunked.
struct Storage {
  bool chunked = false;
  std::vector<H5Z_filter_t> filters;
};
Storage storage_of(const std::string& file_path, const std::string& dataset_path) {
  const hid_t file = H5Fopen(file_path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  const hid_t dataset = H5Dopen2(file, dataset_path.c_str(), H5P_DEFAULT);
  const hid_t dcpl = H5Dget_create_plist(dataset);
  Storage storage;
  storage.chunked = H5Pget_layout(dcpl) == H5D_CHUNKED;
  for (int i = 0; i < H5Pget_nfilters(dcpl); ++i) {
    unsigned flags = 0, config = 0;
    size_t count = 0;
    storage.filters.push_back(
        H5Pget_filter2(dcpl, static_cast<unsigned>(i), &flags, &count, nullptr, 0, nullptr, &config));
  }
  H5Pclose(dcpl);
  H5Dclose(dataset);
  H5Fclose(file);
  return storage;
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace

TEMPLATE_TEST_CASE("hdf5: every dtype round-trips bit-exact, small and gzip-compressed", "[hdf5]", float,
                   double, uint8_t, int32_t, int64_t) {
  ScratchDir dir;
  const std::string path = dir.file("dtypes.h5");
  // 37 x 3 is stored contiguously; 5 x 64 x 129 (>= kCompressMinBytes, odd sizes so chunks are ragged) is
  // chunked with shuffle + gzip; a scalar and an empty tensor are edge cases of the dataspace.
  const auto small = random_tensor<TestType>({37, 3}, 1);
  const auto large = random_tensor<TestType>({5, 64, 129}, 2);
  Tensor<TestType> scalar({}, TestType(7));
  Tensor<TestType> empty({0, 4});
  {
    File file = File::create(path);
    file.write("/small", small);
    file.write("/nested/deeper/large", large);
    file.write("scalar", scalar);
    file.write("/empty", empty);
    file.close();
  }
  REQUIRE(static_cast<size_t>(large.size()) * sizeof(TestType) >= kCompressMinBytes);
  const Storage large_storage = storage_of(path, "/nested/deeper/large");
  CHECK(large_storage.chunked);
  CHECK(large_storage.filters == std::vector<H5Z_filter_t>{H5Z_FILTER_SHUFFLE, H5Z_FILTER_DEFLATE});
  CHECK_FALSE(storage_of(path, "/small").chunked);

  const File file = File::open(path);
  CHECK(bit_equal(file.read<TestType>("/small"), small));
  CHECK(bit_equal(file.read<TestType>("/nested/deeper/large", 3), large));
  const auto scalar_back = file.read<TestType>("/scalar");
  CHECK(scalar_back.dims().empty());
  CHECK(scalar_back.size() == 1);
  CHECK(scalar_back[0] == TestType(7));
  const auto empty_back = file.read<TestType>("/empty");
  CHECK(empty_back.dims() == std::vector<int64_t>{0, 4});
  CHECK(empty_back.size() == 0);

  const DatasetInfo info = file.dataset_info("/nested/deeper/large");
  CHECK(info.dims == std::vector<int64_t>{5, 64, 129});
  CHECK(info.element_bytes == sizeof(TestType));
  CHECK(info.element_class ==
        (std::is_floating_point_v<TestType> ? ElementClass::floating : ElementClass::integer));
}

TEST_CASE("hdf5: reading converts between numeric types and refuses lossy ones", "[hdf5]") {
  ScratchDir dir;
  const std::string path = dir.file("convert.h5");
  const auto floats = random_tensor<float>({3, 50, 40}, 3);
  Tensor<double> doubles({3}, 0.0);
  doubles[0] = 0.1;
  doubles[1] = -2.5;
  doubles[2] = 1e300;  // beyond float's range
  Tensor<int64_t> big_ints({2}, 0);
  big_ints[0] = 5;
  big_ints[1] = int64_t{1} << 40;  // beyond int32's range
  Tensor<uint8_t> bytes({4}, uint8_t{200});
  {
    File file = File::create(path);
    file.write("/floats", floats);
    file.write("/doubles", doubles);
    file.write("/big_ints", big_ints);
    file.write("/bytes", bytes);
  }
  const File file = File::open(path);

  SECTION("float32 data into double is exact, element by element") {
    const Tensor<double> widened = file.read<double>("/floats");
    REQUIRE(widened.dims() == floats.dims());
    for (int64_t i = 0; i < floats.size(); ++i) {
      if (std::isnan(floats[i])) {
        CHECK(std::isnan(widened[i]));
      } else {
        CHECK(widened[i] == static_cast<double>(floats[i]));
      }
    }
  }
  SECTION("integers into floating tensors and into wider integers") {
    const Tensor<double> as_double = file.read<double>("/bytes");
    CHECK(as_double[3] == 200.0);
    const Tensor<int32_t> as_int32 = file.read<int32_t>("/bytes");
    CHECK(as_int32[0] == 200);
  }
  SECTION("floating data into an integer tensor is refused") {
    CHECK_THROWS_WITH(file.read<int32_t>("/floats"),
                      Catch::Contains("'/floats'") && Catch::Contains("floating"));
  }
  SECTION("a value out of the target range is an error, not a silent clip") {
    CHECK_THROWS_WITH(file.read<int32_t>("/big_ints"),
                      Catch::Contains("'/big_ints'") && Catch::Contains("out of its range"));
    CHECK_THROWS_WITH(file.read<float>("/doubles"), Catch::Contains("out of its range"));
    CHECK_THROWS_AS(file.read<uint8_t>("/big_ints"), sgdn::Error);
  }
}

TEST_CASE("hdf5: a missing dataset or an unexpected rank is a clear error", "[hdf5]") {
  ScratchDir dir;
  const std::string path = dir.file("ranks.h5");
  {
    File file = File::create(path);
    file.write("/group/x", Tensor<float>({2, 3}, 1.0f));
    file.create_group("/group/sub");
  }
  const File file = File::open(path);
  CHECK_THROWS_WITH(file.read<float>("/group/missing"),
                    Catch::Contains("missing dataset '/group/missing'") && Catch::Contains(path));
  CHECK_THROWS_WITH(file.read<float>("/nothing/here/x"), Catch::Contains("missing dataset"));
  CHECK_THROWS_WITH(file.read<float>("/group/x", 4), Catch::Contains("rank 2") && Catch::Contains("[2, 3]") &&
                                                         Catch::Contains("expected rank 4"));
  CHECK_THROWS_WITH(file.read<float>("/group/sub"), Catch::Contains("is not a dataset"));
}

TEST_CASE("hdf5: groups, existence, listing and removal", "[hdf5]") {
  ScratchDir dir;
  const std::string path = dir.file("groups.h5");
  File file = File::create(path);
  file.create_group("/a/b/c");
  file.create_group("/a/b/c");  // an existing group is fine
  file.create_group("a/zeta");
  file.write("/a/data", Tensor<int32_t>({2}, 1));

  CHECK(file.exists("/"));
  CHECK(file.exists("/a/b/c"));
  CHECK(file.exists("a/b"));
  CHECK_FALSE(file.exists("/a/b/c/d"));
  CHECK_FALSE(file.exists("/missing/deeper/path"));
  CHECK(file.is_group("/a/b"));
  CHECK_FALSE(file.is_group("/a/data"));
  CHECK(file.is_dataset("/a/data"));
  CHECK_FALSE(file.is_dataset("/a"));
  CHECK(file.children("/a") == std::vector<std::string>{"b", "data", "zeta"});
  CHECK(file.children("/") == std::vector<std::string>{"a"});
  CHECK(file.children("/a/b/c").empty());
  CHECK_THROWS_WITH(file.children("/nope"), Catch::Contains("no group '/nope'"));
  CHECK_THROWS_WITH(file.create_group("/a/data"), Catch::Contains("a dataset of that name exists"));
  CHECK_THROWS_WITH(file.write("/a/data", Tensor<int32_t>({1}, 0)),
                    Catch::Contains("an object of that name exists"));

  file.remove("/a/b");
  CHECK_FALSE(file.exists("/a/b/c"));
  CHECK(file.children("/a") == std::vector<std::string>{"data", "zeta"});
  CHECK_THROWS_WITH(file.remove("/a/b"), Catch::Contains("no such object"));
}

TEST_CASE("hdf5: attributes of every type round-trip and list as lossless text", "[hdf5]") {
  ScratchDir dir;
  const std::string path = dir.file("attrs.h5");
  const std::string utf8 = "Gated DeltaNet \xce\xb2 \xe2\x89\xa4 1";  // β ≤ 1
  {
    File file = File::create(path);
    file.create_group("/runs/r1");
    file.write("/runs/r1/o", Tensor<float>({2, 2}, 0.5f));
    file.set_attr("/", "schema_version", int64_t{1});
    file.set_attr("/runs/r1", "solver.name", "block_adjacent");
    file.set_attr("/runs/r1", "text", utf8);
    file.set_attr("/runs/r1", "empty", std::string());
    file.set_attr("/runs/r1", "rho", 0.29);
    file.set_attr("/runs/r1", "tiny", 1e-300);
    file.set_attr("/runs/r1", "third", 1.0 / 3.0);
    file.set_attr("/runs/r1", "chunk", 64);  // an int stores as int64
    file.set_attr("/runs/r1", "min", std::numeric_limits<int64_t>::min());
    file.set_attr("/runs/r1", "max", std::numeric_limits<int64_t>::max());
    file.set_attr("/runs/r1", "single", 0.1f);  // a float stores as float64
    file.set_attrs("/runs/r1/o", {{"units", std::string("none")}, {"count", int64_t{4}}, {"mean", 0.5}});
    // Setting again replaces the value, also with another type.
    file.set_attr("/runs/r1", "chunk", 32);
    file.set_attr("/runs/r1/o", "units", 2.0);
  }
  const File file = File::open(path);
  CHECK(file.attr_int("/", "schema_version") == 1);
  CHECK(file.attr_string("/runs/r1", "solver.name") == "block_adjacent");
  CHECK(file.attr_string("/runs/r1", "text") == utf8);
  CHECK(file.attr_string("/runs/r1", "empty").empty());
  CHECK(file.attr_double("/runs/r1", "rho") == 0.29);
  CHECK(file.attr_double("/runs/r1", "tiny") == 1e-300);
  CHECK(file.attr_double("/runs/r1", "third") == 1.0 / 3.0);
  CHECK(file.attr_int("/runs/r1", "chunk") == 32);
  CHECK(file.attr_double("/runs/r1", "chunk") == 32.0);
  CHECK(file.attr_int("/runs/r1", "min") == std::numeric_limits<int64_t>::min());
  CHECK(file.attr_int("/runs/r1", "max") == std::numeric_limits<int64_t>::max());
  CHECK(file.attr_double("/runs/r1", "single") == static_cast<double>(0.1f));
  CHECK(file.attr_double("/runs/r1/o", "units") == 2.0);
  CHECK(file.has_attr("/runs/r1", "rho"));
  CHECK_FALSE(file.has_attr("/runs/r1", "nope"));
  CHECK_FALSE(file.has_attr("/runs/missing", "rho"));

  const std::map<std::string, std::string> listed = file.attrs("/runs/r1");
  const std::map<std::string, std::string> expected = {{"solver.name", "block_adjacent"},
                                                       {"text", utf8},
                                                       {"empty", ""},
                                                       {"rho", "0.29"},
                                                       {"tiny", "1e-300"},
                                                       {"third", "0.3333333333333333"},
                                                       {"chunk", "32"},
                                                       {"min", "-9223372036854775808"},
                                                       {"max", "9223372036854775807"},
                                                       {"single", "0.10000000149011612"}};
  CHECK(listed == expected);
  CHECK(file.attrs("/runs/r1/o") ==
        std::map<std::string, std::string>{{"count", "4"}, {"mean", "0.5"}, {"units", "2"}});
  CHECK(file.attrs("/runs").empty());

  CHECK_THROWS_WITH(file.attr_string("/runs/r1", "rho"), Catch::Contains("'rho'") &&
                                                             Catch::Contains("floating-point") &&
                                                             Catch::Contains("a string"));
  CHECK_THROWS_WITH(file.attr_int("/runs/r1", "rho"), Catch::Contains("expected an integer"));
  CHECK_THROWS_WITH(file.attr_double("/runs/r1", "text"), Catch::Contains("expected a number"));
  CHECK_THROWS_WITH(file.attr_double("/runs/r1", "absent"),
                    Catch::Contains("missing attribute 'absent' of '/runs/r1'"));
  CHECK_THROWS_WITH(file.attrs("/runs/r2"), Catch::Contains("no such object"));
}

TEST_CASE("hdf5: attributes written by other tools (fixed-length strings, arrays, bool enums) are read",
          "[hdf5]") {
  ScratchDir dir;
  const std::string path = dir.file("foreign.h5");
  {
    // Written with the C API the way numpy/h5py store np.bytes_, arrays and bool.
    const hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    const hid_t scalar = H5Screate(H5S_SCALAR);
    const hid_t fixed = H5Tcopy(H5T_C_S1);
    H5Tset_size(fixed, 8);
    H5Tset_strpad(fixed, H5T_STR_NULLPAD);
    const hid_t fixed_attr = H5Acreate2(file, "fixed", fixed, scalar, H5P_DEFAULT, H5P_DEFAULT);
    const char fixed_text[8] = {'c', 'u', 'd', 'a', 0, 0, 0, 0};
    H5Awrite(fixed_attr, fixed, fixed_text);
    const hsize_t three = 3;
    const hid_t vector_space = H5Screate_simple(1, &three, nullptr);
    const hid_t array_attr = H5Acreate2(file, "array", H5T_STD_I32LE, vector_space, H5P_DEFAULT, H5P_DEFAULT);
    const int32_t array_values[3] = {1, -2, 3};
    H5Awrite(array_attr, H5T_NATIVE_INT32, array_values);
    const hid_t boolean = H5Tenum_create(H5T_NATIVE_INT8);
    const int8_t false_value = 0, true_value = 1;
    H5Tenum_insert(boolean, "FALSE", &false_value);
    H5Tenum_insert(boolean, "TRUE", &true_value);
    const hid_t bool_attr = H5Acreate2(file, "flag", boolean, scalar, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(bool_attr, boolean, &true_value);
    const hid_t float_attr = H5Acreate2(file, "f32", H5T_IEEE_F32LE, scalar, H5P_DEFAULT, H5P_DEFAULT);
    const float tenth = 0.1f;
    H5Awrite(float_attr, H5T_NATIVE_FLOAT, &tenth);
    for (hid_t id : {fixed_attr, array_attr, bool_attr, float_attr}) H5Aclose(id);
    H5Tclose(boolean);
    H5Tclose(fixed);
    H5Sclose(vector_space);
    H5Sclose(scalar);
    H5Fclose(file);
  }
  const File file = File::open(path);
  CHECK(file.attr_string("/", "fixed") == "cuda");
  CHECK(file.attr_double("/", "f32") == static_cast<double>(0.1f));
  CHECK(file.attrs("/") == std::map<std::string, std::string>{
                               {"array", "[1, -2, 3]"}, {"f32", "0.1"}, {"fixed", "cuda"}, {"flag", "TRUE"}});
  CHECK_THROWS_WITH(file.attr_int("/", "array"), Catch::Contains("holds 3 values"));
}

TEST_CASE("hdf5: missing, foreign, truncated and corrupt files give clear errors", "[hdf5]") {
  ScratchDir dir;

  SECTION("a missing file") {
    const std::string path = dir.file("absent.h5");
    CHECK_THROWS_WITH(File::open(path), Catch::Contains("cannot open '" + path + "': no such file"));
  }
  SECTION("a directory") {
    CHECK_THROWS_WITH(File::open(dir.path.string()), Catch::Contains("is a directory"));
  }
  SECTION("garbage bytes") {
    const std::string path = dir.file("garbage.h5");
    write_bytes(path, std::string(4096, '\x5a') + "this is not an HDF5 file");
    CHECK_THROWS_WITH(File::open(path),
                      Catch::Contains("cannot open '" + path + "': not an HDF5 file or unreadable"));
    CHECK_THROWS_AS(File::open(path, Mode::read_write), sgdn::Error);
  }
  SECTION("an empty file") {
    const std::string path = dir.file("empty.h5");
    write_bytes(path, "");
    CHECK_THROWS_WITH(File::open(path), Catch::Contains("not an HDF5 file"));
  }
  SECTION("a truncated file") {
    const std::string path = dir.file("truncated.h5");
    {
      File file = File::create(path);
      file.write("/x", random_tensor<double>({64, 64}, 4));
    }
    const std::string bytes = read_bytes(path);
    write_bytes(path, bytes.substr(0, bytes.size() / 2));
    CHECK_THROWS_WITH(File::open(path), Catch::Contains("cannot open '" + path + "'"));
  }
  SECTION("a corrupt compressed chunk") {
    const std::string path = dir.file("corrupt.h5");
    {
      File file = File::create(path);
      file.write("/x", random_tensor<float>({32, 512}, 5));
    }
    // Find the first chunk on disk and overwrite it, so inflate fails when it is read.
    haddr_t chunk_address = 0;
    hsize_t chunk_bytes = 0;
    {
      const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
      const hid_t dataset = H5Dopen2(file, "/x", H5P_DEFAULT);
      const hid_t space = H5Dget_space(dataset);
      hsize_t offset[2];
      unsigned filter_mask = 0;
      REQUIRE(H5Dget_chunk_info(dataset, space, 0, offset, &filter_mask, &chunk_address, &chunk_bytes) >= 0);
      H5Sclose(space);
      H5Dclose(dataset);
      H5Fclose(file);
    }
    std::string bytes = read_bytes(path);
    REQUIRE(chunk_address + chunk_bytes <= bytes.size());
    for (hsize_t i = 0; i < chunk_bytes; ++i) bytes[chunk_address + i] = static_cast<char>(0xA5 ^ (i * 31));
    write_bytes(path, bytes);
    const File file = File::open(path);
    CHECK_THROWS_WITH(file.read<float>("/x"), Catch::Contains("cannot read dataset '/x'") &&
                                                  Catch::Contains("corrupt or unreadable"));
  }
  SECTION("creating in a missing directory") {
    const std::string path = dir.file("no/such/dir/x.h5");
    CHECK_THROWS_WITH(File::create(path), Catch::Contains("cannot create '" + path + "'"));
  }
  SECTION("writing to a file opened read-only") {
    const std::string path = dir.file("readonly.h5");
    File::create(path).close();
    File file = File::open(path, Mode::read_only);
    CHECK_THROWS_WITH(file.create_group("/g"), Catch::Contains("is open read-only"));
    CHECK_THROWS_WITH(file.write("/x", Tensor<float>({1})), Catch::Contains("is open read-only"));
    CHECK_THROWS_WITH(file.set_attr("/", "a", 1.0), Catch::Contains("is open read-only"));
  }
}

TEST_CASE("hdf5: copy a group with its datasets and attributes to another file", "[hdf5]") {
  ScratchDir dir;
  const std::string part_path = dir.file("part.h5"), merged_path = dir.file("merged.h5");
  const auto mask = random_tensor<uint8_t>({2, 4, 9}, 6);
  const auto outputs = random_tensor<float>({1, 128, 4, 32}, 7);
  {
    File part = File::create(part_path);
    part.create_group("/runs/r7");
    part.set_attr("/runs/r7", "selector.rho", 0.5);
    part.set_attr("/runs/r7", "workload", "w0");
    part.write("/runs/r7/events/mask", mask);
    part.write("/runs/r7/outputs/o", outputs);
  }
  {
    const File part = File::open(part_path);
    File merged = File::create(merged_path);
    merged.copy_from(part, "/runs/r7", "/runs/r7");
    merged.copy_from(part, "/runs/r7/events", "/elsewhere/deep/events");
    CHECK_THROWS_WITH(merged.copy_from(part, "/runs/r7", "/runs/r7"),
                      Catch::Contains("an object of that name exists"));
    CHECK_THROWS_WITH(merged.copy_from(part, "/runs/r8", "/runs/r8"), Catch::Contains("no such object"));
  }
  const File merged = File::open(merged_path);
  CHECK(merged.attrs("/runs/r7") ==
        std::map<std::string, std::string>{{"selector.rho", "0.5"}, {"workload", "w0"}});
  CHECK(bit_equal(merged.read<uint8_t>("/runs/r7/events/mask"), mask));
  CHECK(bit_equal(merged.read<float>("/runs/r7/outputs/o"), outputs));
  CHECK(bit_equal(merged.read<uint8_t>("/elsewhere/deep/events/mask"), mask));
  CHECK(storage_of(merged_path, "/runs/r7/outputs/o").filters ==
        std::vector<H5Z_filter_t>{H5Z_FILTER_SHUFFLE, H5Z_FILTER_DEFLATE});
}

TEST_CASE("hdf5: dimension scales name the axes, also in a copy to another file", "[hdf5]") {
  ScratchDir dir;
  const std::string part_path = dir.file("part.h5"), merged_path = dir.file("merged.h5");
  {
    File part = File::create(part_path);
    part.write("/runs/r1/metrics/per_head", random_tensor<double>({4}, 1));
    part.write("/runs/r1/metrics/per_chunk", random_tensor<float>({2, 4, 9}, 2));
    part.set_dimensions("/runs/r1/metrics/per_head", {"head"});
    part.set_dimensions("/runs/r1/metrics/per_chunk", {"batch", "head", "chunk"});
    CHECK(part.dimensions("/runs/r1/metrics/per_chunk") ==
          std::vector<std::string>{"batch", "head", "chunk"});
    CHECK(part.is_dimension_scale("/runs/r1/metrics/head"));
    CHECK_FALSE(part.is_dimension_scale("/runs/r1/metrics/per_head"));
    CHECK(part.read<int32_t>("/runs/r1/metrics/chunk").values() ==
          std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7, 8});
    part.write("/runs/r1/metrics/other", random_tensor<double>({5}, 3));
    CHECK_THROWS_WITH(part.set_dimensions("/runs/r1/metrics/other", {"head"}), Catch::Contains("length 5"));
    CHECK_THROWS_WITH(part.set_dimensions("/runs/r1/metrics/other", {"a", "b"}), Catch::Contains("rank 1"));
  }
  {
    const File part = File::open(part_path);
    File merged = File::create(merged_path);
    merged.create_group("/other");  // the copy lands at other addresses than in the part
    merged.write("/other/padding", random_tensor<float>({1000}, 4));
    merged.copy_from(part, "/runs/r1", "/runs/r1");
    // A dataset copied alone brings the scales it uses.
    merged.copy_from(part, "/runs/r1/metrics/per_chunk", "/single/per_chunk");
  }
  const File merged = File::open(merged_path);
  CHECK(merged.dimensions("/runs/r1/metrics/per_chunk") ==
        std::vector<std::string>{"batch", "head", "chunk"});
  CHECK(merged.dimensions("/runs/r1/metrics/per_head") == std::vector<std::string>{"head"});
  CHECK(merged.dimensions("/single/per_chunk") == std::vector<std::string>{"batch", "head", "chunk"});
  CHECK(merged.is_dimension_scale("/single/chunk"));
}

TEST_CASE("hdf5: config text becomes numbers, arrays of numbers and 0/1 booleans", "[hdf5]") {
  CHECK(std::get<int64_t>(attr_value_from_text("64")) == 64);
  CHECK(std::get<double>(attr_value_from_text("0.29")) == 0.29);
  CHECK(std::get<int64_t>(attr_value_from_text("true")) == 1);
  CHECK(std::get<int64_t>(attr_value_from_text("false")) == 0);
  CHECK(std::get<std::vector<int64_t>>(attr_value_from_text("10 50 90")) == std::vector<int64_t>{10, 50, 90});
  CHECK(std::get<std::vector<double>>(attr_value_from_text("1 0.5")) == std::vector<double>{1, 0.5});
  CHECK(std::get<std::string>(attr_value_from_text("head_budget")) == "head_budget");
  CHECK(std::get<std::string>(attr_value_from_text("10 fifty")) == "10 fifty");
  ScratchDir dir;
  File file = File::create(dir.file("a.h5"));
  file.create_group("/g");
  file.set_attr("/g", "depths", attr_value_from_text("10 50 90"));
  file.set_attr("/g", "decay", attr_value_from_text("0.25 2"));
  CHECK(file.attrs("/g") ==
        std::map<std::string, std::string>{{"decay", "[0.25, 2]"}, {"depths", "[10, 50, 90]"}});
}

TEST_CASE("hdf5: atomic writes appear complete or not at all", "[hdf5]") {
  ScratchDir dir;
  const std::string path = dir.file("experiment.h5");
  const auto values = random_tensor<double>({10, 10}, 8);

  SECTION("a writer that returns normally leaves only the final file") {
    write_atomically(path, [&](File& file) {
      CHECK_FALSE(fs::exists(path));  // nothing at the final name while writing
      file.write("/x", values);
      file.set_attr("/", "schema_version", int64_t{1});
    });
    CHECK(dir.entries() == std::vector<std::string>{"experiment.h5"});
    CHECK(bit_equal(File::open(path).read<double>("/x"), values));
    // The result has the permissions of a plain create, not the private mode of a temporary file.
    File::create(dir.file("plain.h5")).close();
    CHECK(fs::status(path).permissions() == fs::status(dir.file("plain.h5")).permissions());
  }
  SECTION("a writer that throws leaves no file and no temporary") {
    CHECK_THROWS_WITH(write_atomically(path,
                                       [&](File& file) {
                                         file.write("/x", values);
                                         sgdn::fail("the run diverged");
                                       }),
                      "the run diverged");
    CHECK(dir.entries().empty());
  }
  SECTION("a writer that throws leaves an existing file untouched") {
    write_atomically(path, [&](File& file) { file.write("/old", values); });
    const std::string before = read_bytes(path);
    CHECK_THROWS_AS(write_atomically(path,
                                     [&](File& file) {
                                       file.write("/new", values);
                                       throw std::runtime_error("interrupted");
                                     }),
                    std::runtime_error);
    CHECK(read_bytes(path) == before);
    CHECK(dir.entries() == std::vector<std::string>{"experiment.h5"});
  }
  SECTION("an AtomicFile can start from the existing file to add to it") {
    write_atomically(path, [&](File& file) { file.write("/runs/r1/x", values); });
    {
      AtomicFile update(path, /*start_from_existing=*/true);
      CHECK(update.temp_path() != path);
      update.file().write("/runs/r2/x", values);
      CHECK_FALSE(File::open(path).exists("/runs/r2"));  // not visible before commit
      update.commit();
    }
    const File file = File::open(path);
    CHECK(file.children("/runs") == std::vector<std::string>{"r1", "r2"});
    CHECK(dir.entries() == std::vector<std::string>{"experiment.h5"});
  }
  SECTION("an AtomicFile destroyed without commit removes its temporary file") {
    {
      AtomicFile abandoned(path);
      abandoned.file().write("/x", values);
      CHECK(fs::exists(abandoned.temp_path()));
    }
    CHECK(dir.entries().empty());
  }
}

TEST_CASE("hdf5: numbers format in the shortest text that reads back exactly", "[hdf5]") {
  for (double value : {0.0, 1.0, -2.5, 0.1, 0.29, 1.0 / 3.0, 1e-300, 6.02214076e23, 4.9e-324,
                       std::numeric_limits<double>::max()}) {
    const std::string text = format_lossless(value);
    CHECK(std::strtod(text.c_str(), nullptr) == value);
  }
  CHECK(format_lossless(0.29) == "0.29");
  CHECK(format_lossless(1e-300) == "1e-300");
  CHECK(format_lossless(64.0) == "64");
  CHECK(format_lossless(0.1f) == "0.1");
  CHECK(format_lossless(std::numeric_limits<double>::infinity()) == "inf");
  CHECK(format_lossless(std::nan("")) == "nan");
}
