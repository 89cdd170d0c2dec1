// lib/src/c_api.cc: the C ABI (ucm/ucm.h) over ucm::Store. No exception crosses this boundary.
#include "ucm/ucm.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>

#include "ucm/core/c_api_internal.h"
#include "ucm/core/c_struct.h"
#include "ucm/format/format.h"
#include "ucm/format/shards.h"
#include "ucm/core/log.h"
#include "ucm/kv_event_blocks.h"
#include "ucm/hash.h"
#include "ucm/status.h"
#include "ucm/store.h"

// The return codes are ucm::Code's values (ucm/status.h).
static_assert(UCM_OK == static_cast<int>(ucm::Code::kOk));
static_assert(UCM_E_NOT_FOUND == static_cast<int>(ucm::Code::kNotFound));
static_assert(UCM_E_CORRUPTION == static_cast<int>(ucm::Code::kCorruption));
static_assert(UCM_E_INVALID == static_cast<int>(ucm::Code::kInvalidArgument));
static_assert(UCM_E_IO == static_cast<int>(ucm::Code::kIOError));
static_assert(UCM_E_BUSY == static_cast<int>(ucm::Code::kBusy));
static_assert(UCM_E_VERSION == static_cast<int>(ucm::Code::kVersion));
static_assert(UCM_E_NOT_SUPPORTED == static_cast<int>(ucm::Code::kNotSupported));
static_assert(UCM_E_NO_SPACE == static_cast<int>(ucm::Code::kNoSpace));
static_assert(UCM_E_PENDING == static_cast<int>(ucm::Code::kPending));
static_assert(UCM_E_INTERNAL == static_cast<int>(ucm::Code::kInternal));
static_assert(UCM_LOG_DEBUG == static_cast<int>(ucm::LogLevel::kDebug) &&
              UCM_LOG_ERROR == static_cast<int>(ucm::LogLevel::kError));

using ucm::capi::fail;
using ucm::capi::guarded;
using ucm::capi::hashes_of;
using ucm::capi::ns_of;
using ucm::capi::ok;
using ucm::capi::sized_output;

namespace ucm::capi {
std::string& last_error() {
  thread_local std::string e;
  return e;
}

int finish_task(std::shared_ptr<ucm::Task> t, ucm_task_t** out) {
  if (t->done()) {
    // A task that failed before any I/O (bad argument) is reported at once, like the C++ API,
    // but still handed out so per-block status can be read.
    ucm::Status s = t->wait(0);
    if (!s.ok() && (s.code() == ucm::Code::kInvalidArgument)) {
      return fail(s);
    }
  }
  *out = new ucm_task{std::move(t)};
  return ok();
}
}  // namespace ucm::capi

using ucm::capi::finish_task;

