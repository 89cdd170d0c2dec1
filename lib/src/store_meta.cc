// lib/src/store_meta.cc: namespaces (StoreShared::namespace_desc too), attachments and the document
// registry (see store_impl.h).
#include "ucm/core/store_impl.h"

#include "ucm/core/document.h"
#include "ucm/core/log.h"
#include "ucm/core/ns_value.h"

namespace ucm::detail {

// ---------------------------------------------------------------------------------------------
Status StoreShared::namespace_desc(const NamespaceId& ns, NamespaceDesc* d) {
  {
    std::lock_guard<std::mutex> g(ns_mu_);
    auto it = ns_cache_.find(ns);
    if (it != ns_cache_.end()) {
      *d = it->second;
      return Status::OK();
    }
  }
  std::string json;
  Status s = index->get_namespace(ns, &json);
  if (s.code() == Code::kNotFound)
    return Status::NotFound("namespace " + to_hex(ns) + " is not registered in store " + path +
                            " (a writer registers it first: ucm_store_namespace_register)");
  if (!s.ok()) return s;
  s = NamespaceDesc::from_json(json, d);
  if (!s.ok()) return Status::Corruption("namespace " + to_hex(ns) + " in the index of " + path + ": " + s.message());
  std::lock_guard<std::mutex> g(ns_mu_);
  ns_cache_[ns] = *d;
  return Status::OK();
}

Status StoreImpl::find_namespace(const std::string& key, NamespaceDesc* desc, NamespaceId* id) {
  NamespaceId ns;
  NamespaceDesc d;
  if (key.size() == 32 && parse_hex16(key, &ns).ok() && s_.namespace_desc(ns, &d).ok()) {
    if (desc) *desc = d;
    if (id) *id = ns;
    return Status::OK();
  }
  bool found = false;
  Status inner;
  Status s = s_.index->for_each_namespace([&](const NamespaceId& n, const std::string& json) {
    NamespaceDesc x;
    if (!NamespaceDesc::from_json(json, &x).ok()) return true;
    if (x.display_name() == key) {
      d = x;
      ns = n;
      found = true;
      return false;
    }
    return true;
  });
  if (!s.ok()) return s;
  if (!found)
    return Status::NotFound("namespace \"" + key + "\" is not registered in store " + s_.path +
                            " (list them with `ucm inspect " + s_.path + "`)");
  if (desc) *desc = d;
  if (id) *id = ns;
  return Status::OK();
}

std::vector<NamespaceDesc> StoreImpl::namespaces() {
  std::vector<NamespaceDesc> out;
  (void)s_.index->for_each_namespace([&](const NamespaceId&, const std::string& json) {
    NamespaceDesc x;
    if (NamespaceDesc::from_json(json, &x).ok()) out.push_back(std::move(x));
    return true;
  });
  return out;
}


Status StoreImpl::write_meta_record(fmt::RecordHeader* h, const std::string& payload, StoreWriter::RecordAt* at,
                                    const std::function<Status(Index::Batch&)>& fill) {
  Status s = writer_->check_space(fmt::record_size(payload.size()) + fmt::kPage,
                                  std::string("write a ") + fmt::record_type_name(h->type) + " record");
  if (!s.ok()) return s;
  return writer_->write_meta_records(h, &payload, 1, at, fill);
}

// store_v1.md §12.2: the first SGLang page namespace steps a version-4 store (or shard) to 5, so
// that an older ucm refuses the store as newer than it reads instead of calling the namespace
// corrupt: the index's format_version first (synced), then the superblock (atomic rename). Killed
// between the two, the superblock still says 4 and the next step writes both again.
Status StoreImpl::step_to_page_namespaces() {
  const uint32_t v = s_.format_version;
  if (v < fmt::kTokensFormatVersion)
    return Status::InvalidArgument("store " + s_.path + " has format version " + std::to_string(v) +
                                   ": SGLang page namespaces need version 4 or newer; run `ucm migrate " + s_.path +
                                   " --upgrade` first");
  Index::Batch b;
  b.put_meta_u32(kMetaFormatVersion, fmt::kPageNamespacesFormatVersion);
  Status s = s_.index->write(b, true);
  if (!s.ok()) return s;
  fmt::Superblock sb;
  s = fmt::read_superblock(s_.path, &sb);
  if (!s.ok()) return s;
  sb.format_version = fmt::kPageNamespacesFormatVersion;
  sb.min_reader_version = fmt::kPageNamespacesFormatVersion;
  s = fmt::write_superblock(s_.path, sb);
  if (!s.ok()) return s;
  s_.format_version = fmt::kPageNamespacesFormatVersion;
  log().info("store {}: stepped to format version {} (its first SGLang page namespace; ucm < 0.8.0 no longer opens it)",
             s_.path, fmt::kPageNamespacesFormatVersion);
  return Status::OK();
}

Status StoreImpl::register_namespace(const NamespaceDesc& desc, NamespaceId* id) {
  Status s = writer_only("register_namespace");
  if (!s.ok()) return s;
  s = desc.validate();
  if (!s.ok()) return s;
  if (desc.is_sglang_pages() && s_.format_version < fmt::kPageNamespacesFormatVersion) {
    s = step_to_page_namespaces();
    if (!s.ok()) return s;
  }
  const NamespaceId ns = desc.id();
  const std::string name = desc.display_name();
  std::string existing;
  if (s_.index->get_namespace(ns, &existing).ok()) {
    if (id) *id = ns;
    return Status::OK();
  }
  Status clash;
  s = s_.index->for_each_namespace([&](const NamespaceId& n, const std::string& json) {
    NamespaceDesc x;
    if (NamespaceDesc::from_json(json, &x).ok() && x.display_name() == name && n != ns) {
      clash = Status::InvalidArgument("namespace name \"" + name + "\" is already used by namespace " + to_hex(n) +
                                      " with a different fingerprint in " + s_.path + "; pick another name");
      return false;
    }
    return true;
  });
  if (!s.ok()) return s;
  if (!clash.ok()) return clash;
  NamespaceDesc named = desc;
  named.name = name;
  const std::string payload = named.to_json();
  fmt::RecordHeader h;
  h.type = fmt::RecordType::kNamespace;
  h.ns = ns;
  StoreWriter::RecordAt at;
  s = write_meta_record(&h, payload, &at, [&](Index::Batch& b) {
    b.put_namespace(ns, ns_value_to_json(NsIndexValue::Fresh(payload, at.file, at.offset)));
    return Status::OK();
  });
  if (!s.ok()) return s;
  if (id) *id = ns;
  return Status::OK();
}

Status StoreImpl::put_attachment(const NamespaceId& ns, const std::string& name, const void* data, size_t len) {
  Status s = writer_only("put_attachment");
  if (!s.ok()) return s;
  if (name.empty()) return Status::InvalidArgument("attachment name is empty");
  if (name.size() > fmt::kMaxAttachmentName)
    return Status::InvalidArgument("attachment name of " + std::to_string(name.size()) + " bytes is longer than " +
                                   std::to_string(fmt::kMaxAttachmentName) + "; use a shorter name");
  if (len && !data) return Status::InvalidArgument("put_attachment: data is null with len > 0");
  std::string tmp;
  s = s_.index->get_namespace(ns, &tmp);
  if (!s.ok()) return s;
  fmt::RecordHeader h;
  h.type = fmt::RecordType::kNsAttachment;
  h.flags = fmt::kRecordFlagNamed;  // the payload carries the name, so rebuild-index recovers it (§3.3)
  h.ns = ns;
  h.key = fmt::md5(name.data(), name.size());
  const std::string payload = fmt::encode_attachment_payload(name, data, len);
  StoreWriter::RecordAt at;
  return write_meta_record(&h, payload, &at, [&](Index::Batch& b) {
    std::string cur;
    Status st = s_.index->get_namespace(ns, &cur);
    if (!st.ok()) return st;
    NsIndexValue v;
    st = ns_value_from_json(cur, &v);
    if (!st.ok()) return Status::Corruption("namespace " + to_hex(ns) + ": " + st.message());
    v.attachments[name] = {at.file, at.offset, uint64_t(payload.size()), h.payload_checksum};
    b.put_namespace(ns, ns_value_to_json(v));
    return Status::OK();
  });
}

Status StoreImpl::get_attachment(const NamespaceId& ns, const std::string& name, std::string* data) {
  std::string cur;
  Status s = s_.index->get_namespace(ns, &cur);
  if (!s.ok()) return s;
  NsIndexValue v;
  s = ns_value_from_json(cur, &v);
  if (!s.ok()) return Status::Corruption("namespace " + to_hex(ns) + ": " + s.message());
  const auto it = v.attachments.find(name);
  if (it == v.attachments.end())
    return Status::NotFound("namespace " + to_hex(ns) + " has no attachment \"" + name + "\"");
  const NsAttachmentRef& a = it->second;
  return s_.files->read_attachment(ns, name, a.file, a.offset, a.length, a.checksum, data);
}

// ---------------------------------------------------------------------------------------------
Status StoreImpl::put_document(const NamespaceId& ns, const DocumentEntry& doc) {
  return write_documents("put_document", ns, &doc, 1);
}

Status StoreImpl::put_documents(const NamespaceId& ns, const DocumentEntry* docs, size_t n) {
  return write_documents("put_documents", ns, docs, n);
}

Status StoreImpl::write_documents(const char* op, const NamespaceId& ns, const DocumentEntry* docs, size_t n) {
  Status s = writer_only(op);
  if (!s.ok()) return s;
  if (n && !docs) return Status::InvalidArgument(std::string(op) + ": docs is null with n > 0");
  for (size_t i = 0; i < n; ++i)
    if (docs[i].id.empty()) return Status::InvalidArgument("document id is empty");
  std::string tmp;
  s = s_.index->get_namespace(ns, &tmp);
  if (!s.ok() || n == 0) return s;
  std::vector<std::string> payloads(n);
  uint64_t bytes = fmt::kPage;  // a new data file's header, if the records roll
  for (size_t i = 0; i < n; ++i) {
    payloads[i] = document_to_json(docs[i]);
    bytes += fmt::record_size(payloads[i].size());
  }
  s = writer_->check_space(bytes, n == 1 ? std::string("write a DOCUMENT record")
                                         : "write " + std::to_string(n) + " DOCUMENT records");
  if (!s.ok()) return s;
  std::vector<fmt::RecordHeader> hs(n);
  for (size_t i = 0; i < n; ++i) {
    hs[i].type = fmt::RecordType::kDocument;
    hs[i].ns = ns;
    hs[i].key = fmt::md5(docs[i].id.data(), docs[i].id.size());
  }
  std::vector<StoreWriter::RecordAt> at(n);
  return writer_->write_meta_records(hs.data(), payloads.data(), n, at.data(), [&](Index::Batch& b) {
    for (size_t i = 0; i < n; ++i) b.put_doc(ns, docs[i].id, payloads[i]);
    return Status::OK();
  });
}

Status StoreImpl::get_document(const NamespaceId& ns, const std::string& id, DocumentEntry* doc) {
  std::string json;
  Status s = s_.index->get_doc(ns, id, &json);
  if (!s.ok()) return s;
  return document_from_json(json, doc);
}

std::vector<DocumentEntry> StoreImpl::documents(const NamespaceId& ns) {
  std::vector<DocumentEntry> out;
  (void)s_.index->for_each_doc(ns, [&](const std::string&, const std::string& json) {
    DocumentEntry d;
    if (document_from_json(json, &d).ok()) out.push_back(std::move(d));
    return true;
  });
  return out;
}

}  // namespace ucm::detail
