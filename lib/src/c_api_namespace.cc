// lib/src/c_api_namespace.cc: the C ABI (ucm/ucm.h) of namespace identity: a model's
// fingerprint, the namespace a model may use, creating one (store_v1.md §7.3).
#include <cstring>
#include <string>
#include <vector>

#include "ucm/core/c_api_internal.h"
#include "ucm/model/identity.h"
#include "ucm/namespace_match.h"
#include "ucm/store.h"
#include "ucm/ucm.h"

using namespace ucm::capi;

namespace {

ucm::Status parse_desc(const char* json, ucm::NamespaceDesc* d) {
  UCM_RETURN_IF_ERROR(ucm::NamespaceDesc::from_json(json, d));
  return d->validate();
}

}  // namespace

UCM_API int ucm_model_fingerprint(const char* model_dir, const char* options_json, char* desc_json, size_t desc_cap,
                                  size_t* desc_len) {
  return guarded("ucm_model_fingerprint", [&] {
    if (!model_dir || !desc_len)
      return fail(UCM_E_INVALID, "ucm_model_fingerprint: model_dir and desc_len must not be NULL");
    ucm::model::FingerprintOptions o;
    ucm::Status s = ucm::model::fingerprint_options_from_json(options_json ? options_json : "", &o);
    std::string out;
    if (s.ok()) s = ucm::model::model_fingerprint(model_dir, o, &out);
    if (!s.ok()) return fail(s);
    return sized_output("ucm_model_fingerprint", out, true, desc_json, desc_cap, desc_len);
  });
}

UCM_API int ucm_store_namespace_match(ucm_store_t* store, const char* desc_json, uint32_t engine_block,
                                      const char* name_or_id, uint8_t* ns_out, int* exact_out) {
  return guarded("ucm_store_namespace_match", [&] {
    if (!store || !desc_json || !ns_out)
      return fail(UCM_E_INVALID, "ucm_store_namespace_match: store, desc_json and ns_out must not be NULL");
    ucm::NamespaceDesc want;
    ucm::Status s = parse_desc(desc_json, &want);
    if (!s.ok()) return fail(s);
    std::vector<ucm::NamespaceDesc> listed;
    if (name_or_id) {  // that namespace only
      ucm::NamespaceDesc d;
      ucm::NamespaceId id;
      s = store->s->find_namespace(name_or_id, &d, &id);
      if (!s.ok()) return fail(s);
      listed.push_back(std::move(d));
    } else {
      listed = store->s->namespaces();
    }
    const ucm::NamespaceMatch m = ucm::match_namespace(listed, want, engine_block, store->s->path());
    if (!m.found) return fail(UCM_E_NOT_FOUND, m.message);
    std::memcpy(ns_out, m.id.data(), 16);
    if (exact_out) *exact_out = m.exact ? 1 : 0;
    return ok();
  });
}

UCM_API int ucm_store_namespace_create(ucm_store_t* store, const char* desc_json, uint8_t* ns_out) {
  return guarded("ucm_store_namespace_create", [&] {
    if (!store || !desc_json)
      return fail(UCM_E_INVALID, "ucm_store_namespace_create: store and desc_json must not be NULL");
    ucm::NamespaceDesc want;
    ucm::Status s = parse_desc(desc_json, &want);
    ucm::NamespaceId id{};
    if (s.ok()) s = ucm::create_namespace(store->s.get(), want, &id);
    if (!s.ok()) return fail(s);
    if (ns_out) std::memcpy(ns_out, id.data(), 16);
    return ok();
  });
}