extern "C" {

UCM_API const char* ucm_version(void) { return UCM_VERSION_STRING; }
// The newest format read and written: a sharded root (3) is newer than a single-writer store (2).
UCM_API uint32_t ucm_format_version(void) {
  return std::max(ucm::fmt::kFormatVersion, ucm::fmt::kShardedFormatVersion);
}
UCM_API const char* ucm_last_error(void) { return ucm::capi::last_error().c_str(); }

UCM_API const char* ucm_code_name(int code) {
  switch (code) {
    case UCM_OK: return "UCM_OK";
    case UCM_E_NOT_FOUND: return "UCM_E_NOT_FOUND";
    case UCM_E_CORRUPTION: return "UCM_E_CORRUPTION";
    case UCM_E_INVALID: return "UCM_E_INVALID";
    case UCM_E_IO: return "UCM_E_IO";
    case UCM_E_BUSY: return "UCM_E_BUSY";
    case UCM_E_VERSION: return "UCM_E_VERSION";
    case UCM_E_NOT_SUPPORTED: return "UCM_E_NOT_SUPPORTED";
    case UCM_E_NO_SPACE: return "UCM_E_NO_SPACE";
    case UCM_E_PENDING: return "UCM_E_PENDING";
    case UCM_E_INTERNAL: return "UCM_E_INTERNAL";
    default: return "UCM_E_UNKNOWN";
  }
}

UCM_API const char* ucm_strerror(int code) {
  switch (code) {
    case UCM_OK: return "success";
    case UCM_E_NOT_FOUND: return "not found: the block or namespace is not in the store (a miss: compute it)";
    case UCM_E_CORRUPTION:
      return "corruption: a checksum or header did not match; the block is treated as a miss and nothing "
             "was copied (or the store itself is damaged: see ucm_last_error)";
    case UCM_E_INVALID: return "invalid argument: ucm_last_error says which";
    case UCM_E_IO: return "I/O error from the operating system: ucm_last_error names the file and the error";
    case UCM_E_BUSY: return "busy: another process holds the store's writer lock";
    case UCM_E_VERSION: return "the store's format version is newer than this library: upgrade libucm";
    case UCM_E_NOT_SUPPORTED: return "not supported by this build or this handle (e.g. a write on a read-only handle)";
    case UCM_E_NO_SPACE: return "no space left on the store's file system: nothing of the failed task was committed";
    case UCM_E_PENDING: return "pending: the task has not finished yet";
    case UCM_E_INTERNAL: return "internal error in libucm: please report it with ucm_last_error";
    default: return "unknown return code";
  }
}

UCM_API void ucm_log_set_callback(ucm_log_callback cb, void* user_data, int32_t min_level) {
  try {
    ucm::set_log_callback(reinterpret_cast<ucm::LogCallback>(cb), user_data,
                          static_cast<ucm::LogLevel>(std::clamp(min_level, UCM_LOG_DEBUG, UCM_LOG_ERROR)));
  } catch (...) {
  }
}

UCM_API ucm_store_open_params ucm_store_default_open_params(void) {
  const ucm::OpenOptions d;
  ucm_store_open_params p{};
  p.struct_size = sizeof(ucm_store_open_params);
  p.mode = UCM_OPEN_READ_ONLY;
  p.io_threads = d.io_threads;
  p.direct_io = d.direct_io ? 1 : 0;
  p.refresh_interval_ms = d.refresh_interval_ms;
  p.reader_dir = nullptr;
  return p;
}

UCM_API int ucm_store_open(const char* path, const ucm_store_open_params* params, ucm_store_t** out) {
  return ucm_store_open_shard(path, params, nullptr, out);
}

UCM_API int ucm_store_open_shard(const char* path, const ucm_store_open_params* params, const char* shard,
                                 ucm_store_t** out) {
  return guarded("ucm_store_open", [&] {
    if (out) *out = nullptr;
    if (!path || !out) return fail(UCM_E_INVALID, "ucm_store_open: path and out must not be NULL");
    ucm_store_open_params p = ucm_store_default_open_params();
    if (params) {
      ucm::Status st = ucm::capi::read_struct("ucm_store_open: params", params, p, &p);
      if (!st.ok()) return fail(st);
    }
    ucm::OpenOptions o;
    switch (p.mode) {
      case UCM_OPEN_READ_ONLY: o.mode = ucm::OpenOptions::Mode::kReadOnly; break;
      case UCM_OPEN_READ_WRITE: o.mode = ucm::OpenOptions::Mode::kReadWrite; break;
      case UCM_OPEN_CREATE:
        o.mode = ucm::OpenOptions::Mode::kReadWrite;
        o.create_if_missing = true;
        break;
      default:
        return fail(UCM_E_INVALID, "ucm_store_open: unknown mode " + std::to_string(p.mode) + " (use UCM_OPEN_*)");
    }
    if (p.io_threads == 0) return fail(UCM_E_INVALID, "ucm_store_open: io_threads is 0");
    o.io_threads = p.io_threads;
    o.direct_io = p.direct_io != 0;
    o.refresh_interval_ms = p.refresh_interval_ms;
    if (p.reader_dir) o.reader_dir = p.reader_dir;
    if (shard) o.shard = shard;
    std::unique_ptr<ucm::Store> s;
    ucm::Status st = ucm::Store::Open(path, o, &s);
    if (!st.ok()) return fail(st);
    *out = new ucm_store{std::move(s)};
    return ok();
  });
}

UCM_API void ucm_store_close(ucm_store_t* store) {
  try {
    delete store;
  } catch (...) {
  }
}

UCM_API int ucm_store_refresh(ucm_store_t* store) {
  return guarded("ucm_store_refresh", [&] {
    if (!store) return fail(UCM_E_INVALID, "ucm_store_refresh: store is NULL");
    ucm::Status s = store->s->refresh();
    return s.ok() ? ok() : fail(s);
  });
}

UCM_API int ucm_store_namespace_find(ucm_store_t* store, const char* name_or_id, uint8_t* ns_out, char* desc_json,
                                     size_t desc_cap, size_t* desc_len) {
  return guarded("ucm_store_namespace_find", [&] {
    if (!store || !name_or_id) return fail(UCM_E_INVALID, "ucm_store_namespace_find: store and name_or_id must not be NULL");
    ucm::NamespaceDesc d;
    ucm::NamespaceId id;
    ucm::Status s = store->s->find_namespace(name_or_id, &d, &id);
    if (!s.ok()) return fail(s);
    if (ns_out) std::memcpy(ns_out, id.data(), 16);
    return sized_output("ucm_store_namespace_find", d.to_json(), true, desc_json, desc_cap, desc_len);
  });
}

UCM_API int ucm_store_namespace_list(ucm_store_t* store, char* json, size_t cap, size_t* len) {
  return guarded("ucm_store_namespace_list", [&] {
    if (!store || !len) return fail(UCM_E_INVALID, "ucm_store_namespace_list: store and len must not be NULL");
    std::string out = "[";
    bool first = true;
    for (const auto& d : store->s->namespaces()) {
      std::string j = d.to_json();  // an object: add its id in front
      out += (first ? "" : ",") + std::string("{\"id\":\"") + ucm::to_hex(d.id()) + "\"," + j.substr(1);
      first = false;
    }
    out += "]";
    return sized_output("ucm_store_namespace_list", out, true, json, cap, len);
  });
}

UCM_API int ucm_store_namespace_hash_seed(ucm_store_t* store, const uint8_t* ns, uint8_t* seed_out) {
  return guarded("ucm_store_namespace_hash_seed", [&] {
    if (!store || !ns || !seed_out)
      return fail(UCM_E_INVALID, "ucm_store_namespace_hash_seed: store, ns and seed_out must not be NULL");
    ucm::NamespaceDesc d;
    ucm::Status s = store->s->get_namespace(ns_of(ns), &d);
    if (!s.ok()) return fail(s);
    const ucm::NamespaceId seed = d.hash_seed();
    std::memcpy(seed_out, seed.data(), 16);
    return ok();
  });
}

UCM_API int ucm_namespace_id(const char* desc_json, uint8_t* id_out) {
  return guarded("ucm_namespace_id", [&] {
    if (!desc_json || !id_out) return fail(UCM_E_INVALID, "ucm_namespace_id: desc_json and id_out must not be NULL");
    ucm::NamespaceDesc d;
    ucm::Status s = ucm::NamespaceDesc::from_json(desc_json, &d);
    if (s.ok()) s = d.validate();
    if (!s.ok()) return fail(s);
    const ucm::NamespaceId id = d.id();
    std::memcpy(id_out, id.data(), 16);
    return ok();
  });
}

UCM_API int ucm_store_namespace_register(ucm_store_t* store, const char* desc_json, uint8_t* ns_out) {
  return guarded("ucm_store_namespace_register", [&] {
    if (!store || !desc_json) return fail(UCM_E_INVALID, "ucm_store_namespace_register: store and desc_json must not be NULL");
    ucm::NamespaceDesc d;
    ucm::Status s = ucm::NamespaceDesc::from_json(desc_json, &d);
    if (!s.ok()) return fail(s);
    ucm::NamespaceId id;
    s = store->s->register_namespace(d, &id);
    if (!s.ok()) return fail(s);
    if (ns_out) std::memcpy(ns_out, id.data(), 16);
    return ok();
  });
}

UCM_API int ucm_store_attachment_get(ucm_store_t* store, const uint8_t* ns, const char* name, void* buf, size_t cap,
                                     size_t* len) {
  return guarded("ucm_store_attachment_get", [&] {
    if (!store || !ns || !name) return fail(UCM_E_INVALID, "ucm_store_attachment_get: store, ns and name must not be NULL");
    std::string data;
    ucm::Status s = store->s->get_attachment(ns_of(ns), name, &data);
    if (!s.ok()) return fail(s);
    return sized_output("ucm_store_attachment_get", data, false, buf, cap, len);
  });
}

UCM_API int ucm_store_document_get(ucm_store_t* store, const uint8_t* ns, const char* id, char* source, size_t cap,
                                   uint64_t* blocks, uint64_t* tokens) {
  return guarded("ucm_store_document_get", [&] {
    if (!store || !ns || !id) return fail(UCM_E_INVALID, "ucm_store_document_get: store, ns and id must not be NULL");
    ucm::DocumentEntry e;
    ucm::Status s = store->s->get_document(ns_of(ns), id, &e);
    if (!s.ok()) return fail(s);
    if (blocks) *blocks = e.blocks;
    if (tokens) *tokens = e.tokens;
    return sized_output("ucm_store_document_get", e.source, true, source, cap, nullptr);
  });
}

UCM_API int ucm_store_document_put(ucm_store_t* store, const uint8_t* ns, const char* id, const char* source,
                                   const uint32_t* tokens, size_t n_tokens, const char* input) {
  return guarded("ucm_store_document_put", [&] {
    if (!store || !ns || !id || !source)
      return fail(UCM_E_INVALID, "ucm_store_document_put: store, ns, id and source must not be NULL");
    if (n_tokens && !tokens) return fail(UCM_E_INVALID, "ucm_store_document_put: tokens is NULL");
    if (store->s->read_only())
      return fail(UCM_E_INVALID, "ucm_store_document_put: the store is open read-only (open it as a writer)");
    ucm::NamespaceDesc d;
    ucm::Status s = store->s->get_namespace(ns_of(ns), &d);
    if (!s.ok()) return fail(s);
    std::vector<ucm::BlockHash> hs;
    ucm::hash_blocks(ucm::root_hash(d.hash_seed()), tokens, n_tokens, d.block_size, &hs);
    if (hs.empty())
      return fail(UCM_E_INVALID, "ucm_store_document_put: document " + std::string(id) + " has " +
                                     std::to_string(n_tokens) + " ids, less than one block of " +
                                     std::to_string(d.block_size));
    ucm::BlockInfo last;
    s = store->s->get_block(ns_of(ns), hs.back(), &last);
    if (!s.ok())
      return fail(s.code() == ucm::Code::kNotFound ? UCM_E_NOT_FOUND : UCM_E_IO,
                  "ucm_store_document_put: document " + std::string(id) + ": its last full block " +
                      ucm::to_hex(hs.back()) + " is not stored (register a document after its blocks are durable)");
    ucm::DocumentEntry e;
    e.id = id;
    e.source = source;
    e.first_block = hs.front();
    e.last_block = hs.back();
    e.blocks = uint32_t(hs.size());
    e.tokens = n_tokens;
    e.created_ms = uint64_t(std::chrono::duration_cast<std::chrono::milliseconds>(
                                std::chrono::system_clock::now().time_since_epoch()).count());
    e.input = input ? input : "";
    s = store->s->put_document(ns_of(ns), e);
    return s.ok() ? ok() : fail(s);
  });
}

UCM_API int ucm_hash_blocks(const uint8_t* ns, const uint8_t* parent, const uint32_t* tokens, size_t n_tokens,
                            uint32_t block_size, uint8_t* out_hashes, size_t max_blocks, size_t* n_blocks) {
  return guarded("ucm_hash_blocks", [&] {
    if (!ns && !parent) return fail(UCM_E_INVALID, "ucm_hash_blocks: ns (or parent) must not be NULL");
    if (block_size == 0) return fail(UCM_E_INVALID, "ucm_hash_blocks: block_size is 0");
    if (n_tokens && !tokens) return fail(UCM_E_INVALID, "ucm_hash_blocks: tokens is NULL");
    const size_t nb = n_tokens / block_size;
    if (n_blocks) *n_blocks = nb;
    if (nb > max_blocks)
      return fail(UCM_E_INVALID, "ucm_hash_blocks: " + std::to_string(nb) + " full blocks, out_hashes holds " +
                                     std::to_string(max_blocks));
    if (nb && !out_hashes) return fail(UCM_E_INVALID, "ucm_hash_blocks: out_hashes is NULL");
    ucm::BlockHash p = parent ? ns_of(parent) : ucm::root_hash(ns_of(ns));
    std::vector<ucm::BlockHash> hs;
    ucm::hash_blocks(p, tokens, nb * block_size, block_size, &hs);
    if (!hs.empty()) std::memcpy(out_hashes, hs.data(), hs.size() * 16);
    return ok();
  });
}

UCM_API int ucm_hash_root(const uint8_t* seed, uint8_t* out) {
  return guarded("ucm_hash_root", [&] {
    if (!seed || !out) return fail(UCM_E_INVALID, "ucm_hash_root: seed and out must not be NULL");
    const ucm::BlockHash r = ucm::root_hash(ns_of(seed));
    std::memcpy(out, r.data(), 16);
    return ok();
  });
}

UCM_API int ucm_store_lookup(ucm_store_t* store, const uint8_t* ns, const uint8_t* hashes, size_t n, uint8_t* present,
                             size_t* prefix_blocks) {
  return guarded("ucm_store_lookup", [&] {
    if (!store || !ns || (n && !hashes)) return fail(UCM_E_INVALID, "ucm_store_lookup: store, ns and hashes must not be NULL");
    size_t prefix = 0;
    ucm::Status s = store->s->lookup(ns_of(ns), hashes_of(hashes), n, present, &prefix);
    if (!s.ok()) return fail(s);
    if (prefix_blocks) *prefix_blocks = prefix;
    return ok();
  });
}

UCM_API int ucm_store_dump(ucm_store_t* store, const uint8_t* ns, const uint8_t* hashes, const uint8_t* parents,
                           size_t n, const void* const* kv, ucm_task_t** task) {
  return ucm_store_dump_ex(store, ns, hashes, parents, n, kv, nullptr, task);
}

UCM_API int ucm_store_dump_repr(ucm_store_t* store, const uint8_t* ns, const uint8_t* hashes,
                                const uint8_t* parents, size_t n, const void* const* kv,
                                const void* const* reprs, const size_t* repr_lens, ucm_task_t** task) {
  ucm_store_dump_params p = ucm_store_default_dump_params();
  p.reprs = reprs;
  p.repr_lens = repr_lens;
  return ucm_store_dump_ex(store, ns, hashes, parents, n, kv, &p, task);
}

UCM_API ucm_store_dump_params ucm_store_default_dump_params(void) {
  ucm_store_dump_params p;
  std::memset(&p, 0, sizeof p);
  p.struct_size = sizeof p;
  return p;
}

UCM_API int ucm_store_dump_ex(ucm_store_t* store, const uint8_t* ns, const uint8_t* hashes, const uint8_t* parents,
                              size_t n, const void* const* kv, const ucm_store_dump_params* params,
                              ucm_task_t** task) {
  return guarded("ucm_store_dump_ex", [&] {
    if (!store || !ns || !task || (n && (!hashes || !parents)))
      return fail(UCM_E_INVALID, "ucm_store_dump: store, ns, hashes, parents and task must not be NULL");
    ucm_store_dump_params p = ucm_store_default_dump_params();
    if (params) {
      ucm::Status st = ucm::capi::read_struct("ucm_store_dump_ex: params", params, p, &p);
      if (!st.ok()) return fail(st);
    }
    if (n && !kv && !p.kv_pages)
      return fail(UCM_E_INVALID, "ucm_store_dump: kv must not be NULL (or give params->kv_pages)");
    const void* const* reprs = p.reprs;
    const size_t* repr_lens = p.repr_lens;
    if (n && reprs && !repr_lens) return fail(UCM_E_INVALID, "ucm_store_dump_repr: reprs given without repr_lens");
    *task = nullptr;
    ucm::NamespaceDesc d;
    ucm::Status s = store->s->get_namespace(ns_of(ns), &d);
    if (!s.ok()) return fail(s);
    std::vector<ucm::DumpItem> items(n);
    for (size_t i = 0; i < n; ++i) {
      std::memcpy(items[i].hash.data(), hashes + 16 * i, 16);
      std::memcpy(items[i].parent.data(), parents + 16 * i, 16);
      items[i].token_count = d.block_size;
      if (kv) items[i].kv = kv[i];
      else {
        items[i].kv_pages = p.kv_pages + i * size_t(d.num_layers) * 2;
        items[i].page_token_stride = p.token_stride;
        items[i].page_head_stride = p.head_stride;
      }
      if (kv && (p.token_stride || p.head_stride))
        return fail(UCM_E_INVALID, "ucm_store_dump_ex: token_stride / head_stride are for kv_pages only");
      if (reprs && reprs[i]) {
        if (repr_lens[i] == 0)
          return fail(UCM_E_INVALID, "ucm_store_dump_repr: block " + std::to_string(i) + " has a repr of 0 bytes");
        items[i].repr = reprs[i];
        items[i].repr_len = repr_lens[i];
      }
      if (p.tokens) items[i].tokens = p.tokens + i * size_t(d.block_size);
    }
    return finish_task(store->s->dump(ns_of(ns), items.data(), n), task);
  });
}

UCM_API int ucm_store_chain_tokens(ucm_store_t* store, const uint8_t* ns, const uint8_t* hash, uint32_t* tokens,
                                   size_t cap, size_t* n_tokens, size_t* n_blocks) {
  return guarded("ucm_store_chain_tokens", [&] {
    if (!store || !ns || !hash || !n_tokens)
      return fail(UCM_E_INVALID, "ucm_store_chain_tokens: store, ns, hash and n_tokens must not be NULL");
    ucm::BlockHash h{};
    std::memcpy(h.data(), hash, 16);
    std::vector<uint32_t> ids;
    size_t blocks = 0;
    ucm::Status s = store->s->chain_tokens(ns_of(ns), h, &ids, &blocks);
    if (!s.ok()) return fail(s);
    *n_tokens = ids.size();
    if (n_blocks) *n_blocks = blocks;
    if (!tokens) return ok();
    if (cap < ids.size())
      return fail(UCM_E_INVALID, "ucm_store_chain_tokens: cap " + std::to_string(cap) + " is too small: the chain has " +
                                     std::to_string(ids.size()) + " token ids (" + std::to_string(blocks) + " blocks)");
    std::copy(ids.begin(), ids.end(), tokens);
    return ok();
  });
}

UCM_API int ucm_task_check(ucm_task_t* task) {
  if (!task) return 1;
  try {
    return task->t->done() ? 1 : 0;
  } catch (...) {
    return 1;
  }
}

UCM_API int ucm_task_wait(ucm_task_t* task, int timeout_ms) {
  return guarded("ucm_task_wait", [&] {
    if (!task) return fail(UCM_E_INVALID, "ucm_task_wait: task is NULL");
    ucm::Status s = task->t->wait(timeout_ms);
    return s.ok() ? ok() : fail(s);
  });
}

UCM_API int ucm_task_block_status(ucm_task_t* task, size_t i) {
  return guarded("ucm_task_block_status", [&] {
    if (!task) return fail(UCM_E_INVALID, "ucm_task_block_status: task is NULL");
    if (!task->t->done()) return fail(UCM_E_PENDING, "ucm_task_block_status: task not finished");
    const auto& v = task->t->block_status();
    if (i >= v.size())
      return fail(UCM_E_INVALID, "ucm_task_block_status: index " + std::to_string(i) + " out of range (task has " +
                                     std::to_string(v.size()) + " blocks)");
    return v[i].ok() ? UCM_OK : fail(v[i]);
  });
}

UCM_API void ucm_task_free(ucm_task_t* task) {
  if (!task) return;
  try {
    (void)task->t->wait(-1);
    delete task;
  } catch (...) {
  }
}

UCM_API int ucm_store_metrics(ucm_store_t* store, char* buf, size_t cap, size_t* len) {
  return guarded("ucm_store_metrics", [&] {
    if (!store) return fail(UCM_E_INVALID, "ucm_store_metrics: store is NULL");
    return sized_output("ucm_store_metrics", store->s->metrics_text(), true, buf, cap, len);
  });
}

UCM_API int ucm_event_medium(const char* store_path, char* buf, size_t cap, size_t* len) {
  return guarded("ucm_event_medium", [&] {
    if (!store_path) return fail(UCM_E_INVALID, "ucm_event_medium: store_path is NULL");
    return sized_output("ucm_event_medium", ucm::kv_event_medium(store_path), true, buf, cap, len);
  });
}

}  // extern "C"
