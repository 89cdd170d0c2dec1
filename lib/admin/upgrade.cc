// lib/admin/upgrade.cc: `ucm migrate STORE --upgrade` (store_v1.md §10): rewrites a store of an
// older format version in place to the current one.
//
// 1 -> 2: format 2 differs only in NS_ATTACHMENT records: every one is *named* (flag bit 0, the
// payload starts with the attachment's name, §3.3). A version-1 reader returned such a record's
// name prefix as data, so stores holding them must not look like version 1. The upgrade
//   1. takes the writer lock;
//   2. copies every unnamed attachment record into a new data file as a named record (the data
//      is read and checksum-verified first), fdatasyncs it;
//   3. in one synced index batch: points each namespace's attachment entry at its new record,
//      moves the records' live bytes, and sets the index's format_version to 2;
//   4. writes the superblock with format_version 2 and min_reader_version 2 (atomic rename).
// A crash before 4 leaves a version-1 store whose attachments are named records, which every ucm
// since 0.1.0 reads correctly; running the upgrade again finishes it. The old records are dead
// bytes for gc.
//
// 2 -> 4: format 4 adds token ids to BLOCK_KV record headers (§3.2); every version-2 record is a
// valid version-4 record ("tokens unknown"), so nothing is rewritten. Under the writer lock: the
// index's format_version is set to 4 (synced), then the superblock is rewritten with
// format_version 4 and min_reader_version 4. Killed between the two, the superblock still says 2
// and running the upgrade again finishes it.
#include "admin_internal.h"

namespace ucm::admin {

using json = nlohmann::json;

namespace {

// The last step of an upgrade to format version v: the index's meta, written with `b` (the
// upgrade's other index changes), then the superblock, and readers must know v.
Status commit_format_version(const std::string& path, Index& idx, Index::Batch& b, uint32_t v) {
  b.put_meta_u32(kMetaFormatVersion, v);
  Status st = idx.write(b, true);
  if (!st.ok()) return st;
  fmt::Superblock sb;
  st = fmt::read_superblock(path, &sb);
  if (!st.ok()) return st;
  sb.format_version = v;
  sb.min_reader_version = v;
  return fmt::write_superblock(path, sb);
}

Status upgrade_1_to_2(const std::string& path, MigrateReport* rep) {
  std::unique_ptr<WriterIndex> w;
  Status st = WriterIndex::Open(path, &w);
  if (!st.ok()) return st;
  Index& idx = *w->idx;
  std::vector<NsInfo> nss;
  st = load_namespaces(idx, &nss);
  if (!st.ok()) return st;
  DataFileReader reader(path, false);
  std::unique_ptr<fmt::DataFileWriter> dw;
  Index::Batch b;
  uint64_t live = 0;
  for (auto& n : nss) {
    bool changed = false;
    for (auto& [name, a] : n.value.attachments) {
      const uint32_t file = a.file;
      const uint64_t off = a.offset, len = a.length, sum = a.checksum;
      fmt::RecordExpect e;
      e.type = fmt::RecordType::kNsAttachment;
      e.ns = n.id;
      e.key = fmt::md5(name.data(), name.size());
      e.payload_length = len;
      e.payload_checksum = sum;
      fmt::AlignedBuffer buf;
      st = reader.read(file, off, e, &buf);
      if (!st.ok())
        return Status(st.code(), "namespace " + n.desc.display_name() + ", attachment \"" + name + "\": " +
                                     st.message() + " (nothing was changed)");
      fmt::RecordHeader h;
      st = fmt::decode_record_header(buf.data(), fmt::data_file_path(path, file), &h);
      if (!st.ok()) return st;
      if (h.flags & fmt::kRecordFlagNamed) continue;  // already named
      if (!dw) {
        uint32_t id = 0;
        st = idx.allocate_file_id(&id);
        if (!st.ok()) return st;
        st = fmt::DataFileWriter::Create(path, id, &dw);
        if (!st.ok()) return st;
      }
      const std::string payload = fmt::encode_attachment_payload(name, buf.data() + fmt::kPage, len);
      fmt::RecordHeader nh;
      nh.type = fmt::RecordType::kNsAttachment;
      nh.flags = fmt::kRecordFlagNamed;
      nh.ns = n.id;
      nh.key = e.key;
      uint64_t noff = 0;
      st = dw->append(&nh, {{payload.data(), payload.size()}}, &noff);
      if (!st.ok()) return st;
      a = NsAttachmentRef{dw->file_id(), noff, nh.payload_length, nh.payload_checksum};
      b.add_file_bytes(file, 0, -static_cast<int64_t>(fmt::record_size(len)));
      live += fmt::record_size(nh.payload_length);
      ++rep->attachments;
      changed = true;
    }
    if (changed) b.put_namespace(n.id, ns_value_to_json(n.value));
  }
  if (dw) {
    st = dw->sync();
    if (!st.ok()) return st;
    fmt::FileRecord fr;
    fr.size = dw->size();
    fr.live_bytes = live;
    fr.state = fmt::FileState::kSealed;
    b.put_file(dw->file_id(), fr);
  }
  st = commit_format_version(path, idx, b, 2);
  if (!st.ok()) return st;
  rep->upgraded = true;
  rep->message = "upgraded store " + path + " from format version 1 to 2: " + std::to_string(rep->attachments) +
                 " attachment record(s) rewritten as named records";
  return Status::OK();
}

Status upgrade_2_to_4(const std::string& path, MigrateReport* rep) {
  std::unique_ptr<WriterIndex> w;
  Status st = WriterIndex::Open(path, &w);
  if (!st.ok()) return st;
  Index::Batch b;
  st = commit_format_version(path, *w->idx, b, 4);
  if (!st.ok()) return st;
  rep->upgraded = true;
  const std::string before = rep->message.empty() ? "" : rep->message + "; then ";
  rep->message = before + "upgraded store " + path + " from format version 2 to 4: blocks written from now on " +
                 "record their token ids (blocks already stored stay \"tokens unknown\"; no record was rewritten)";
  return Status::OK();
}

}  // namespace

Status upgrade_store(const std::string& path, MigrateReport* rep) {
  fmt::Superblock sb;
  Status st = fmt::read_superblock(path, &sb);
  if (!st.ok()) return st;
  st = require_index(path);
  if (!st.ok()) return st;
  if (sb.format_version >= fmt::kTokensFormatVersion && sb.format_version <= fmt::kFormatVersion) {
    rep->message = "store " + path + " is already at format version " + std::to_string(sb.format_version) +
                   "; nothing to upgrade";
    return Status::OK();
  }
  if (sb.format_version == 1) {
    st = upgrade_1_to_2(path, rep);
    if (!st.ok()) return st;
    sb.format_version = 2;
  }
  if (sb.format_version == 2) return upgrade_2_to_4(path, rep);
  return Status::NotSupported("store " + path + " has format version " + std::to_string(sb.format_version) +
                              ", which this ucm cannot upgrade (known versions: 1, 2, 4, 5)");
}

}  // namespace ucm::admin
