#include "data/workload.h"

#include "core/error.h"
#include "data/file_schema.h"
#include "data/file_workload.h"
#include "data/random_workload.h"

namespace sgdn {

namespace {

Shape shape_of(const Params& p) {
  Shape s;
  s.batch = p.get_int("batch", 1);
  s.tokens = p.get_int("tokens", 4096);
  s.qk_heads = p.get_int("qk_heads", 16);
  s.v_heads = p.get_int("v_heads", 32);
  s.key_dim = p.get_int("key_dim", 128);
  s.value_dim = p.get_int("value_dim", 128);
  s.validate();
  return s;
}

}  // namespace

Workload make_workload(const Params& p) {
  Workload w;
  w.kind = p.get_string("kind", "random");
  if (w.kind == "file") {
    const std::string path = p.get_string("path", "");
    const std::string id = p.get_string("id", "");
    require(!path.empty() && !id.empty(), "workload.kind = file needs workload.path and workload.id");
    FileWorkload f = load_file_workload(path, id);
    w.inputs = std::move(f.inputs);
    w.attributes = std::move(f.attributes);
    w.attributes["source_file"] = path;
    w.attributes["source_workload"] = id;
    const h5::File file = h5::File::open(path);
    w.needle = read_needle_truth(file, id);
    return w;
  }
  const Shape shape = shape_of(p);
  const uint64_t seed = uint64_t(p.get_int("seed", 0));
  if (w.kind == "random") {
    GeneratedWorkload g = random_workload(shape, seed, RandomWorkloadOptions::from_params(p));
    w.inputs = std::move(g.inputs);
    w.attributes = std::move(g.attributes);
  } else if (w.kind == "needle") {
    NeedleWorkload n = needle_workload(shape, seed, NeedleOptions::from_params(p));
    w.inputs = std::move(n.inputs);
    w.attributes = std::move(n.attributes);
    w.needle = std::move(n.truth);
  } else {
    fail("workload.kind = '", w.kind, "' is not known; allowed: random, needle, file");
  }
  return w;
}

void write_workload(h5::File& file, const std::string& wid, const Workload& w, const Tensor<double>& exact_o,
                    bool with_inputs) {
  const std::string root = "/workloads/" + wid;
  std::map<std::string, h5::AttrValue> attrs;
  for (const auto& [key, value] : w.attributes) attrs[key] = h5::attr_value_from_text(value);
  if (with_inputs) write_workload_inputs(file, wid, w.inputs, attrs);
  // The generator's parameters (the decay of each head, ...) stay with the workload when its inputs are not
  // written (dump.inputs = false, dump.level = analysis, metrics-only copies): the analysis reads them there.
  file.create_group(root);
  file.set_attrs(root, attrs);
  file.set_attr(root, "kind", w.kind);
  file.set_attr(root, "shape", w.inputs.shape.str());
  if (!exact_o.empty()) write_exact_outputs(file, wid, exact_o);  // absent with run.reference = false
  if (w.needle) {
    const NeedleTruth::Arrays arrays = w.needle->to_tensors();
    for (const auto& [name, t] : arrays.ints) write_described(file, root, "needle/" + name, t);
    for (const auto& [name, t] : arrays.floats) write_described(file, root, "needle/" + name, t);
  }
}

std::optional<NeedleTruth> read_needle_truth(const h5::File& file, const std::string& wid) {
  const std::string group = "/workloads/" + wid + "/needle";
  if (!file.is_group(group)) return std::nullopt;
  NeedleTruth::Arrays arrays;
  for (const std::string& name : file.children(group)) {
    const std::string path = group + "/" + name;
    if (file.is_dimension_scale(path)) continue;  // an axis (query, needle, ...), not a truth array
    if (file.dataset_info(path).element_class == h5::ElementClass::integer) {
      arrays.ints[name] = file.read<int32_t>(path);
    } else {
      arrays.floats[name] = file.read<float>(path);
    }
  }
  return NeedleTruth::from_tensors(arrays);
}

}  // namespace sgdn
