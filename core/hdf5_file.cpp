#include "core/hdf5_file.h"

#include "core/params.h"

#include <fcntl.h>
#include <hdf5.h>
#include <hdf5_hl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>

#include "core/error.h"

namespace sgdn::h5 {

static_assert(std::is_same_v<hid_t, int64_t>, "hdf5_file.h stores hid_t as int64_t (HDF5 >= 1.10)");

namespace {

// ---------------------------------------------------------------------------------------------------------
// Error handling: HDF5 prints its error stack to stderr by default; we silence it and keep the innermost
// message (the most specific one, e.g. "file signature not found") to append to our own.

void silence_hdf5_errors() {
  // HDF5's own teardown at exit flushes every file still open in the library, among them one whose close
  // failed (a full disk), and crashes on its broken cache. Every File is closed explicitly, so the teardown
  // has nothing to do: skip it. This must precede the library's initialisation, hence the first entry.
  static const bool no_teardown = H5dont_atexit() >= 0;
  (void)no_teardown;
  // The automatic printing is per thread in thread-safe builds, so set it on every entry, not once.
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
}

herr_t keep_innermost(unsigned depth, const H5E_error2_t* entry, void* client_data) {
  if (depth == 0 && entry->desc != nullptr) *static_cast<std::string*>(client_data) = entry->desc;
  return 0;
}

// " (HDF5: <innermost message>)" for the current error stack, then clears it; "" when the stack is empty.
// A failed system call is told by its reason alone (": No space left on device"): HDF5's message for it is
// a line of buffer addresses and offsets.
std::string hdf5_detail() {
  std::string innermost;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, keep_innermost, &innermost);
  H5Eclear2(H5E_DEFAULT);
  const size_t errno_at = innermost.find("errno = ");
  if (errno_at != std::string::npos) {
    const int system_error = std::atoi(innermost.c_str() + errno_at + 8);
    if (system_error > 0) return std::string(": ") + std::strerror(system_error);
  }
  return innermost.empty() ? std::string() : " (HDF5: " + innermost + ")";
}

template <class... Parts>
[[noreturn]] void fail_h5(const Parts&... parts) {
  fail(parts..., hdf5_detail());
}

// Owns one HDF5 identifier and closes it with the matching H5?close function.
class Handle {
 public:
  using Closer = herr_t (*)(hid_t);
  Handle() = default;
  Handle(hid_t id, Closer closer) : id_(id), closer_(closer) {}
  Handle(Handle&& other) noexcept : id_(other.id_), closer_(other.closer_) { other.id_ = -1; }
  Handle& operator=(Handle&& other) noexcept {
    if (this != &other) {
      reset();
      id_ = other.id_;
      closer_ = other.closer_;
      other.id_ = -1;
    }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  ~Handle() { reset(); }

  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  void reset() {
    if (id_ >= 0 && closer_ != nullptr) closer_(id_);
    id_ = -1;
  }

 private:
  hid_t id_ = -1;
  Closer closer_ = nullptr;
};

// Wraps a freshly returned identifier; a negative one is a failure described by `parts`.
template <class... Parts>
Handle checked(hid_t id, Handle::Closer closer, const Parts&... parts) {
  if (id < 0) fail_h5(parts...);
  return Handle(id, closer);
}

template <class... Parts>
void check(herr_t status, const Parts&... parts) {
  if (status < 0) fail_h5(parts...);
}

std::string quoted(const std::string& text) {
  return "'" + text + "'";
}

// Link creation that makes missing parent groups, as `mkdir -p` does.
Handle make_parents_lcpl() {
  Handle lcpl = checked(H5Pcreate(H5P_LINK_CREATE), H5Pclose, "cannot create a link property list");
  check(H5Pset_create_intermediate_group(lcpl.get(), 1), "cannot set intermediate group creation");
  // Link names in UTF-8, as h5py writes them.
  check(H5Pset_char_encoding(lcpl.get(), H5T_CSET_UTF8), "cannot set link name encoding");
  return lcpl;
}

std::vector<std::string> split_path(const std::string& object_path) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= object_path.size()) {
    size_t end = object_path.find('/', start);
    if (end == std::string::npos) end = object_path.size();
    if (end > start) parts.push_back(object_path.substr(start, end - start));
    start = end + 1;
  }
  return parts;
}

// ---------------------------------------------------------------------------------------------------------
// Element types: the type in memory (native) and the type stored in the file (little-endian, fixed).

template <class T>
struct TypeOf;
template <>
struct TypeOf<float> {
  static hid_t memory() { return H5T_NATIVE_FLOAT; }
  static hid_t file() { return H5T_IEEE_F32LE; }
  static constexpr const char* name = "float32";
};
template <>
struct TypeOf<double> {
  static hid_t memory() { return H5T_NATIVE_DOUBLE; }
  static hid_t file() { return H5T_IEEE_F64LE; }
  static constexpr const char* name = "float64";
};
template <>
struct TypeOf<uint8_t> {
  static hid_t memory() { return H5T_NATIVE_UINT8; }
  static hid_t file() { return H5T_STD_U8LE; }
  static constexpr const char* name = "uint8";
};
template <>
struct TypeOf<int32_t> {
  static hid_t memory() { return H5T_NATIVE_INT32; }
  static hid_t file() { return H5T_STD_I32LE; }
  static constexpr const char* name = "int32";
};
template <>
struct TypeOf<int64_t> {
  static hid_t memory() { return H5T_NATIVE_INT64; }
  static hid_t file() { return H5T_STD_I64LE; }
  static constexpr const char* name = "int64";
};

ElementClass element_class_of(hid_t type) {
  switch (H5Tget_class(type)) {
    case H5T_INTEGER:
      return ElementClass::integer;
    case H5T_FLOAT:
      return ElementClass::floating;
    case H5T_STRING:
      return ElementClass::string;
    default:
      return ElementClass::other;
  }
}

const char* element_class_name(ElementClass element_class) {
  switch (element_class) {
    case ElementClass::integer:
      return "integer";
    case ElementClass::floating:
      return "floating-point";
    case ElementClass::string:
      return "string";
    default:
      return "non-numeric";
  }
}

std::vector<int64_t> dims_of(hid_t space, const std::string& what) {
  const int rank = H5Sget_simple_extent_ndims(space);
  if (rank < 0) fail_h5("cannot read the dimensions of ", what);
  std::vector<hsize_t> extent(static_cast<size_t>(rank));
  if (rank > 0)
    check(H5Sget_simple_extent_dims(space, extent.data(), nullptr), "cannot read the dims of ", what);
  return std::vector<int64_t>(extent.begin(), extent.end());
}

