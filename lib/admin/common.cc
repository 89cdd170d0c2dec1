// Shared helpers of the admin commands (admin_internal.h).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "ucm/half.h"
#include "admin_internal.h"
#include "ucm/hash.h"

namespace ucm::admin {

namespace fs = std::filesystem;
using json = nlohmann::json;

Status load_namespaces(const Index& idx, std::vector<NsInfo>* out) {
  out->clear();
  Status err;
  Status st = idx.for_each_namespace([&](const NamespaceId& id, const std::string& js) {
    NsInfo n;
    n.id = id;
    Status s = NamespaceDesc::from_json(js, &n.desc);
    if (!s.ok()) {
      err = Status::Corruption("namespace " + to_hex(id) + " in the index: " + s.message());
      return false;
    }
    s = ns_value_from_json(js, &n.value);
    if (!s.ok()) {
      err = Status::Corruption("namespace " + to_hex(id) + " in the index: " + s.message());
      return false;
    }
    out->push_back(std::move(n));
    return true;
  });
  if (!st.ok()) return st;
  return err;
}

Status resolve_namespace(const std::vector<NsInfo>& all, const std::string& name_or_id,
                         const NsInfo** out) {
  NamespaceId want{};
  bool is_id = parse_hex16(name_or_id, &want).ok();
  for (const auto& n : all) {
    if ((is_id && n.id == want) || n.desc.display_name() == name_or_id) {
      *out = &n;
      return Status::OK();
    }
  }
  std::string known;
  for (const auto& n : all) known += (known.empty() ? "" : ", ") + n.desc.display_name();
  return Status::InvalidArgument("no namespace '" + name_or_id + "' in the store; known: " +
                                 (known.empty() ? "(none)" : known) +
                                 " (pass a name or a 32-hex id; `ucm inspect` lists them)");
}

NamespaceId hash_seed_namespace(const NamespaceDesc& desc, const NamespaceId& id) {
  json e = json::parse(desc.extra_json, nullptr, false);
  if (e.is_object() && e.contains("hash_seed_namespace") && e["hash_seed_namespace"].is_string()) {
    NamespaceId seed{};
    if (parse_hex16(e["hash_seed_namespace"].get<std::string>(), &seed).ok()) return seed;
  }
  return id;
}

BlockHash chain_root(const NamespaceDesc& desc, const NamespaceId& id) {
  return root_hash(hash_seed_namespace(desc, id));
}

// -------------------------------------------------------------------------------- ReaderView
Status ReaderView::Open(const std::string& store, std::unique_ptr<ReaderView>* out) {
  std::unique_ptr<ReaderView> r(new ReaderView());
  Status st = fmt::read_superblock(store, &r->sb_);
  if (!st.ok()) return st;
  st = ReaderIndex::Open(store, "", "admin", &r->ri_);
  if (!st.ok()) return st;
  *out = std::move(r);
  return Status::OK();
}

Status WriterIndex::Open(const std::string& store, std::unique_ptr<WriterIndex>* out, uint64_t write_buffer_budget) {
  auto w = std::make_unique<WriterIndex>();
  Status st = fmt::read_superblock(store, &w->sb);
  if (!st.ok()) return st;
  st = require_index(store);  // before the lock: nothing is created for a store without an index
  if (!st.ok()) return st;
  st = fmt::WriterLock::Acquire(store, &w->lock);
  if (!st.ok()) return st;
  st = open_writer_index(store, &w->idx, write_buffer_budget);
  if (!st.ok()) return st;
  *out = std::move(w);
  return Status::OK();
}

Status read_attachment(const std::string& store, const NamespaceId& ns, const std::string& name,
                       uint32_t file, uint64_t offset, uint64_t length, uint64_t checksum,
                       std::string* out) {
  DataFileReader reader(store, false);
  return reader.read_attachment(ns, name, file, offset, length, checksum, out);
}

void Progress::tick(const std::function<std::string()>& line, bool force) {
  if (!fn_) return;
  auto now = std::chrono::steady_clock::now();
  if (!force && now - last_ < std::chrono::seconds(1)) return;
  last_ = now;
  fn_(line());
}

// -------------------------------------------------------------------------------- dtype
void convert_dtype(const void* in, DType from, void* out, DType to, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    float f;
    if (from == DType::kFP32) {
      std::memcpy(&f, static_cast<const uint8_t*>(in) + 4 * i, 4);
    } else {
      uint16_t v;
      std::memcpy(&v, static_cast<const uint8_t*>(in) + 2 * i, 2);
      f = from == DType::kBF16 ? bf16_to_f32(v) : f16_to_f32(v);
    }
    if (to == DType::kFP32) {
      std::memcpy(static_cast<uint8_t*>(out) + 4 * i, &f, 4);
    } else {
      uint16_t v = to == DType::kBF16 ? f32_to_bf16(f) : f32_to_f16(f);
      std::memcpy(static_cast<uint8_t*>(out) + 2 * i, &v, 2);
    }
  }
}

nlohmann::ordered_json block_record_json(const NsInfo& ns, const BlockHash& h,
                                         const fmt::BlockRecord& r) {
  nlohmann::ordered_json j;
  j["namespace"] = ns.desc.display_name();
  j["namespace_id"] = to_hex(ns.id);
  j["hash"] = to_hex(h);
  j["parent"] = to_hex(r.parent);
  j["parent_is_root"] = r.parent == chain_root(ns.desc, ns.id);
  j["token_count"] = r.token_count;
  j["kv"] = {{"file", r.kv_file}, {"offset", r.kv_offset}, {"length", r.kv_length},
             {"checksum", r.kv_checksum}};
  if (r.has_repr())
    j["repr"] = {{"file", r.repr_file}, {"offset", r.repr_offset}, {"length", r.repr_length},
                 {"checksum", r.repr_checksum}};
  else
    j["repr"] = nullptr;
  j["bytes"] = r.bytes();
  j["created_ms"] = r.created_ms;
  j["created"] = format_time_ms(r.created_ms);
  j["last_access_ms"] = r.last_access_ms;
  j["last_access"] = format_time_ms(r.last_access_ms);
  return j;
}

}  // namespace ucm::admin
