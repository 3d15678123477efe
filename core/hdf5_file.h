// HDF5 plumbing (SPEC §10): files, groups, numeric datasets, scalar attributes, copies between files and
// atomic writes, on the HDF5 C API. Everything written is plain HDF5 (native little-endian types, gzip and
// shuffle filters, variable-length UTF-8 strings), so h5py, HDFView and h5dump read it.
//
// Failures throw sgdn::Error naming the file, the object and what failed; HDF5's own error-stack printing is
// turned off and its innermost message is appended in parentheses. HDF5 identifiers are kept out of this
// header (they are int64_t in HDF5 >= 1.10) so that code including it does not see <hdf5.h>.
//
// The serial HDF5 library is not thread-safe: call it from one thread at a time.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "core/tensor.h"

namespace sgdn::h5 {

enum class Mode { read_only, read_write };

// What a dataset holds, without reading it.
enum class ElementClass { integer, floating, string, other };
struct DatasetInfo {
  std::vector<int64_t> dims;  // empty for a scalar dataset
  ElementClass element_class = ElementClass::other;
  size_t element_bytes = 0;
};

// An attribute value as written: text, a float64 or an int64 (scalars), or a 1-D array of float64 or int64.
using AttrValue = std::variant<std::string, double, int64_t, std::vector<double>, std::vector<int64_t>>;

// Datasets of at least this many bytes are stored chunked with shuffle + gzip; smaller ones contiguously.
inline constexpr size_t kCompressMinBytes = 16 * 1024;
inline constexpr int kGzipLevel = 4;

class File {
 public:
  // Opens an existing file. Errors distinguish a missing file from one that is not HDF5 (or unreadable).
  static File open(const std::string& path, Mode mode = Mode::read_only);
  // Creates a new file, replacing any file at `path`.
  static File create(const std::string& path);

  File() = default;
  File(File&& other) noexcept;
  File& operator=(File&& other) noexcept;
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  ~File();  // closes quietly; call close() to see errors

  bool is_open() const { return file_id_ >= 0; }
  const std::string& path() const { return path_; }
  bool writable() const { return writable_; }
  // Writes buffered data to disk; close() does it too.
  void flush();
  void close();

  // --- groups and links. Object paths are absolute ("/runs/r1") or relative to the root.
  // True when an object exists at `object_path`; false (not an error) when any component is missing.
  bool exists(const std::string& object_path) const;
  bool is_group(const std::string& object_path) const;
  bool is_dataset(const std::string& object_path) const;
  // Creates the group and any missing parents; an existing group is left as it is.
  void create_group(const std::string& group_path);
  // Names of the links in a group, sorted by name.
  std::vector<std::string> children(const std::string& group_path) const;
  // Unlinks an object (its space is not reclaimed inside the file; h5repack does that).
  void remove(const std::string& object_path);

  // --- datasets. write() creates missing parent groups and refuses to replace an existing object.
  // Stored type: float -> float32, double -> float64, uint8_t -> uint8, int32_t -> int32, int64_t -> int64.
  template <class T>
  void write(const std::string& dataset_path, const Tensor<T>& data);
  // Reads a numeric dataset with HDF5's type conversion (float32 data into Tensor<double> and so on).
  // Integer tensors accept only integer data, and a value that does not fit the requested type is an error.
  template <class T>
  Tensor<T> read(const std::string& dataset_path) const;
  // The same, with the rank checked first (the message shows the dims found).
  template <class T>
  Tensor<T> read(const std::string& dataset_path, size_t expected_rank) const;
  DatasetInfo dataset_info(const std::string& dataset_path) const;

  // --- dimension names: HDF5 dimension scales (the H5DS convention that xarray, netCDF and HDFView read).
  // Attaches axis i of the dataset to the 1-D dataset `names[i]` of the dataset's group: an existing scale of
  // that name (its length must match the axis), or a new one holding the positions 0, 1, ..., n-1 (int32).
  void set_dimensions(const std::string& dataset_path, const std::vector<std::string>& names);
  // The names of the dimension scales attached to each axis ("" for an axis without one).
  std::vector<std::string> dimensions(const std::string& dataset_path) const;
  // True for a dataset that is a dimension scale (a coordinate, not data).
  bool is_dimension_scale(const std::string& dataset_path) const;