// Chunk shape for a compressed dataset: whole trailing axes, the leading axes halved until a chunk holds at
// most kTargetChunkBytes. That keeps a chunk a contiguous row-major block (reading one batch element or one
// head touches few chunks) and below HDF5's default 1 MiB chunk cache.
std::vector<hsize_t> chunk_dims_for(const std::vector<int64_t>& dims, size_t element_bytes) {
  constexpr size_t kTargetChunkBytes = 512 * 1024;
  std::vector<hsize_t> chunk(dims.begin(), dims.end());
  auto chunk_bytes = [&] {
    size_t bytes = element_bytes;
    for (hsize_t extent : chunk) bytes *= static_cast<size_t>(extent);
    return bytes;
  };
  for (size_t axis = 0; axis < chunk.size(); ++axis) {
    while (chunk_bytes() > kTargetChunkBytes && chunk[axis] > 1) chunk[axis] = (chunk[axis] + 1) / 2;
  }
  return chunk;
}

// Conversion exceptions while reading: a value out of the requested type's range aborts the read (HDF5
// would otherwise clip it silently); the flag lets the caller say why the read failed.
H5T_conv_ret_t abort_on_overflow(H5T_conv_except_t kind, hid_t, hid_t, void*, void*, void* client_data) {
  if (kind == H5T_CONV_EXCEPT_RANGE_HI || kind == H5T_CONV_EXCEPT_RANGE_LOW) {
    *static_cast<bool*>(client_data) = true;
    return H5T_CONV_ABORT;
  }
  return H5T_CONV_UNHANDLED;  // infinities, NaN and precision loss follow HDF5's defaults
}

// ---------------------------------------------------------------------------------------------------------
// Attributes.

struct AttrData {
  ElementClass element_class = ElementClass::other;
  std::vector<std::string> texts;  // every element formatted as text
  std::vector<double> numbers;     // every element of an integer or floating attribute, as a double
  std::vector<int64_t> integers;   // every element of an integer attribute
  bool integer_overflow = false;   // an unsigned value above INT64_MAX
  int64_t count = 0;
  bool scalar = true;  // a scalar dataspace or one element
};

void read_string_attr_elements(hid_t attr, hid_t file_type, hid_t space, int64_t count,
                               std::vector<std::string>& out, const std::string& what) {
  const H5T_cset_t cset = H5Tget_cset(file_type);
  if (H5Tis_variable_str(file_type) > 0) {
    Handle memory_type = checked(H5Tcopy(H5T_C_S1), H5Tclose, "cannot copy a string type");
    check(H5Tset_size(memory_type.get(), H5T_VARIABLE), "cannot make a variable-length string type");
    check(H5Tset_cset(memory_type.get(), cset), "cannot set a string character set");
    std::vector<char*> pointers(static_cast<size_t>(count), nullptr);
    check(H5Aread(attr, memory_type.get(), pointers.data()), "cannot read ", what);
    for (char* text : pointers) out.emplace_back(text != nullptr ? text : "");
#if H5_VERSION_GE(1, 12, 0)
    H5Treclaim(memory_type.get(), space, H5P_DEFAULT, pointers.data());
#else
    H5Dvlen_reclaim(memory_type.get(), space, H5P_DEFAULT, pointers.data());
#endif
    return;
  }
  // Fixed length: each element is `size` bytes, padded with NULs or spaces (or NUL-terminated).
  const size_t size = H5Tget_size(file_type);
  Handle memory_type = checked(H5Tcopy(file_type), H5Tclose, "cannot copy a string type");
  std::vector<char> buffer(size * static_cast<size_t>(count) + 1, '\0');
  check(H5Aread(attr, memory_type.get(), buffer.data()), "cannot read ", what);
  const bool space_padded = H5Tget_strpad(file_type) == H5T_STR_SPACEPAD;
  for (int64_t i = 0; i < count; ++i) {
    std::string text(buffer.data() + static_cast<size_t>(i) * size, size);
    const size_t nul = text.find('\0');
    if (nul != std::string::npos) text.resize(nul);
    if (space_padded) text.erase(text.find_last_not_of(' ') + 1);
    out.push_back(std::move(text));
  }
}

AttrData read_attr(hid_t object, const std::string& name, const std::string& what) {
  Handle attr = checked(H5Aopen(object, name.c_str(), H5P_DEFAULT), H5Aclose, "cannot open ", what);
  Handle file_type = checked(H5Aget_type(attr.get()), H5Tclose, "cannot read the type of ", what);
  Handle space = checked(H5Aget_space(attr.get()), H5Sclose, "cannot read the dataspace of ", what);
  AttrData data;
  const H5S_class_t space_class = H5Sget_simple_extent_type(space.get());
  const hssize_t points = H5Sget_simple_extent_npoints(space.get());
  data.count = space_class == H5S_NULL ? 0 : static_cast<int64_t>(points);
  data.scalar = space_class == H5S_SCALAR;
  data.element_class = element_class_of(file_type.get());
  if (data.count == 0) return data;
  const size_t n = static_cast<size_t>(data.count);

  switch (H5Tget_class(file_type.get())) {
    case H5T_INTEGER: {
      const bool is_unsigned = H5Tget_sign(file_type.get()) == H5T_SGN_NONE;
      if (is_unsigned) {
        std::vector<uint64_t> values(n);
        check(H5Aread(attr.get(), H5T_NATIVE_UINT64, values.data()), "cannot read ", what);
        for (uint64_t value : values) {
          data.texts.push_back(std::to_string(value));
          data.numbers.push_back(static_cast<double>(value));
          data.integers.push_back(static_cast<int64_t>(value));
          data.integer_overflow |= value > static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
        }
      } else {
        std::vector<int64_t> values(n);
        check(H5Aread(attr.get(), H5T_NATIVE_INT64, values.data()), "cannot read ", what);
        for (int64_t value : values) {
          data.texts.push_back(std::to_string(value));
          data.numbers.push_back(static_cast<double>(value));
          data.integers.push_back(value);
        }
      }
      break;
    }
    case H5T_FLOAT: {
      std::vector<double> values(n);
      check(H5Aread(attr.get(), H5T_NATIVE_DOUBLE, values.data()), "cannot read ", what);
      // float32 values print in float's shortest form (0.1f as "0.1", not 0.100000001490116).
      const bool single = H5Tget_size(file_type.get()) <= sizeof(float);
      for (double value : values) {
        data.texts.push_back(single ? format_lossless(static_cast<float>(value)) : format_lossless(value));
      }
      data.numbers = std::move(values);
      break;
    }
    case H5T_STRING:
      read_string_attr_elements(attr.get(), file_type.get(), space.get(), data.count, data.texts, what);
      break;
    case H5T_ENUM: {
      // h5py stores bool as an enum {FALSE, TRUE} of int8: report the member names.
      Handle memory_type = checked(H5Tget_native_type(file_type.get(), H5T_DIR_ASCEND), H5Tclose,
                                   "cannot map the type of ", what);
      const size_t size = H5Tget_size(memory_type.get());
      std::vector<unsigned char> raw(size * n);
      check(H5Aread(attr.get(), memory_type.get(), raw.data()), "cannot read ", what);
      for (size_t i = 0; i < n; ++i) {
        char member[256] = {0};
        if (H5Tenum_nameof(memory_type.get(), raw.data() + i * size, member, sizeof(member)) < 0) {
          H5Eclear2(H5E_DEFAULT);
          data.texts.emplace_back("?");
        } else {
          data.texts.emplace_back(member);
        }
      }
      break;
    }
    default:
      data.texts.assign(n, "(unsupported HDF5 type)");
  }
  return data;
}

