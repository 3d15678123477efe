// The `file` workload (SPEC §9): inputs read from an HDF5 file in the schema of SPEC §10, and the
// writer that produces such files.
//
//   /workloads/<wid>/inputs/q, k       [B, T, H, K]   float32 (float64 is read too)
//   /workloads/<wid>/inputs/v          [B, T, HV, V]
//   /workloads/<wid>/inputs/g, beta    [B, T, HV]
//   /workloads/<wid>/inputs/initial_state [B, HV, K, V]   optional
//   /workloads/<wid>/inputs attrs      the generator and its parameters; two are read back into Inputs:
//                                      `scale` (a number, the output scale) and `allow_negative_eigenvalues`
//                                      (an integer 0/1, h5py's bool, or "true"/"false")
//   /workloads/<wid>/exact/o           [B, T, HV, V]  float32, optional
#pragma once
#include <map>
#include <string>
#include <vector>

#include "core/hdf5_file.h"
#include "core/inputs.h"

namespace sgdn {

// Version 2 added dimension scales, `units` / `description` on every dataset, and numbers, lists of
// numbers and booleans (0/1) stored as numbers; version 1 files are still read (not written into).
inline constexpr int64_t kSchemaVersion = 2;
inline constexpr int64_t kOldestReadableSchemaVersion = 1;

struct FileWorkload {
  std::string id;                                 // <wid>
  Inputs<double> inputs;                          // shape inferred from the datasets, validated
  std::map<std::string, std::string> attributes;  // every attribute of the inputs group, as text
};

// Root attributes of a new file: schema_version, sgdn_version (the program version), created (UTC, ISO 8601).
void write_schema_attributes(h5::File& file);
// Refuses a file whose root `schema_version` is present and not one this program reads (files written by
// other tools may omit it).
void check_schema_version(const h5::File& file);
// Refuses an experiment file (written by sgdn run) whose `schema_version` is missing or not one this program
// reads.
void require_experiment_schema(const h5::File& file);
// Refuses to add runs to an experiment file of another schema version than the one this program writes.
void require_writable_experiment_schema(const h5::File& file);

// The workload ids under /workloads, sorted; an error if the file has no /workloads group.
std::vector<std::string> list_workloads(const h5::File& file);
std::vector<std::string> list_workloads(const std::string& path);

// Loads one workload. Errors name the file, the dataset and the expected shape; an unknown id lists the
// known ones.
FileWorkload load_file_workload(const h5::File& file, const std::string& workload_id);
FileWorkload load_file_workload(const std::string& path, const std::string& workload_id);
// Every workload of the file, or only `workload_id` when it is not empty (the `workload.id` key).
std::vector<FileWorkload> load_file_workloads(const std::string& path, const std::string& workload_id = "");

// Writes `inputs` as float32 under /workloads/<wid>/inputs with `attributes` (plus `scale` when set and
// `allow_negative_eigenvalues` when true). The inputs are validated first; an existing workload is an error.
void write_workload_inputs(h5::File& file, const std::string& workload_id, const Inputs<double>& inputs,
                           const std::map<std::string, h5::AttrValue>& attributes);
// Writes the exact outputs [B, T, HV, V] as float32 to /workloads/<wid>/exact/o.
void write_exact_outputs(h5::File& file, const std::string& workload_id, const Tensor<double>& outputs);
bool has_exact_outputs(const h5::File& file, const std::string& workload_id);
// Reads /workloads/<wid>/exact/o, checking its shape against `shape`.
Tensor<double> load_exact_outputs(const h5::File& file, const std::string& workload_id, const Shape& shape);

}  // namespace sgdn
