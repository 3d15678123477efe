#include "data/file_workload.h"

#include <algorithm>
#include <ctime>

#include "core/error.h"
#include "core/params.h"
#include "data/file_schema.h"

#ifndef SGDN_VERSION
#define SGDN_VERSION "unknown"
#endif

namespace sgdn {

namespace {

const char* const kWorkloadsGroup = "/workloads";

std::string inputs_group(const std::string& workload_id) {
  return concat(kWorkloadsGroup, "/", workload_id, "/inputs");
}
std::string exact_outputs_path(const std::string& workload_id) {
  return concat(kWorkloadsGroup, "/", workload_id, "/exact/o");
}

void require_valid_id(const std::string& workload_id) {
  require(!workload_id.empty() && workload_id.find('/') == std::string::npos && workload_id != "." &&
              workload_id != "..",
          "workload id '", workload_id, "' is not valid: it must be a non-empty name without '/'");
}

// Dims of an input dataset, with its element class and rank checked.
std::vector<int64_t> input_dims(const h5::File& file, const std::string& dataset_path, size_t rank,
                                const char* axes) {
  require(file.exists(dataset_path), "missing dataset '", dataset_path, "' in '", file.path(), "' (expected ",
          axes, ")");
  const h5::DatasetInfo info = file.dataset_info(dataset_path);
  require(info.element_class == h5::ElementClass::floating, "dataset '", dataset_path, "' in '", file.path(),
          "' must hold floating-point data (float32), not ",
          info.element_class == h5::ElementClass::integer ? "integers" : "non-numeric data");
  require(info.dims.size() == rank, "dataset '", dataset_path, "' in '", file.path(), "' has shape ",
          dims_str(info.dims), " but must have rank ", rank, ": ", axes);
  return info.dims;
}

void require_dims(const h5::File& file, const std::string& dataset_path, const std::vector<int64_t>& found,
                  const std::vector<int64_t>& expected, const char* axes) {
  require(found == expected, "dataset '", dataset_path, "' in '", file.path(), "' has shape ",
          dims_str(found), " but ", axes, " = ", dims_str(expected),
          " is expected (B, T, H, K from q; HV, V from v)");
}

bool parse_flag(const std::string& what, const std::string& text) {
  if (text == "TRUE") return true;  // h5py's bool enum
  if (text == "FALSE") return false;
  return parse_bool(what, text);  // 1/0, true/false, ...
}

}  // namespace

void write_schema_attributes(h5::File& file) {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char created[32];
  std::strftime(created, sizeof(created), "%Y-%m-%dT%H:%M:%SZ", &utc);
  file.set_attr("/", "schema_version", kSchemaVersion);
  file.set_attr("/", "sgdn_version", SGDN_VERSION);
  file.set_attr("/", "created", created);
}

void check_schema_version(const h5::File& file) {
  if (!file.has_attr("/", "schema_version")) return;
  const int64_t version = file.attr_int("/", "schema_version");
  require(version >= kOldestReadableSchemaVersion && version <= kSchemaVersion, "'", file.path(),
          "' has schema_version ", version, "; this program reads schema versions ",
          kOldestReadableSchemaVersion, " to ", kSchemaVersion);
}

void require_experiment_schema(const h5::File& file) {
  require(file.has_attr("/", "schema_version"), "'", file.path(),
          "' has no schema_version attribute: it is not an experiment file written by sgdn run (schema "
          "version ",
          kSchemaVersion, ")");
  check_schema_version(file);
}

void require_writable_experiment_schema(const h5::File& file) {
  require_experiment_schema(file);
  const int64_t version = file.attr_int("/", "schema_version");
  require(version == kSchemaVersion, "'", file.path(), "' has schema_version ", version,
          ": this program adds runs only to files of schema version ", kSchemaVersion,
          "; write to a new file (sgdn analyze and plot.py still read it)");
}

std::vector<std::string> list_workloads(const h5::File& file) {
  check_schema_version(file);
  require(file.is_group(kWorkloadsGroup), "'", file.path(), "' has no ", kWorkloadsGroup,
          " group: it is not a workload file (schema version ", kSchemaVersion, ")");
  return file.children(kWorkloadsGroup);
}

std::vector<std::string> list_workloads(const std::string& path) {
  return list_workloads(h5::File::open(path, h5::Mode::read_only));
}

FileWorkload load_file_workload(const h5::File& file, const std::string& workload_id) {
  const std::vector<std::string> known = list_workloads(file);
  if (std::find(known.begin(), known.end(), workload_id) == known.end()) {
    fail("workload '", workload_id, "' is not in '", file.path(),
         "'; it holds: ", known.empty() ? std::string("(no workloads)") : join(known, ", "));
  }
  const std::string group = inputs_group(workload_id);
  require(file.is_group(group), "workload '", workload_id, "' in '", file.path(), "' has no group '", group,
          "'");
  const std::string q_path = group + "/q", k_path = group + "/k", v_path = group + "/v";
  const std::string g_path = group + "/g", beta_path = group + "/beta", s0_path = group + "/initial_state";

  // The shape comes from q (B, T, H, K) and v (HV, V); every other dataset must agree with it.
  const std::vector<int64_t> q_dims = input_dims(file, q_path, 4, "[B, T, H, K]");
  const std::vector<int64_t> v_dims = input_dims(file, v_path, 4, "[B, T, HV, V]");
  Shape shape;
  shape.batch = q_dims[0];
  shape.tokens = q_dims[1];
  shape.qk_heads = q_dims[2];
  shape.key_dim = q_dims[3];
  shape.v_heads = v_dims[2];
  shape.value_dim = v_dims[3];
  const int64_t B = shape.batch, T = shape.tokens, HV = shape.v_heads;
  require_dims(file, k_path, input_dims(file, k_path, 4, "[B, T, H, K]"), q_dims, "[B, T, H, K]");
  require_dims(file, v_path, v_dims, {B, T, HV, shape.value_dim}, "[B, T, HV, V]");
  require_dims(file, g_path, input_dims(file, g_path, 3, "[B, T, HV]"), {B, T, HV}, "[B, T, HV]");
  require_dims(file, beta_path, input_dims(file, beta_path, 3, "[B, T, HV]"), {B, T, HV}, "[B, T, HV]");
  const bool with_initial_state = file.exists(s0_path);
  if (with_initial_state) {
    require_dims(file, s0_path, input_dims(file, s0_path, 4, "[B, HV, K, V]"),
                 {B, HV, shape.key_dim, shape.value_dim}, "[B, HV, K, V]");
  }
  const std::string context = concat("workload '", workload_id, "' in '", file.path(), "': ");
  try {
    shape.validate();
  } catch (const Error& error) {
    fail(context, error.what());
  }

  FileWorkload workload;
  workload.id = workload_id;
  workload.attributes = file.attrs(group);
  Inputs<double>& inputs = workload.inputs;
  inputs.shape = shape;
  inputs.q = file.read<double>(q_path);
  inputs.k = file.read<double>(k_path);
  inputs.v = file.read<double>(v_path);
  inputs.g = file.read<double>(g_path);
  inputs.beta = file.read<double>(beta_path);
  if (with_initial_state) inputs.initial_state = file.read<double>(s0_path);

  if (file.has_attr(group, "scale")) inputs.scale = file.attr_double(group, "scale");
  const auto flag = workload.attributes.find("allow_negative_eigenvalues");
  if (flag != workload.attributes.end()) {
    inputs.allow_negative_eigenvalues = parse_flag(concat(group, " attribute ", flag->first), flag->second);
  }
  try {
    validate(inputs);
  } catch (const Error& error) {
    fail(context, error.what());
  }
  return workload;
}

FileWorkload load_file_workload(const std::string& path, const std::string& workload_id) {
  return load_file_workload(h5::File::open(path, h5::Mode::read_only), workload_id);
}

std::vector<FileWorkload> load_file_workloads(const std::string& path, const std::string& workload_id) {
  const h5::File file = h5::File::open(path, h5::Mode::read_only);
  std::vector<FileWorkload> workloads;
  if (!workload_id.empty()) {
    workloads.push_back(load_file_workload(file, workload_id));
    return workloads;
  }
  const std::vector<std::string> ids = list_workloads(file);
  require(!ids.empty(), "'", path, "' holds no workloads under ", kWorkloadsGroup);
  for (const std::string& id : ids) workloads.push_back(load_file_workload(file, id));
  return workloads;
}

void write_workload_inputs(h5::File& file, const std::string& workload_id, const Inputs<double>& inputs,
                           const std::map<std::string, h5::AttrValue>& attributes) {
  require_valid_id(workload_id);
  validate(inputs);
  const std::string group = inputs_group(workload_id);
  require(!file.exists(group), "cannot write workload '", workload_id, "' to '", file.path(), "': '", group,
          "' exists");
  // Written to the group in one go; a failure part-way leaves a partial group, which AtomicFile discards.
  file.create_group(group);
  const std::string root = concat(kWorkloadsGroup, "/", workload_id);
  write_described(file, root, "inputs/q", inputs.q.cast<float>());
  write_described(file, root, "inputs/k", inputs.k.cast<float>());
  write_described(file, root, "inputs/v", inputs.v.cast<float>());
  write_described(file, root, "inputs/g", inputs.g.cast<float>());
  write_described(file, root, "inputs/beta", inputs.beta.cast<float>());
  if (inputs.has_initial_state())
    write_described(file, root, "inputs/initial_state", inputs.initial_state.cast<float>());
  file.set_attrs(group, attributes);
  if (inputs.scale > 0) file.set_attr(group, "scale", inputs.scale);
  if (inputs.allow_negative_eigenvalues) file.set_attr(group, "allow_negative_eigenvalues", int64_t{1});
}

void write_exact_outputs(h5::File& file, const std::string& workload_id, const Tensor<double>& outputs) {
  require_valid_id(workload_id);
  require(outputs.dims().size() == 4, "exact outputs of workload '", workload_id,
          "' must be [B, T, HV, V], got ", dims_str(outputs.dims()));
  write_described(file, concat(kWorkloadsGroup, "/", workload_id), "exact/o", outputs.cast<float>());
}

bool has_exact_outputs(const h5::File& file, const std::string& workload_id) {
  return file.is_dataset(exact_outputs_path(workload_id));
}

Tensor<double> load_exact_outputs(const h5::File& file, const std::string& workload_id, const Shape& shape) {
  const std::string path = exact_outputs_path(workload_id);
  const std::vector<int64_t> expected = {shape.batch, shape.tokens, shape.v_heads, shape.value_dim};
  require_dims(file, path, input_dims(file, path, 4, "[B, T, HV, V]"), expected, "[B, T, HV, V]");
  return file.read<double>(path);
}

}  // namespace sgdn