std::string attr_text(const AttrData& data) {
  if (data.texts.size() == 1 && (data.scalar || data.count == 1)) return data.texts[0];
  std::string text = "[";
  for (size_t i = 0; i < data.texts.size(); ++i) text += (i ? ", " : "") + data.texts[i];
  return text + "]";
}

herr_t collect_attr_name(hid_t, const char* name, const H5A_info_t*, void* client_data) {
  static_cast<std::vector<std::string>*>(client_data)->emplace_back(name);
  return 0;
}

herr_t collect_link_name(hid_t, const char* name, const H5L_info_t*, void* client_data) {
  static_cast<std::vector<std::string>*>(client_data)->emplace_back(name);
  return 0;
}

H5O_type_t object_type(hid_t file, const std::string& object_path) {
  H5O_info_t info;
#if H5_VERSION_GE(1, 12, 0)
  if (H5Oget_info_by_name3(file, object_path.c_str(), &info, H5O_INFO_BASIC, H5P_DEFAULT) < 0) {
#else
  if (H5Oget_info_by_name2(file, object_path.c_str(), &info, H5O_INFO_BASIC, H5P_DEFAULT) < 0) {
#endif
    H5Eclear2(H5E_DEFAULT);
    return H5O_TYPE_UNKNOWN;
  }
  return info.type;
}

}  // namespace

// -----------------------------------------------------------------------------------------------------------
// File

File File::open(const std::string& path, Mode mode) {
  silence_hdf5_errors();
  std::error_code ignored;
  if (!std::filesystem::exists(path, ignored)) fail("cannot open ", quoted(path), ": no such file");
  if (std::filesystem::is_directory(path, ignored)) fail("cannot open ", quoted(path), ": it is a directory");
  // Default file access properties: HDF5 refuses to open a file twice in one process with different close
  // degrees, and other code (or a test) may open the same file with the defaults.
  const unsigned flags = mode == Mode::read_write ? H5F_ACC_RDWR : H5F_ACC_RDONLY;
  const hid_t file_id = H5Fopen(path.c_str(), flags, H5P_DEFAULT);
  if (file_id < 0) {
    fail_h5("cannot open ", quoted(path), mode == Mode::read_write ? " for writing" : "",
            ": not an HDF5 file or unreadable");
  }
  return File(file_id, path, mode == Mode::read_write);
}

File File::create(const std::string& path) {
  silence_hdf5_errors();
  const hid_t file_id = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (file_id < 0) fail_h5("cannot create ", quoted(path), ": the directory is missing or not writable");
  return File(file_id, path, true);
}

File::File(File&& other) noexcept
    : file_id_(other.file_id_), path_(std::move(other.path_)), writable_(other.writable_) {
  other.file_id_ = -1;
}

File& File::operator=(File&& other) noexcept {
  if (this != &other) {
    if (file_id_ >= 0) H5Fclose(file_id_);
    file_id_ = other.file_id_;
    path_ = std::move(other.path_);
    writable_ = other.writable_;
    other.file_id_ = -1;
  }
  return *this;
}

File::~File() {
  if (file_id_ >= 0) {
    H5Fclose(file_id_);
    H5Eclear2(H5E_DEFAULT);
  }
}

void File::flush() {
  require(is_open(), "flush: the file is closed");
  check(H5Fflush(file_id_, H5F_SCOPE_GLOBAL), "cannot flush ", quoted(path_));
}

void File::close() {
  if (file_id_ < 0) return;
  const hid_t file_id = file_id_;
  file_id_ = -1;
  check(H5Fclose(file_id), writable_ ? "cannot finish writing " : "cannot close ", quoted(path_));
}

void File::require_writable(const char* action) const {
  require(is_open(), "cannot ", action, ": the file ", quoted(path_), " is closed");
  require(writable_, "cannot ", action, ": ", quoted(path_), " is open read-only");
}

bool File::exists(const std::string& object_path) const {
  require(is_open(), "exists: the file is closed");
  silence_hdf5_errors();
  // H5Lexists fails (rather than answering false) when a parent is missing, so walk the path.
  std::string prefix;
  for (const std::string& part : split_path(object_path)) {
    prefix += "/" + part;
    const htri_t found = H5Lexists(file_id_, prefix.c_str(), H5P_DEFAULT);
    if (found <= 0) {
      H5Eclear2(H5E_DEFAULT);
      return false;
    }
  }
  if (prefix.empty()) return true;  // the root group
  // A link may dangle (a soft link to nothing): ask for the object too.
  const htri_t object_found = H5Oexists_by_name(file_id_, prefix.c_str(), H5P_DEFAULT);
  H5Eclear2(H5E_DEFAULT);
  return object_found > 0;
}

bool File::is_group(const std::string& object_path) const {
  return exists(object_path) && object_type(file_id_, object_path) == H5O_TYPE_GROUP;
}

