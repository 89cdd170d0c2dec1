// pipelines/generate/store_client.cc: see store_client.h. C ABI calls only.
#include "store_client.h"

#include <algorithm>

namespace ucm::generate {

Status from_code(int code, const std::string& what) {
  if (code == UCM_OK) return Status::OK();
  std::string msg = ucm_last_error();
  if (msg.empty()) msg = ucm_strerror(code);
  return Status(static_cast<Code>(code), what + ": " + msg);
}

StoreClient::~StoreClient() { ucm_store_close(store_); }

Status StoreClient::open(const std::string& path, bool writer) {
  ucm_store_open_params p = ucm_store_default_open_params();
  p.mode = writer ? UCM_OPEN_CREATE : UCM_OPEN_READ_ONLY;
  p.refresh_interval_ms = 0;  // one request: no background catch-up thread needed
  writer_ = writer;
  return from_code(ucm_store_open(path.c_str(), &p, &store_), "opening store " + path);
}

Status StoreClient::resolve_namespace(const std::string& name_or_id, const std::string& desc_json,
                                      bool register_missing) {
  found_ = false;
  int rc = UCM_OK;
  if (!name_or_id.empty()) {  // asked for by name: always required
    rc = ucm_store_namespace_find(store_, name_or_id.c_str(), ns_.data(), nullptr, 0, nullptr);
    if (rc != UCM_OK) return from_code(rc, "namespace '" + name_or_id + "'");
  } else {  // the one rule of store_v1.md §7.3 (blocks of this fingerprint's block size)
    rc = ucm_store_namespace_match(store_, desc_json.c_str(), 0, nullptr, ns_.data(), nullptr);
    if (rc == UCM_E_NOT_FOUND && writer_ && register_missing)
      rc = ucm_store_namespace_create(store_, desc_json.c_str(), ns_.data());
    if (rc == UCM_E_NOT_FOUND) {
      rc = ucm_namespace_id(desc_json.c_str(), ns_.data());
      if (rc != UCM_OK) return from_code(rc, "namespace descriptor");
      seed_ = ns_;  // nothing is stored: every block misses; hashes are still well defined
      return Status::OK();
    }
    if (rc != UCM_OK) return from_code(rc, "namespace of this model");
  }
  found_ = true;
  return from_code(ucm_store_namespace_hash_seed(store_, ns_.data(), seed_.data()), "namespace hash seed");
}

std::string StoreClient::ns_hex() const {
  static const char* hex = "0123456789abcdef";
  std::string s;
  for (uint8_t b : ns_) s += {hex[b >> 4], hex[b & 15]};
  return s;
}

Status StoreClient::hash_blocks(const std::vector<int32_t>& tokens, uint32_t block_size,
                                std::vector<Hash16>* out) const {
  out->assign(tokens.size() / block_size, Hash16{});
  size_t n = 0;
  static_assert(sizeof(int32_t) == sizeof(uint32_t));
  int rc = ucm_hash_blocks(seed_.data(), nullptr, reinterpret_cast<const uint32_t*>(tokens.data()), tokens.size(),
                           block_size, out->empty() ? nullptr : out->front().data(), out->size(), &n);
  return from_code(rc, "ucm_hash_blocks");
}

Status StoreClient::prefix_blocks(const std::vector<Hash16>& hashes, size_t* n) const {
  *n = 0;
  if (!found_ || hashes.empty()) return Status::OK();
  return from_code(ucm_store_lookup(store_, ns_.data(), hashes.front().data(), hashes.size(), nullptr, n),
                   "ucm_store_lookup");
}

Status StoreClient::load_paged(const std::vector<Hash16>& hashes, size_t n, const std::vector<void*>& ptrs,
                               std::vector<int>* status) const {
  status->assign(n, UCM_E_NOT_FOUND);
  if (n == 0) return Status::OK();
  ucm_task_t* task = nullptr;
  int rc = ucm_store_load(store_, ns_.data(), hashes.front().data(), n, UCM_DEST_PAGED, ptrs.data(), 0, 0, &task);
  if (rc != UCM_OK) return from_code(rc, "ucm_store_load");
  (void)ucm_task_wait(task, -1);  // per-block results below; a failed block is recomputed
  for (size_t i = 0; i < n; ++i) (*status)[i] = ucm_task_block_status(task, i);
  ucm_task_free(task);
  return Status::OK();
}

Status StoreClient::dump(const std::vector<Hash16>& hashes, const std::vector<Hash16>& parents,
                         const std::vector<const void*>& kv, const std::vector<uint32_t>& tokens) const {
  if (hashes.empty()) return Status::OK();
  ucm_task_t* task = nullptr;
  ucm_store_dump_params p = ucm_store_default_dump_params();
  p.tokens = tokens.empty() ? nullptr : tokens.data();
  int rc = ucm_store_dump_ex(store_, ns_.data(), hashes.front().data(), parents.front().data(), hashes.size(),
                             kv.data(), &p, &task);
  if (rc != UCM_OK) return from_code(rc, "ucm_store_dump_ex");
  rc = ucm_task_wait(task, -1);
  Status st = from_code(rc, "dumping " + std::to_string(hashes.size()) + " blocks");
  ucm_task_free(task);
  return st;
}

Status StoreClient::lookup(const std::vector<Hash16>& hashes, std::vector<uint8_t>* present, size_t* prefix) const {
  present->assign(hashes.size(), 0);
  *prefix = 0;
  if (!found_ || hashes.empty()) return Status::OK();
  return from_code(ucm_store_lookup(store_, ns_.data(), hashes.front().data(), hashes.size(), present->data(), prefix),
                   "ucm_store_lookup");
}

Status StoreClient::repr_info(ucm_repr_info* info) const {
  *info = ucm_repr_info{};
  info->struct_size = sizeof(*info);
  return from_code(ucm_store_repr_info(store_, ns_.data(), info), "ucm_store_repr_info");
}

Status StoreClient::r4_projection(const ucm_repr_info& info, std::vector<float>* proj) const {
  proj->assign(size_t(info.num_layers) * info.num_kv_heads * info.head_dim * info.hash_bits, 0.f);
  if (proj->empty()) return Status::OK();
  size_t len = 0;
  return from_code(ucm_store_attachment_get(store_, ns_.data(), "r4_projection", proj->data(),
                                            proj->size() * sizeof(float), &len),
                   "r4_projection");
}

Status StoreClient::load_repr(const std::vector<Hash16>& hashes, size_t n, const ucm_repr_buffers* dst,
                              std::vector<int>* status) const {
  status->assign(n, UCM_E_NOT_FOUND);
  if (n == 0) return Status::OK();
  ucm_task_t* task = nullptr;
  int rc = ucm_store_load_repr(store_, ns_.data(), hashes.front().data(), n, dst, 0, &task);
  if (rc != UCM_OK) return from_code(rc, "ucm_store_load_repr");
  (void)ucm_task_wait(task, -1);  // per-block results below
  for (size_t i = 0; i < n; ++i) (*status)[i] = ucm_task_block_status(task, i);
  ucm_task_free(task);
  return Status::OK();
}

Status StoreClient::rope_params(ucm_rope_params* rope) const {
  *rope = ucm_rope_default_params();
  return from_code(ucm_store_rope_params(store_, ns_.data(), rope), "the namespace's RoPE");
}

Status StoreClient::chunk_prefix(std::vector<int32_t>* ids) const {
  ids->clear();
  size_t n = 0;
  int rc = ucm_store_chunk_prefix(store_, ns_.data(), nullptr, 0, &n);
  if (rc == UCM_E_INVALID) {  // too small a buffer: n is set
    std::vector<uint32_t> u(n);
    rc = ucm_store_chunk_prefix(store_, ns_.data(), u.data(), n, &n);
    ids->assign(u.begin(), u.begin() + std::ptrdiff_t(std::min(n, u.size())));
  }
  return from_code(rc, "ucm_store_chunk_prefix");
}

Status StoreClient::document_source(const std::string& id, std::string* source) const {
  char src[4096];
  int rc = ucm_store_document_get(store_, ns_.data(), id.c_str(), src, sizeof src, nullptr, nullptr);
  if (rc != UCM_OK) return from_code(rc, "document " + id);
  *source = src;
  return Status::OK();
}

}  // namespace ucm::generate
