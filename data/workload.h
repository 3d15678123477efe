// A workload by kind (SPEC §9): generated (`random`, `needle`) or read from an HDF5 file (`file`), with what
// its scoring needs; and its storage under /workloads/<wid> (SPEC §10).
#pragma once
#include <map>
#include <optional>
#include <string>

#include "core/hdf5_file.h"
#include "core/inputs.h"
#include "core/params.h"
#include "data/needle_workload.h"

namespace sgdn {

// Part of every workload id: raise it when a generator's output changes for the same parameters, so that
// experiment files never mix inputs of two generator versions under one id.
inline constexpr int kWorkloadGeneratorVersion = 1;

struct Workload {
  std::string kind;  // random | needle | file
  Inputs<double> inputs;
  std::map<std::string, std::string> attributes;  // the generator and its parameters
  std::optional<NeedleTruth> needle;              // needle workloads (also when read back from a file)
};

// `params` holds the [workload] section of a resolved run: kind, the shape keys, seed and the generator's
// keys, or path and id for `file`.
Workload make_workload(const Params& params);

// Writes /workloads/<wid>: inputs (when with_inputs), needle truth (when present) and exact/o.
void write_workload(h5::File& file, const std::string& wid, const Workload& workload,
                    const Tensor<double>& exact_o, bool with_inputs);
// Reads the needle truth of /workloads/<wid>/needle, if the file has one.
std::optional<NeedleTruth> read_needle_truth(const h5::File& file, const std::string& wid);

}  // namespace sgdn