bool File::is_dataset(const std::string& object_path) const {
  return exists(object_path) && object_type(file_id_, object_path) == H5O_TYPE_DATASET;
}

void File::create_group(const std::string& group_path) {
  require_writable("create a group");
  if (exists(group_path)) {
    require(is_group(group_path), "cannot create group ", quoted(group_path), " in ", quoted(path_),
            ": a dataset of that name exists");
    return;
  }
  Handle lcpl = make_parents_lcpl();
  checked(H5Gcreate2(file_id_, group_path.c_str(), lcpl.get(), H5P_DEFAULT, H5P_DEFAULT), H5Gclose,
          "cannot create group ", quoted(group_path), " in ", quoted(path_));
}

std::vector<std::string> File::children(const std::string& group_path) const {
  require(is_open(), "children: the file is closed");
  silence_hdf5_errors();
  require(is_group(group_path), "no group ", quoted(group_path), " in ", quoted(path_));
  Handle group = checked(H5Gopen2(file_id_, group_path.c_str(), H5P_DEFAULT), H5Gclose, "cannot open group ",
                         quoted(group_path), " in ", quoted(path_));
  std::vector<std::string> names;
  hsize_t position = 0;
  check(H5Literate(group.get(), H5_INDEX_NAME, H5_ITER_INC, &position, collect_link_name, &names),
        "cannot list group ", quoted(group_path), " in ", quoted(path_));
  std::sort(names.begin(), names.end());
  return names;
}

void File::remove(const std::string& object_path) {
  require_writable("remove an object");
  require(exists(object_path), "cannot remove ", quoted(object_path), " from ", quoted(path_),
          ": no such object");
  check(H5Ldelete(file_id_, object_path.c_str(), H5P_DEFAULT), "cannot remove ", quoted(object_path),
        " from ", quoted(path_));
}

// -----------------------------------------------------------------------------------------------------------
// Datasets

template <class T>
void File::write(const std::string& dataset_path, const Tensor<T>& data) {
  require_writable("write a dataset");
  silence_hdf5_errors();
  const std::string what = concat("dataset ", quoted(dataset_path), " in ", quoted(path_));
  require(!exists(dataset_path), "cannot write ", what, ": an object of that name exists");
  require(static_cast<size_t>(data.size()) == static_cast<size_t>(Tensor<T>::count(data.dims())),
          "cannot write ", what, ": the tensor holds ", data.size(), " values but its dims ",
          dims_str(data.dims()), " need ", Tensor<T>::count(data.dims()));

  Handle space;
  if (data.dims().empty()) {
    space = checked(H5Screate(H5S_SCALAR), H5Sclose, "cannot create a dataspace for ", what);
  } else {
    const std::vector<hsize_t> extent(data.dims().begin(), data.dims().end());
    space = checked(H5Screate_simple(static_cast<int>(extent.size()), extent.data(), nullptr), H5Sclose,
                    "cannot create a dataspace for ", what);
  }

  Handle dcpl = checked(H5Pcreate(H5P_DATASET_CREATE), H5Pclose, "cannot create a dataset property list");
  const size_t bytes = static_cast<size_t>(data.size()) * sizeof(T);
  if (!data.dims().empty() && bytes >= kCompressMinBytes) {
    const std::vector<hsize_t> chunk = chunk_dims_for(data.dims(), sizeof(T));
    check(H5Pset_chunk(dcpl.get(), static_cast<int>(chunk.size()), chunk.data()), "cannot chunk ", what);
    // Shuffle groups the bytes of equal significance together, which helps gzip on float data.
    check(H5Pset_shuffle(dcpl.get()), "cannot set the shuffle filter for ", what);
    check(H5Pset_deflate(dcpl.get(), kGzipLevel), "cannot set the gzip filter for ", what);
  }

  Handle lcpl = make_parents_lcpl();
  Handle dataset = checked(H5Dcreate2(file_id_, dataset_path.c_str(), TypeOf<T>::file(), space.get(),
                                      lcpl.get(), dcpl.get(), H5P_DEFAULT),
                           H5Dclose, "cannot create ", what);
  if (data.size() > 0) {
    check(H5Dwrite(dataset.get(), TypeOf<T>::memory(), H5S_ALL, H5S_ALL, H5P_DEFAULT, data.data()),
          "cannot write ", what);
  }
}

DatasetInfo File::dataset_info(const std::string& dataset_path) const {
  require(is_open(), "dataset_info: the file is closed");
  silence_hdf5_errors();
  const std::string what = concat("dataset ", quoted(dataset_path), " in ", quoted(path_));
  require(exists(dataset_path), "missing ", what);
  require(is_dataset(dataset_path), quoted(dataset_path), " in ", quoted(path_), " is not a dataset");
  Handle dataset =
      checked(H5Dopen2(file_id_, dataset_path.c_str(), H5P_DEFAULT), H5Dclose, "cannot open ", what);
  Handle type = checked(H5Dget_type(dataset.get()), H5Tclose, "cannot read the type of ", what);
  Handle space = checked(H5Dget_space(dataset.get()), H5Sclose, "cannot read the dataspace of ", what);
  DatasetInfo info;
  info.dims = dims_of(space.get(), what);
  info.element_class = element_class_of(type.get());
  info.element_bytes = H5Tget_size(type.get());
  return info;
}

namespace {

std::string parent_of(const std::string& object_path) {
  const size_t slash = object_path.find_last_of('/');
  return slash == std::string::npos || slash == 0 ? std::string("/") : object_path.substr(0, slash);
}

}  // namespace

