#include "data/file_schema.h"

#include <map>

#include "core/error.h"
#include "core/params.h"

namespace sgdn {

namespace {

const std::map<std::string, DatasetSchema>& schema_table() {
  using D = std::vector<std::string>;
  static const std::map<std::string, DatasetSchema> table = {
      // /workloads/<wid>/
      {"inputs/q", {D{"batch", "token", "qk_head", "key"}, "1", "queries q_t"}},
      {"inputs/k", {D{"batch", "token", "qk_head", "key"}, "1", "keys k_t"}},
      {"inputs/v", {D{"batch", "token", "head", "value"}, "1", "values v_t"}},
      {"inputs/g",
       {D{"batch", "token", "head"}, "1", "log decay g_t <= 0 (the state is scaled by exp(g_t))"}},
      {"inputs/beta", {D{"batch", "token", "head"}, "1", "delta-rule write strength beta_t in (0, 1]"}},
      {"inputs/initial_state", {D{"batch", "head", "key", "value"}, "1", "state S_0 before the first token"}},
      {"exact/o",
       {D{"batch", "token", "head", "value"}, "1", "exact outputs (float64 recurrence, stored float32)"}},
      {"needle/retrieval_heads", {D{"retrieval_head"}, "1", "value heads whose outputs are read"}},
      {"needle/codebook",
       {D{"entry", "retrieval_head", "value"}, "1", "candidate values (one per retrieval head per entry)"}},
      {"needle/query_sequence", {D{"query"}, "1", "batch index of each query"}},
      {"needle/query_token", {D{"query"}, "1", "token of each query"}},
      {"needle/query_depth", {D{"query"}, "percent", "depth of the queried needle in its sequence"}},
      {"needle/answer", {D{"query", "answer_slot"}, "1", "correct codebook entries of each query"}},
      {"needle/needle_sequence", {D{"needle"}, "1", "batch index of each needle write"}},
      {"needle/needle_token", {D{"needle"}, "1", "token of each needle write"}},
      {"needle/needle_value", {D{"needle"}, "1", "codebook entry each needle writes"}},
      {"needle/needle_query", {D{"needle"}, "1", "query that reads each needle (-1: a distractor)"}},
      // /runs/<rid>/
      {"outputs/o", {D{"batch", "token", "head", "value"}, "1", "outputs of this run"}},
      {"events/mask",
       {D{"batch", "head", "chunk"}, "1", "1 where the chunk wrote into the head's carried state"}},
      {"events/score", {D{"batch", "head", "chunk"}, "1", "score each event was ranked by"}},
      {"events/budget", {D{"batch", "unit"}, "chunks", "events each unit (head group or head) received"}},
      {"states/snapshots",
       {D{"snapshot", "key", "value"}, "1", "S_0 and the carried state after each event"}},
      {"states/snapshot_index",
       {D{"snapshot", "field"}, "1", "(batch, head, chunk after which the snapshot was taken; -1 for S_0)"}},
      {"metrics/output_error_per_head", {D{"head"}, "1", "relative output error of each value head"}},
      {"metrics/output_error_per_bucket", {D{"bucket"}, "1", "relative output error per position bucket"}},
      {"metrics/bucket_start", {D{"bucket"}, "tokens", "first token of each position bucket"}},
      {"metrics/retention_per_unit", {D{"unit"}, "1", "share of chunks each unit kept"}},
      {"metrics/state_error",
       {D{"batch", "head", "chunk"}, "1", "relative error of the carried state after each chunk"}},
      {"metrics/state_error_per_chunk",
       {D{"chunk"}, "1", "relative state error after each chunk, all heads"}},
      {"metrics/needle_correct", {D{"query"}, "1", "1 where the query read the right answer"}},
      {"metrics/needle_answer_cosine", {D{"query"}, "1", "cosine of the read-out with the right answer"}},
      {"metrics/needle_depths", {D{"depth"}, "percent", "needle depths measured"}},
      {"metrics/needle_accuracy_by_depth",
       {D{"depth"}, "1", "share of queries answered right at each depth"}},
  };
  return table;
}

}  // namespace

const DatasetSchema& dataset_schema(const std::string& name) {
  const auto& table = schema_table();
  const auto it = table.find(name);
  require(it != table.end(), "dataset '", name,
          "' is not in the experiment file schema (data/file_schema.cpp)");
  return it->second;
}

template <class T>
void write_described(h5::File& file, const std::string& root, const std::string& name,
                     const Tensor<T>& data) {
  const DatasetSchema& schema = dataset_schema(name);
  const std::string path = root + "/" + name;
  require(data.dims().size() == schema.dims.size(), "dataset '", path, "' has dims ", dims_str(data.dims()),
          "; the schema gives it ", schema.dims.size(), " axes: ", join(schema.dims, ", "));
  file.write(path, data);
  file.set_dimensions(path, schema.dims);
  file.set_attr(path, "units", schema.units);
  file.set_attr(path, "description", schema.description);
}

template void write_described(h5::File&, const std::string&, const std::string&, const Tensor<float>&);
template void write_described(h5::File&, const std::string&, const std::string&, const Tensor<double>&);
template void write_described(h5::File&, const std::string&, const std::string&, const Tensor<uint8_t>&);
template void write_described(h5::File&, const std::string&, const std::string&, const Tensor<int32_t>&);
template void write_described(h5::File&, const std::string&, const std::string&, const Tensor<int64_t>&);

}  // namespace sgdn
