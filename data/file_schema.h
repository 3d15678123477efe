// The datasets of an experiment file (SPEC §10, docs/hdf5_schema.md) with their dimension names, units and
// descriptions: every writer goes through write_described(), so that each dataset carries them as HDF5
// dimension scales and `units` / `description` attributes.
#pragma once
#include <string>
#include <vector>

#include "core/hdf5_file.h"

namespace sgdn {

struct DatasetSchema {
  std::vector<std::string> dims;  // one name per axis: batch, token, head, qk_head, chunk, unit, ...
  std::string units;              // "1" for dimensionless values
  std::string description;        // one line
};

// The schema of a dataset by its path below its workload or run ("inputs/q", "exact/o", "events/mask",
// "metrics/output_error_per_head", "needle/answer"); an unknown name is an error.
const DatasetSchema& dataset_schema(const std::string& name);

// Writes `data` to `root`/`name` (root: /workloads/<wid> or /runs/<rid>) with its schema's dimension
// scales, units and description; the rank must match the schema's.
template <class T>
void write_described(h5::File& file, const std::string& root, const std::string& name, const Tensor<T>& data);

}  // namespace sgdn