void File::set_dimensions(const std::string& dataset_path, const std::vector<std::string>& names) {
  require_writable("name the dimensions of a dataset");
  const DatasetInfo info = dataset_info(dataset_path);
  const std::string what = concat("dataset ", quoted(dataset_path), " in ", quoted(path_));
  require(names.size() == info.dims.size(), "cannot name the dimensions of ", what, ": it has rank ",
          info.dims.size(), " and ", names.size(), " names were given");
  Handle dataset =
      checked(H5Dopen2(file_id_, dataset_path.c_str(), H5P_DEFAULT), H5Dclose, "cannot open ", what);
  const std::string group = parent_of(dataset_path);
  for (size_t axis = 0; axis < names.size(); ++axis) {
    const std::string& name = names[axis];
    require(!name.empty() && name.find('/') == std::string::npos, "cannot name axis ", axis, " of ", what,
            ": '", name, "' is not a valid name");
    const std::string scale_path = (group == "/" ? "" : group) + "/" + name;
    if (!exists(scale_path)) {
      Tensor<int32_t> positions({info.dims[axis]});
      for (int64_t i = 0; i < info.dims[axis]; ++i) positions[i] = int32_t(i);
      write(scale_path, positions);
      set_attr(scale_path, "units", "1");
      set_attr(scale_path, "description", "position along the " + name + " axis");
    }
    const DatasetInfo scale_info = dataset_info(scale_path);
    require(scale_info.dims.size() == 1 && scale_info.dims[0] == info.dims[axis], "cannot attach ",
            quoted(scale_path), " (dims ", dims_str(scale_info.dims), ") to axis ", axis, " of ", what,
            " (length ", info.dims[axis], ")");
    Handle scale = checked(H5Dopen2(file_id_, scale_path.c_str(), H5P_DEFAULT), H5Dclose, "cannot open ",
                           quoted(scale_path));
    if (H5DSis_scale(scale.get()) <= 0)
      check(H5DSset_scale(scale.get(), name.c_str()), "cannot make ", quoted(scale_path),
            " a dimension scale");
    check(H5DSattach_scale(dataset.get(), scale.get(), unsigned(axis)), "cannot attach ", quoted(scale_path),
          " to axis ", axis, " of ", what);
  }
}

namespace {

herr_t keep_scale_name(hid_t, unsigned, hid_t scale, void* client_data) {
  char name[1024] = {0};
  if (H5Iget_name(scale, name, sizeof(name)) > 0) {
    const std::string path(name);
    *static_cast<std::string*>(client_data) = path.substr(path.find_last_of('/') + 1);
  }
  return 1;  // the first scale of the axis
}

}  // namespace

std::vector<std::string> File::dimensions(const std::string& dataset_path) const {
  const DatasetInfo info = dataset_info(dataset_path);
  const std::string what = concat("dataset ", quoted(dataset_path), " in ", quoted(path_));
  Handle dataset =
      checked(H5Dopen2(file_id_, dataset_path.c_str(), H5P_DEFAULT), H5Dclose, "cannot open ", what);
  std::vector<std::string> names(info.dims.size());
  for (size_t axis = 0; axis < names.size(); ++axis) {
    const int count = H5DSget_num_scales(dataset.get(), unsigned(axis));
    H5Eclear2(H5E_DEFAULT);
    if (count > 0)
      check(H5DSiterate_scales(dataset.get(), unsigned(axis), nullptr, keep_scale_name, &names[axis]),
            "cannot read the dimension scales of ", what);
  }
  return names;
}

bool File::is_dimension_scale(const std::string& dataset_path) const {
  if (!is_dataset(dataset_path)) return false;
  Handle dataset = checked(H5Dopen2(file_id_, dataset_path.c_str(), H5P_DEFAULT), H5Dclose, "cannot open ",
                           quoted(dataset_path), " in ", quoted(path_));
  const htri_t scale = H5DSis_scale(dataset.get());
  H5Eclear2(H5E_DEFAULT);
  return scale > 0;
}

template <class T>
Tensor<T> File::read(const std::string& dataset_path) const {
  require(is_open(), "read: the file is closed");
  silence_hdf5_errors();
  const std::string what = concat("dataset ", quoted(dataset_path), " in ", quoted(path_));
  const DatasetInfo info = dataset_info(dataset_path);
  const bool numeric =
      info.element_class == ElementClass::integer || info.element_class == ElementClass::floating;
  require(numeric, "cannot read ", what, " as ", TypeOf<T>::name, ": it holds ",
          element_class_name(info.element_class), " data");
  // Floating data into an integer tensor would truncate: refuse it rather than convert.
  require(std::is_floating_point_v<T> || info.element_class == ElementClass::integer, "cannot read ", what,
          " as ", TypeOf<T>::name, ": it holds floating-point data");

  Tensor<T> out;
  out.reshape_uninitialized(info.dims);
  if (out.size() == 0) return out;
  Handle dataset =
      checked(H5Dopen2(file_id_, dataset_path.c_str(), H5P_DEFAULT), H5Dclose, "cannot open ", what);
  Handle dxpl = checked(H5Pcreate(H5P_DATASET_XFER), H5Pclose, "cannot create a transfer property list");
  bool overflowed = false;
  check(H5Pset_type_conv_cb(dxpl.get(), abort_on_overflow, &overflowed), "cannot set a conversion callback");
  if (H5Dread(dataset.get(), TypeOf<T>::memory(), H5S_ALL, H5S_ALL, dxpl.get(), out.data()) < 0) {
    if (overflowed) {
      H5Eclear2(H5E_DEFAULT);
      fail("cannot read ", what, " as ", TypeOf<T>::name, ": a value is out of its range");
    }
    fail_h5("cannot read ", what, ": the data is corrupt or unreadable");
  }
  return out;
}

template <class T>
Tensor<T> File::read(const std::string& dataset_path, size_t expected_rank) const {
  const DatasetInfo info = dataset_info(dataset_path);
  require(info.dims.size() == expected_rank, "dataset ", quoted(dataset_path), " in ", quoted(path_),
          " has rank ", info.dims.size(), " (dims ", dims_str(info.dims), "), expected rank ", expected_rank);
  return read<T>(dataset_path);
}

#define SGDN_H5_INSTANTIATE(T)                                        \
  template void File::write<T>(const std::string&, const Tensor<T>&); \
  template Tensor<T> File::read<T>(const std::string&) const;         \
  template Tensor<T> File::read<T>(const std::string&, size_t) const;
SGDN_H5_INSTANTIATE(float)
SGDN_H5_INSTANTIATE(double)
SGDN_H5_INSTANTIATE(uint8_t)
SGDN_H5_INSTANTIATE(int32_t)
SGDN_H5_INSTANTIATE(int64_t)
#undef SGDN_H5_INSTANTIATE

// -----------------------------------------------------------------------------------------------------------
// Attributes

