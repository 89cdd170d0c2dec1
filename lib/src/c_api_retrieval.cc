// lib/src/c_api_retrieval.cc: the C ABI of ucm/retrieval.h (representation loads, retriever) over
// lib/src/repr_load.h and lib/src/retrieval/. No exception crosses this boundary.
#include "ucm/retrieval.h"

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "ucm/core/c_api_internal.h"
#include "ucm/core/c_struct.h"
#include "ucm/core/repr_encode.h"
#include "ucm/core/repr_load.h"
#include "ucm/core/retrieval/params.h"
#include "ucm/core/retrieval/retriever.h"

struct ucm_retriever {
  std::unique_ptr<ucm::retrieval::Retriever> r;
};

using ucm::capi::fail;
using ucm::capi::guarded;
using ucm::capi::hashes_of;
using ucm::capi::ns_of;
using ucm::capi::ok;
using ucm::capi::read_struct;
using ucm::capi::write_struct;

static_assert(UCM_DTYPE_BF16 == static_cast<int>(ucm::DType::kBF16) && UCM_DTYPE_F16 == static_cast<int>(ucm::DType::kFP16) &&
              UCM_DTYPE_F32 == static_cast<int>(ucm::DType::kFP32));

extern "C" {

UCM_API int ucm_store_repr_info(ucm_store_t* store, const uint8_t* ns, ucm_repr_info* out) {
  return guarded("ucm_store_repr_info", [&] {
    if (!store || !ns || !out) return fail(UCM_E_INVALID, "ucm_store_repr_info: store, ns and out must not be NULL");
    ucm::Status s = ucm::capi::check_struct_size<ucm_repr_info>("ucm_store_repr_info: out", out->struct_size);
    if (!s.ok()) return fail(s);
    ucm::NamespaceDesc d;
    s = store->s->get_namespace(ns_of(ns), &d);
    if (!s.ok()) return fail(s);
    ucm::detail::ReprGeometry g;
    s = ucm::detail::repr_geometry(d, &g);
    if (!s.ok()) return fail(s);
    ucm_repr_info info{};
    info.struct_size = sizeof info;
    ucm::detail::repr_info_from(g, &info);
    s = write_struct("ucm_store_repr_info: out", info, out);
    return s.ok() ? ok() : fail(s);
  });
}

UCM_API int ucm_store_load_repr(ucm_store_t* store, const uint8_t* ns, const uint8_t* hashes, size_t n,
                                const ucm_repr_buffers* dst, size_t first, ucm_task_t** task) {
  return guarded("ucm_store_load_repr", [&] {
    if (task) *task = nullptr;
    if (!store || !ns || !dst || !task || (n && !hashes))
      return fail(UCM_E_INVALID, "ucm_store_load_repr: store, ns, hashes, dst and task must not be NULL");
    ucm_repr_buffers b{};
    ucm::Status s = read_struct("ucm_store_load_repr: dst", dst, &b);
    if (!s.ok()) return fail(s);
    ucm::NamespaceDesc d;
    s = store->s->get_namespace(ns_of(ns), &d);
    if (!s.ok()) return fail(s);
    auto g = std::make_shared<ucm::detail::ReprGeometry>();
    s = ucm::detail::repr_geometry(d, g.get());
    if (!s.ok()) return fail(s);
    ucm::detail::ReprDest rd;
    s = ucm::detail::resolve_repr_dest(*g, &b, first, n, &rd);
    if (!s.ok()) return fail(UCM_E_INVALID, "ucm_store_load_repr: " + s.message());
    auto t = store->s->visit_repr(ns_of(ns), hashes_of(hashes), n,
                                  [g, rd, first](size_t i, const uint8_t* p, size_t len) {
                                    return ucm::detail::scatter_repr(*g, rd, first + i, p, len);
                                  });
    return ucm::capi::finish_task(std::move(t), task);
  });
}

UCM_API int ucm_repr_encode(const ucm_repr_info* info_in, const float* keys, const float* projection, void* out,
                            size_t cap, size_t* len) {
  return guarded("ucm_repr_encode", [&] {
    if (!info_in || !len) return fail(UCM_E_INVALID, "ucm_repr_encode: info and len must not be NULL");
    ucm_repr_info ri{};
    const ucm::Status rs = read_struct("ucm_repr_encode: info", info_in, &ri);
    if (!rs.ok()) return fail(rs);
    const ucm_repr_info* info = &ri;
    if (!info->num_layers || !info->num_kv_heads || !info->head_dim || !info->block_size)
      return fail(UCM_E_INVALID, "ucm_repr_encode: info has a zero num_layers, num_kv_heads, head_dim or block_size");
    if (info->hash_bits == 0 || info->hash_bits % 8 != 0)
      return fail(UCM_E_INVALID, "ucm_repr_encode: info->hash_bits " + std::to_string(info->hash_bits) +
                                     " is not a positive multiple of 8 (a namespace without R4 has no repr to encode)");
    if (info->dtype != UCM_DTYPE_BF16 && info->dtype != UCM_DTYPE_F16 && info->dtype != UCM_DTYPE_F32)
      return fail(UCM_E_INVALID, "ucm_repr_encode: info->dtype " + std::to_string(info->dtype) + " is not a UCM_DTYPE_*");
    ucm::repr::ReprSpec spec{info->num_layers, info->num_kv_heads, info->head_dim, info->block_size,
                             info->hash_bits, static_cast<ucm::DType>(info->dtype)};
    uint64_t total = 0;
    ucm::repr::repr_layout(spec, &total);
    *len = size_t(total);
    if (!out || cap < total)
      return fail(UCM_E_INVALID, "ucm_repr_encode: the payload needs " + std::to_string(total) + " bytes, cap is " +
                                     std::to_string(cap) + " (*len says how many)");
    if (!keys || !projection) return fail(UCM_E_INVALID, "ucm_repr_encode: keys and projection must not be NULL");
    const size_t per_layer = size_t{info->block_size} * info->num_kv_heads * info->head_dim;
    std::vector<const float*> kl(info->num_layers);
    for (uint32_t l = 0; l < info->num_layers; ++l) kl[l] = keys + l * per_layer;
    std::string payload;
    ucm::repr::encode_block_repr(spec, kl.data(), size_t{info->num_kv_heads} * info->head_dim, nullptr, 0, projection,
                                 &payload);
    std::memcpy(out, payload.data(), payload.size());
    return ok();
  });
}

UCM_API ucm_retriever_params ucm_retriever_default_params(void) { return ucm::retrieval::default_params(); }

UCM_API int ucm_retriever_params_load(const char* yaml_path, ucm_retriever_params* params) {
  return guarded("ucm_retriever_params_load", [&] {
    if (!yaml_path || !params)
      return fail(UCM_E_INVALID, "ucm_retriever_params_load: yaml_path and params must not be NULL");
    ucm::Status s = ucm::capi::check_struct_size<ucm_retriever_params>("ucm_retriever_params_load: params",
                                                                       params->struct_size);
    ucm_retriever_params p = ucm::retrieval::default_params();
    if (s.ok()) s = ucm::retrieval::load_params_yaml(yaml_path, &p);
    if (s.ok()) s = write_struct("ucm_retriever_params_load: params", p, params);
    return s.ok() ? ok() : fail(s);
  });
}

UCM_API int ucm_retriever_create(const ucm_retriever_params* params, const ucm_repr_info* info,
                                 const float* projection, ucm_retriever_t** out) {
  return guarded("ucm_retriever_create", [&] {
    if (out) *out = nullptr;
    if (!params || !info || !out)
      return fail(UCM_E_INVALID, "ucm_retriever_create: params, info and out must not be NULL");
    ucm_retriever_params p = ucm::retrieval::default_params();
    ucm_repr_info i{};
    ucm::Status s = read_struct("ucm_retriever_create: params", params, p, &p);
    if (s.ok()) s = read_struct("ucm_retriever_create: info", info, &i);
    if (!s.ok()) return fail(s);
    std::unique_ptr<ucm::retrieval::Retriever> r;
    s = ucm::retrieval::Retriever::Create(p, i, projection, &r);
    if (!s.ok()) return fail(s);
    *out = new ucm_retriever{std::move(r)};
    return ok();
  });
}

UCM_API void ucm_retriever_free(ucm_retriever_t* r) {
  try {
    delete r;
  } catch (...) {
  }
}

UCM_API int ucm_retriever_select(ucm_retriever_t* r, const ucm_retrieval_query* query, uint32_t* indices, size_t cap,
                                 uint32_t* counts, uint32_t* n_sets) {
  return guarded("ucm_retriever_select", [&] {
    if (!r || !query) return fail(UCM_E_INVALID, "ucm_retriever_select: retriever and query must not be NULL");
    // The query and the buffers it points at, as this library's structs (the growth rule).
    ucm_retrieval_query q{};
    ucm_repr_buffers b{};
    ucm::Status s = read_struct("query", query, &q);
    if (s.ok() && q.reprs) {
      s = read_struct("reprs", q.reprs, &b);
      q.reprs = &b;
    }
    if (s.ok()) s = r->r->select(q, indices, cap, counts, n_sets);
    if (!s.ok()) return fail(UCM_E_INVALID, "ucm_retriever_select: " + s.message());
    return ok();
  });
}

UCM_API void ucm_retriever_reset(ucm_retriever_t* r) {
  if (r) r->r->reset();
}

}  // extern "C"