  // --- attributes of a group or dataset ("/" is the root group). Setting replaces an existing attribute.
  void set_attr(const std::string& object_path, const std::string& name, const AttrValue& value);
  void set_attr(const std::string& object_path, const std::string& name, const std::string& value) {
    set_attr(object_path, name, AttrValue(value));
  }
  void set_attr(const std::string& object_path, const std::string& name, const char* value) {
    set_attr(object_path, name, AttrValue(std::string(value)));
  }
  // Any integer type stores as int64, any floating type as float64; bool is refused (HDF5 has no standard
  // boolean; store "true"/"false" or 0/1 explicitly).
  template <class N, std::enable_if_t<std::is_arithmetic_v<N> && !std::is_same_v<N, bool>, int> = 0>
  void set_attr(const std::string& object_path, const std::string& name, N value) {
    if constexpr (std::is_integral_v<N>) {
      set_attr(object_path, name, AttrValue(static_cast<int64_t>(value)));
    } else {
      set_attr(object_path, name, AttrValue(static_cast<double>(value)));
    }
  }
  void set_attr(const std::string& object_path, const std::string& name, bool value) = delete;
  void set_attrs(const std::string& object_path, const std::map<std::string, AttrValue>& values);

  bool has_attr(const std::string& object_path, const std::string& name) const;
  // A scalar string attribute (variable or fixed length).
  std::string attr_string(const std::string& object_path, const std::string& name) const;
  // A scalar integer or floating attribute, as a double.
  double attr_double(const std::string& object_path, const std::string& name) const;
  // A scalar integer attribute.
  int64_t attr_int(const std::string& object_path, const std::string& name) const;
  // Every attribute of an object as text: strings as they are, numbers in the shortest form that reads back
  // to the same value, HDF5 enums (h5py's bool) by their member name, small arrays as "[a, b, c]".
  std::map<std::string, std::string> attrs(const std::string& object_path) const;

  // --- copying. Copies the object (a group recursively, with attributes) at `source_path` of `source` to
  // `dest_path` in this file, creating missing parents; an existing object at `dest_path` is an error.
  // Dimension scales are attached again in the copy (HDF5's copy keeps their references pointing into the
  // source file); a scale that the copy lacks is copied from the source's group first.
  void copy_from(const File& source, const std::string& source_path, const std::string& dest_path);

 private:
  File(int64_t file_id, std::string path, bool writable)
      : file_id_(file_id), path_(std::move(path)), writable_(writable) {}
  void require_writable(const char* action) const;
  void reattach_dimension_scales(const File& source, const std::string& source_path,
                                 const std::string& dest_path);

  int64_t file_id_ = -1;  // an hid_t; -1 when closed
  std::string path_;
  bool writable_ = false;
};

// Writes a file under a temporary name in the target's directory (`path`.tmp-XXXXXX) and renames it over
// `path` only on commit(), so a reader never sees a half-written file. Destroyed without commit() (an
// exception), or when commit() fails, it removes the temporary file and leaves `path` untouched. While it
// lives it holds a lock on the temporary file, so that remove_abandoned_temporaries() can tell the file of
// a killed process from one being written.
class AtomicFile {
 public:
  // start_from_existing: begin from a copy of the current file at `path` (if any) instead of an empty one,
  // to add objects to an existing file atomically. reserve_bytes: disk space to reserve for the whole file
  // before anything is written, so that a full disk is an error here ("no space left on device" naming the
  // file) rather than a failure inside HDF5; what the file does not use is given back on commit.
  explicit AtomicFile(std::string path, bool start_from_existing = false, uint64_t reserve_bytes = 0);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  File& file() { return file_; }
  const std::string& temp_path() const { return temp_path_; }
  // Closes the file, syncs it to disk and renames it to the final path.
  void commit();

 private:
  void discard();

  std::string path_;
  std::string temp_path_;
  File file_;
  int lock_fd_ = -1;  // the temporary file, open and locked until commit or discard
  uint64_t reserve_bytes_ = 0;
  bool committed_ = false;
};

// Removes the temporary files of AtomicFiles that no process holds any more (their writer was killed):
// files in `directory` named <name>.tmp-XXXXXX whose name starts with `name_prefix`. Returns their paths.
// A caller must make sure no AtomicFile is being created there meanwhile (between mkstemp and its lock).
std::vector<std::string> remove_abandoned_temporaries(const std::string& directory,
                                                      const std::string& name_prefix = "");

// AtomicFile in one call: `fill` writes the content; `path` appears only if it returns normally.
void write_atomically(const std::string& path, const std::function<void(File&)>& fill);

// An attribute value from config text, so that h5py, xarray and HDFView see numbers as numbers: a whole
// number as int64, another number as float64, true/false as 1/0 (int64), a space-separated list of numbers
// as a 1-D array (int64 when every entry is whole), anything else as a string.
AttrValue attr_value_from_text(const std::string& text);

// The shortest decimal text that parses back to exactly `value` (used for attributes read as text).
std::string format_lossless(double value);
std::string format_lossless(float value);

}  // namespace sgdn::h5