void File::set_attr(const std::string& object_path, const std::string& name, const AttrValue& value) {
  require_writable("write an attribute");
  silence_hdf5_errors();
  const std::string what =
      concat("attribute ", quoted(name), " of ", quoted(object_path), " in ", quoted(path_));
  require(exists(object_path), "cannot write ", what, ": no such object");
  Handle object = checked(H5Oopen(file_id_, object_path.c_str(), H5P_DEFAULT), H5Oclose, "cannot open ",
                          quoted(object_path));
  const htri_t present = H5Aexists(object.get(), name.c_str());
  if (present < 0) fail_h5("cannot write ", what);
  if (present > 0) check(H5Adelete(object.get(), name.c_str()), "cannot replace ", what);

  Handle acpl =
      checked(H5Pcreate(H5P_ATTRIBUTE_CREATE), H5Pclose, "cannot create an attribute property list");
  check(H5Pset_char_encoding(acpl.get(), H5T_CSET_UTF8), "cannot set attribute name encoding");
  // Arrays: a 1-D dataspace of their length.
  auto write_array = [&](hid_t file_type, hid_t memory_type, const void* values, size_t count) {
    const hsize_t extent = count;
    Handle array_space =
        checked(H5Screate_simple(1, &extent, nullptr), H5Sclose, "cannot create a dataspace");
    Handle attr =
        checked(H5Acreate2(object.get(), name.c_str(), file_type, array_space.get(), acpl.get(), H5P_DEFAULT),
                H5Aclose, "cannot create ", what);
    check(H5Awrite(attr.get(), memory_type, values), "cannot write ", what);
  };
  if (const auto* numbers = std::get_if<std::vector<double>>(&value)) {
    require(!numbers->empty(), "cannot write ", what, ": an empty array");
    write_array(H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, numbers->data(), numbers->size());
    return;
  }
  if (const auto* integers = std::get_if<std::vector<int64_t>>(&value)) {
    require(!integers->empty(), "cannot write ", what, ": an empty array");
    write_array(H5T_STD_I64LE, H5T_NATIVE_INT64, integers->data(), integers->size());
    return;
  }
  Handle space = checked(H5Screate(H5S_SCALAR), H5Sclose, "cannot create a scalar dataspace");

  if (const auto* text = std::get_if<std::string>(&value)) {
    // Variable-length UTF-8: h5py reads it back as str (fixed-length strings come back as bytes).
    Handle type = checked(H5Tcopy(H5T_C_S1), H5Tclose, "cannot copy a string type");
    check(H5Tset_size(type.get(), H5T_VARIABLE), "cannot make a variable-length string type");
    check(H5Tset_cset(type.get(), H5T_CSET_UTF8), "cannot set UTF-8");
    check(H5Tset_strpad(type.get(), H5T_STR_NULLTERM), "cannot set string padding");
    Handle attr =
        checked(H5Acreate2(object.get(), name.c_str(), type.get(), space.get(), acpl.get(), H5P_DEFAULT),
                H5Aclose, "cannot create ", what);
    const char* pointer = text->c_str();
    check(H5Awrite(attr.get(), type.get(), &pointer), "cannot write ", what);
  } else if (const auto* number = std::get_if<double>(&value)) {
    Handle attr =
        checked(H5Acreate2(object.get(), name.c_str(), H5T_IEEE_F64LE, space.get(), acpl.get(), H5P_DEFAULT),
                H5Aclose, "cannot create ", what);
    check(H5Awrite(attr.get(), H5T_NATIVE_DOUBLE, number), "cannot write ", what);
  } else {
    const int64_t integer = std::get<int64_t>(value);
    Handle attr =
        checked(H5Acreate2(object.get(), name.c_str(), H5T_STD_I64LE, space.get(), acpl.get(), H5P_DEFAULT),
                H5Aclose, "cannot create ", what);
    check(H5Awrite(attr.get(), H5T_NATIVE_INT64, &integer), "cannot write ", what);
  }
}

void File::set_attrs(const std::string& object_path, const std::map<std::string, AttrValue>& values) {
  for (const auto& [name, value] : values) set_attr(object_path, name, value);
}

bool File::has_attr(const std::string& object_path, const std::string& name) const {
  require(is_open(), "has_attr: the file is closed");
  if (!exists(object_path)) return false;
  const htri_t present = H5Aexists_by_name(file_id_, object_path.c_str(), name.c_str(), H5P_DEFAULT);
  H5Eclear2(H5E_DEFAULT);
  return present > 0;
}

namespace {

// Opens `object_path` and reads attribute `name` as a scalar of an allowed class, else a message saying
// what was found.
AttrData read_scalar_attr(hid_t file_id, const std::string& file_path, const std::string& object_path,
                          const std::string& name, std::initializer_list<ElementClass> allowed,
                          const char* wanted) {
  const std::string what =
      concat("attribute ", quoted(name), " of ", quoted(object_path), " in ", quoted(file_path));
  Handle object = checked(H5Oopen(file_id, object_path.c_str(), H5P_DEFAULT), H5Oclose, "cannot open ",
                          quoted(object_path), " in ", quoted(file_path));
  const htri_t present = H5Aexists(object.get(), name.c_str());
  if (present <= 0) {
    H5Eclear2(H5E_DEFAULT);
    fail("missing ", what);
  }
  AttrData data = read_attr(object.get(), name, what);
  const bool class_ok = std::find(allowed.begin(), allowed.end(), data.element_class) != allowed.end();
  require(class_ok, what, " holds ", element_class_name(data.element_class), " data, expected ", wanted);
  require(data.count == 1, what, " holds ", data.count, " values, expected one ", wanted);
  return data;
}

}  // namespace

std::string File::attr_string(const std::string& object_path, const std::string& name) const {
  require(is_open(), "attr_string: the file is closed");
  silence_hdf5_errors();
  return read_scalar_attr(file_id_, path_, object_path, name, {ElementClass::string}, "a string").texts[0];
}

double File::attr_double(const std::string& object_path, const std::string& name) const {
  require(is_open(), "attr_double: the file is closed");
  silence_hdf5_errors();
  const AttrData data = read_scalar_attr(file_id_, path_, object_path, name,
                                         {ElementClass::floating, ElementClass::integer}, "a number");
  return data.numbers[0];
}

int64_t File::attr_int(const std::string& object_path, const std::string& name) const {
  require(is_open(), "attr_int: the file is closed");
  silence_hdf5_errors();
  const AttrData data =
      read_scalar_attr(file_id_, path_, object_path, name, {ElementClass::integer}, "an integer");
  require(!data.integer_overflow, "attribute ", quoted(name), " of ", quoted(object_path), " in ",
          quoted(path_), " = ", data.texts[0], " does not fit in int64");
  return data.integers[0];
}

