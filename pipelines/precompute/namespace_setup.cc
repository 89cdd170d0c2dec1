// pipelines/precompute/namespace_setup.cc: the namespace a precompute run writes (its
// fingerprint from the model and options, the rule of store_v1.md §7.3) and its attachments.
#include <cstring>
#include <nlohmann/json.hpp>

#include "ucm/model/fingerprint.h"
#include "precompute_internal.h"
#include "ucm/model/llama_model.h"
#include "ucm/namespace_match.h"
#include "ucm/tok/tokenizer.h"

namespace ucm::precompute {
Status make_namespace(const model::LlamaModel& m, const PrecomputeOptions& o, NamespaceDesc* out) {
  return NamespaceDesc::from_json(model::namespace_desc_json(m, o.fingerprint), out);
}

namespace detail {

Status setup_namespace(Store* store, const model::LlamaModel& m, const PrecomputeOptions& o, PrecomputeSummary* sum,
                       NamespaceId* ns_out, NamespaceDesc* desc_out, std::vector<float>* proj_out) {
  // Namespace (store_v1.md §7.3): reuse an identical fingerprint; refuse a same-model store with
  // another fingerprint unless the user names the new namespace explicitly.
  NamespaceDesc desc;
  UCM_RETURN_IF_ERROR(make_namespace(m, o, &desc));
  const NamespaceMatch found = match_namespace(store->namespaces(), desc, 0, o.store);
  if (!found.exact && !found.same_model.empty() && o.fingerprint.namespace_name.empty()) {
    std::string msg = "store " + o.store + " already holds model " + desc.model_id +
                      " under a different namespace fingerprint (";
    for (size_t i = 0; i < found.same_model.size(); ++i) msg += (i ? "; " : "") + found.same_model[i];
    msg += "); this run's namespace would be '" + desc.display_name() +
           "'. Use another store, or pass --namespace-name NAME to add it beside the existing one";
    return Status::InvalidArgument(msg);
  }
  NamespaceId ns{};
  std::vector<float> proj;
  UCM_RETURN_IF_ERROR(create_namespace(store, desc, &ns, &proj));  // with its r4_projection
  sum->namespace_id = to_hex(ns);
  sum->namespace_name = desc.display_name();
  {
    NamespaceDesc got;
    if (store->get_namespace(ns, &got).ok() && !got.name.empty()) sum->namespace_name = got.name;
  }
  *ns_out = ns;
  *desc_out = desc;
  *proj_out = std::move(proj);
  return Status::OK();
}

Status template_chunk_prefix(const tok::Tokenizer& tk, const std::string& prefix, const std::string& suffix,
                             std::vector<int32_t>* prefix_ids) {
  if (!suffix.empty())
    return Status::InvalidArgument("--chunks: the template has text after the document; a chunk is the template's "
                                   "prefix then the document (store_v1.md §4.4): use a template without a suffix");
  try {
    *prefix_ids = tk.encode(prefix);
  } catch (const std::exception& e) {
    return Status::InvalidArgument(std::string("--chunks: tokenizing the template's prefix: ") + e.what());
  }
  return Status::OK();
}

Status stored_chunk_prefix(Store* store, const NamespaceId& ns, std::vector<int32_t>* ids, bool* found) {
  std::string have;
  Status g = store->get_attachment(ns, "chunk_prefix", &have);
  *found = false;
  ids->clear();
  if (g.code() == Code::kNotFound) return Status::OK();
  if (!g.ok()) return g;
  if (have.size() % 4 != 0)
    return Status::Corruption("the namespace's chunk_prefix attachment is " + std::to_string(have.size()) +
                              " bytes, not a whole number of u32 token ids");
  for (size_t i = 0; i < have.size(); i += 4) {
    uint32_t t = 0;
    for (int b = 0; b < 4; ++b) t |= uint32_t(uint8_t(have[i + size_t(b)])) << (8 * b);
    ids->push_back(int32_t(t));
  }
  *found = true;
  return Status::OK();
}

Status put_chunk_attachments(Store* store, const model::LlamaModel& m, const NamespaceId& ns,
                             const std::vector<int32_t>& ids) {
  std::string want(ids.size() * 4, '\0');
  for (size_t i = 0; i < ids.size(); ++i) {
    const uint32_t t = uint32_t(ids[i]);
    for (int b = 0; b < 4; ++b) want[4 * i + b] = char((t >> (8 * b)) & 0xff);
  }
  const auto& c = m.config();
  nlohmann::ordered_json scaling;
  switch (c.rope_scaling.type) {
    case model::RopeScaling::Type::None: scaling = {{"type", "none"}}; break;
    case model::RopeScaling::Type::Linear: scaling = {{"type", "linear"}, {"factor", c.rope_scaling.factor}}; break;
    case model::RopeScaling::Type::Llama3:
      scaling = {{"type", "llama3"},
                 {"factor", c.rope_scaling.factor},
                 {"low_freq_factor", c.rope_scaling.low_freq_factor},
                 {"high_freq_factor", c.rope_scaling.high_freq_factor},
                 {"original_max_position_embeddings", c.rope_scaling.original_max_position_embeddings}};
      break;
  }
  const nlohmann::ordered_json rope = {
      {"style", "rotate_half"}, {"theta", c.rope_theta}, {"head_dim", c.head_dim}, {"scaling", scaling}};
  for (const auto& [name, data] : {std::pair<std::string, std::string>{"chunk_prefix", want}, {"rope", rope.dump()}}) {
    std::string have;
    Status g = store->get_attachment(ns, name, &have);
    if (g.ok()) {
      if (have != data)
        return Status::InvalidArgument(
            "--chunks: the namespace's " + name + " differs from this run's (" +
            (name == "chunk_prefix" ? std::to_string(have.size() / 4) + " stored tokens vs " +
                                          std::to_string(ids.size()) + "; a namespace has one chunk prefix: use "
                                          "the template its chunks were made with, or another store"
                                    : "stored " + have + " vs " + data) +
            ")");
    } else if (g.code() == Code::kNotFound) {
      Status st = store->put_attachment(ns, name, data.data(), data.size());
      if (!st.ok()) return Status(st.code(), "storing " + name + ": " + st.message());
    } else {
      return g;
    }
  }
  return Status::OK();
}

}  // namespace detail
}  // namespace ucm::precompute