std::map<std::string, std::string> File::attrs(const std::string& object_path) const {
  require(is_open(), "attrs: the file is closed");
  silence_hdf5_errors();
  require(exists(object_path), "cannot list the attributes of ", quoted(object_path), " in ", quoted(path_),
          ": no such object");
  Handle object = checked(H5Oopen(file_id_, object_path.c_str(), H5P_DEFAULT), H5Oclose, "cannot open ",
                          quoted(object_path));
  std::vector<std::string> names;
  hsize_t position = 0;
  check(H5Aiterate2(object.get(), H5_INDEX_NAME, H5_ITER_INC, &position, collect_attr_name, &names),
        "cannot list the attributes of ", quoted(object_path), " in ", quoted(path_));
  std::map<std::string, std::string> values;
  for (const std::string& name : names) {
    const std::string what =
        concat("attribute ", quoted(name), " of ", quoted(object_path), " in ", quoted(path_));
    values[name] = attr_text(read_attr(object.get(), name, what));
  }
  return values;
}

// -----------------------------------------------------------------------------------------------------------
// Copy

void File::copy_from(const File& source, const std::string& source_path, const std::string& dest_path) {
  require_writable("copy an object");
  require(source.is_open(), "cannot copy from ", quoted(source.path()), ": the file is closed");
  silence_hdf5_errors();
  require(source.exists(source_path), "cannot copy ", quoted(source_path), " from ", quoted(source.path()),
          ": no such object");
  require(!exists(dest_path), "cannot copy ", quoted(source_path), " to ", quoted(dest_path), " in ",
          quoted(path_), ": an object of that name exists");
  Handle lcpl = make_parents_lcpl();
  check(H5Ocopy(source.file_id_, source_path.c_str(), file_id_, dest_path.c_str(), H5P_DEFAULT, lcpl.get()),
        "cannot copy ", quoted(source_path), " of ", quoted(source.path()), " to ", quoted(dest_path), " of ",
        quoted(path_));
  reattach_dimension_scales(source, source_path, dest_path);
}

void File::reattach_dimension_scales(const File& source, const std::string& source_path,
                                     const std::string& dest_path) {
  if (is_group(dest_path)) {
    for (const std::string& child : children(dest_path))
      reattach_dimension_scales(source, source_path + "/" + child, dest_path + "/" + child);
    return;
  }
  if (!is_dataset(dest_path)) return;
  Handle dataset = checked(H5Dopen2(file_id_, dest_path.c_str(), H5P_DEFAULT), H5Dclose, "cannot open ",
                           quoted(dest_path));
  // The copied lists of references hold the source file's addresses: drop them (attaching writes new ones).
  for (const char* list : {"DIMENSION_LIST", "REFERENCE_LIST"}) {
    if (H5Aexists(dataset.get(), list) > 0)
      check(H5Adelete(dataset.get(), list), "cannot update the dimension scales of ", quoted(dest_path));
    H5Eclear2(H5E_DEFAULT);
  }
  if (H5DSis_scale(dataset.get()) > 0) return;  // attached to by the datasets that use it
  H5Eclear2(H5E_DEFAULT);
  dataset.reset();
  const std::vector<std::string> names = source.dimensions(source_path);
  if (names.empty() || std::find(names.begin(), names.end(), std::string()) != names.end()) return;
  const std::string group = parent_of(dest_path), source_group = parent_of(source_path);
  for (size_t axis = 0; axis < names.size(); ++axis) {
    if (names[axis].empty()) continue;
    const std::string scale_path = (group == "/" ? "" : group) + "/" + names[axis];
    if (!exists(scale_path)) {
      Handle lcpl = make_parents_lcpl();
      const std::string source_scale = (source_group == "/" ? "" : source_group) + "/" + names[axis];
      check(H5Ocopy(source.file_id_, source_scale.c_str(), file_id_, scale_path.c_str(), H5P_DEFAULT,
                    lcpl.get()),
            "cannot copy the dimension scale ", quoted(source_scale), " of ", quoted(source.path()));
      reattach_dimension_scales(source, source_scale, scale_path);
    }
  }
  set_dimensions(dest_path, names);
}

// -----------------------------------------------------------------------------------------------------------
// Atomic writes

namespace {

// An open-file-description lock on the whole file (Linux): held by one AtomicFile per temporary file, so that
// a cleaner can tell a temporary file being written from one a killed process left. It is not released when
// HDF5 closes its own descriptor of the file, and does not interact with HDF5's flock() file locking.
bool lock_whole_file(int fd) {
  struct flock lock {};
  lock.l_type = F_WRLCK;
  lock.l_whence = SEEK_SET;
  return ::fcntl(fd, F_OFD_SETLK, &lock) == 0;
}

// Appends the content of `source` to the open `target_fd`; errors name both files and the system's reason
// ("No space left on device").
void copy_into(const std::string& source, int target_fd, const std::string& target) {
  const int in = ::open(source.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0) fail("cannot read ", quoted(source), ": ", std::strerror(errno));
  std::vector<char> buffer(size_t(1) << 20);
  for (;;) {
    const ssize_t got = ::read(in, buffer.data(), buffer.size());
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      const int error = errno;
      ::close(in);
      fail("cannot read ", quoted(source), ": ", std::strerror(error));
    }
    if (got == 0) break;
    for (ssize_t done = 0; done < got;) {
      const ssize_t put = ::write(target_fd, buffer.data() + done, size_t(got - done));
      if (put < 0 && errno == EINTR) continue;
      if (put < 0) {
        const int error = errno;
        ::close(in);
        fail("cannot copy ", quoted(source), " to ", quoted(target), ": ", std::strerror(error));
      }
      done += put;
    }
  }
  ::close(in);
}

}  // namespace

// Reserves `bytes` of disk for the file without changing its size, so that a full disk is found here and
// not in the middle of HDF5's writes: HDF5 1.10's object copy crashes when a write fails under it.
void reserve_disk(int fd, uint64_t bytes, const std::string& path) {
  if (bytes == 0) return;
  if (::fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, off_t(bytes)) == 0) return;
  const int error = errno;
  if (error == ENOSPC)
    fail("no space left on device for ", quoted(path), ": it needs about ", (bytes + (1u << 20) - 1) >> 20,
         " MiB; free some space or write to another file");
  // A file system without fallocate: fall back on asking for the free space.
  struct statvfs disk {};
  if (::fstatvfs(fd, &disk) == 0 && uint64_t(disk.f_bavail) * disk.f_frsize < bytes)
    fail("no space left on device for ", quoted(path), ": it needs about ", (bytes + (1u << 20) - 1) >> 20,
         " MiB and ", (uint64_t(disk.f_bavail) * disk.f_frsize) >> 20, " MiB are free");
}

// Gives back the reserved blocks that the file did not use (those beyond its end): only a change of size
// releases them.
void release_unused_reservation(int fd) {
  struct stat info {};
  if (::fstat(fd, &info) != 0) return;
  if (::ftruncate(fd, info.st_size + 1) == 0 && ::ftruncate(fd, info.st_size) != 0) {
    // The size is restored below or the rename fails: nothing more to do here.
  }
}

AtomicFile::AtomicFile(std::string path, bool start_from_existing, uint64_t reserve_bytes)
    : path_(std::move(path)) {
  // A unique name in the target's directory: rename() is atomic only within one file system, and two
  // processes writing the same target must not share a temporary file.
  std::string name_template = path_ + ".tmp-XXXXXX";
  const int fd = ::mkostemp(name_template.data(), O_CLOEXEC);
  if (fd < 0) fail("cannot create a temporary file next to ", quoted(path_), ": ", std::strerror(errno));
  temp_path_ = name_template;
  lock_fd_ = fd;
  reserve_bytes_ = reserve_bytes;
  try {
    require(lock_whole_file(fd), "cannot lock ", quoted(temp_path_), ": ", std::strerror(errno));
    // mkstemp makes the file private (0600); give it the permissions a plain create would, so that the
    // renamed result is readable by the group as any other output file.
    const mode_t umask_bits = ::umask(0);
    ::umask(umask_bits);
    ::fchmod(fd, 0666 & ~umask_bits);
    std::error_code ignored;
    if (start_from_existing && std::filesystem::exists(path_, ignored)) {
      reserve_disk(fd, reserve_bytes, path_);
      copy_into(path_, fd, temp_path_);
      file_ = File::open(temp_path_, Mode::read_write);
    } else {
      file_ = File::create(temp_path_);
      reserve_disk(fd, reserve_bytes, path_);
    }
  } catch (...) {
    discard();
    throw;
  }
}

void AtomicFile::discard() {
  try {
    file_.close();
  } catch (...) {
    // The temporary file is discarded anyway.
  }
  std::remove(temp_path_.c_str());
  if (lock_fd_ >= 0) ::close(lock_fd_);
  lock_fd_ = -1;
}

AtomicFile::~AtomicFile() {
  if (!committed_) discard();
}

void AtomicFile::commit() {
  require(!committed_, "AtomicFile: ", quoted(path_), " is already committed");
  try {
    file_.close();
    if (reserve_bytes_ > 0) release_unused_reservation(lock_fd_);
    // Sync before the rename, so that after a crash the name points at complete data, never at a file
    // whose blocks were not written yet.
    if (::fsync(lock_fd_) != 0) fail("cannot write ", quoted(temp_path_), " to disk: ", std::strerror(errno));
    if (std::rename(temp_path_.c_str(), path_.c_str()) != 0)
      fail("cannot rename ", quoted(temp_path_), " to ", quoted(path_), ": ", std::strerror(errno));
  } catch (...) {
    discard();
    throw;
  }
  committed_ = true;
  ::close(lock_fd_);
  lock_fd_ = -1;
}

std::vector<std::string> remove_abandoned_temporaries(const std::string& directory,
                                                      const std::string& name_prefix) {
  std::vector<std::string> removed;
  std::error_code error;
  std::filesystem::directory_iterator entries(directory.empty() ? "." : directory, error);
  if (error) return removed;
  static const std::string kMark = ".tmp-";
  for (const auto& entry : entries) {
    const std::string name = entry.path().filename().string();
    const size_t mark = name.rfind(kMark);
    // AtomicFile's names: <target>.tmp-XXXXXX (mkstemp's six characters).
    if (mark == std::string::npos || mark + kMark.size() + 6 != name.size() ||
        name.compare(0, name_prefix.size(), name_prefix) != 0 || mark + kMark.size() < name_prefix.size())
      continue;
    const int fd = ::open(entry.path().c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) continue;
    if (entry.is_regular_file(error) && lock_whole_file(fd) && ::unlink(entry.path().c_str()) == 0)
      removed.push_back(entry.path().string());
    ::close(fd);
  }
  return removed;
}

void write_atomically(const std::string& path, const std::function<void(File&)>& fill) {
  AtomicFile atomic(path);
  fill(atomic.file());
  atomic.commit();
}

// -----------------------------------------------------------------------------------------------------------
// Number formatting

std::string format_lossless(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  char text[40];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(text, sizeof(text), "%.*g", precision, value);
    if (std::strtod(text, nullptr) == value) break;
  }
  return text;
}

std::string format_lossless(float value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  char text[40];
  for (int precision = 1; precision <= 9; ++precision) {
    std::snprintf(text, sizeof(text), "%.*g", precision, static_cast<double>(value));
    if (std::strtof(text, nullptr) == value) break;
  }
  return text;
}

AttrValue attr_value_from_text(const std::string& text) {
  if (text == "true" || text == "false") return AttrValue(int64_t(text == "true" ? 1 : 0));
  std::vector<std::string> words;
  for (size_t start = text.find_first_not_of(' '); start != std::string::npos;) {
    const size_t end = text.find(' ', start);
    words.push_back(text.substr(start, end == std::string::npos ? std::string::npos : end - start));
    start = end == std::string::npos ? end : text.find_first_not_of(' ', end);
  }
  std::vector<int64_t> integers;
  std::vector<double> numbers;
  bool all_integers = true;
  for (const std::string& word : words) {
    try {
      integers.push_back(parse_int("", word));
      numbers.push_back(double(integers.back()));
      continue;
    } catch (const Error&) {
    }
    try {
      numbers.push_back(parse_double("", word));
      all_integers = false;
    } catch (const Error&) {
      return AttrValue(text);
    }
  }
  if (words.empty()) return AttrValue(text);
  if (words.size() == 1 && words[0] == text)
    return all_integers ? AttrValue(integers[0]) : AttrValue(numbers[0]);
  if (words.size() == 1) return AttrValue(text);  // padded text stays as it is
  return all_integers ? AttrValue(integers) : AttrValue(numbers);
}

}  // namespace sgdn::h5
