// fuzz_make_seeds OUTDIR: writes valid inputs for the fuzz targets, made with the product's own
// encoders, as OUTDIR/<target>/gen-*. scripts/fuzz.sh runs it into each target's working corpus
// at every run, so the binary seeds follow the format code; the copies checked in under
// tests/fuzz/corpus/ were made by it too (docs/fuzzing.md).
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "ucm/format/format.h"
#include "fuzz_common.h"
#include "ucm/core/document.h"
#include "ucm/namespace.h"

using namespace ucm;
using namespace ucm::fmt;
namespace fs = std::filesystem;

namespace {

std::string g_out;

void put(const std::string& target, const std::string& name, const std::string& bytes) {
  const std::string dir = g_out + "/" + target;
  fs::create_directories(dir);
  ucm_fuzz::write_file(dir + "/gen-" + name, bytes.data(), bytes.size());
}

std::string with_prefix(uint8_t b, const std::string& s) { return std::string(1, char(b)) + s; }

std::string read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

void check(const Status& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "fuzz_make_seeds: %s: %s\n", what, s.ToString().c_str());
    std::exit(1);
  }
}

BlockHash hash_of(const std::string& s) { return md5(s.data(), s.size()); }

NamespaceDesc smollm2() {
  NamespaceDesc d;
  d.model_id = "SmolLM2-135M-Instruct";
  d.weights_digest = "0123456789abcdef";
  d.num_layers = 30;
  d.num_kv_heads = 3;
  d.head_dim = 64;
  d.extra_json = R"({"projection_seed":2,"repr":["mean","bounds","sign"]})";
  return d;
}

void superblock_seeds() {
  // What `ucm build` writes: the superblock of a fresh store skeleton.
  const std::string store = ucm_fuzz::scratch_dir() + "/seed-store";
  Superblock sb;
  check(create_store_skeleton(store, &sb), "create_store_skeleton");
  put("superblock", "fresh", read_all(superblock_path(store)));
  uint8_t buf[kSuperblockSize];
  Superblock long_name;
  long_name.created_ms = 1700000000000ull;
  long_name.created_by = "ucm 0.2.0 with a 32-byte builder";
  encode_superblock(long_name, buf);
  put("superblock", "long-name", std::string(reinterpret_cast<char*>(buf), sizeof buf));
  Superblock newer;
  newer.format_version = kFormatVersion + 1;
  newer.min_reader_version = kFormatVersion + 1;
  encode_superblock(newer, buf);
  put("superblock", "newer-version", std::string(reinterpret_cast<char*>(buf), sizeof buf));
  Superblock v1;
  v1.format_version = 1;
  v1.min_reader_version = 1;
  encode_superblock(v1, buf);
  put("superblock", "version1", std::string(reinterpret_cast<char*>(buf), sizeof buf));
}

// A new data file `id` of store.
std::unique_ptr<DataFileWriter> new_data_file(const std::string& store, uint32_t id) {
  std::unique_ptr<DataFileWriter> w;
  check(DataFileWriter::Create(store, id, &w), "DataFileWriter::Create");
  return w;
}

// The header of a record of `type` in ns, with `key` (zero: none) and `flags`.
RecordHeader header(RecordType type, const NamespaceId& ns, const BlockHash& key = {}, uint32_t flags = 0) {
  RecordHeader h;
  h.type = type;
  h.flags = flags;
  h.ns = ns;
  h.key = key;
  return h;
}

// Appends the record h with `payload` to w.
void append(DataFileWriter* w, RecordHeader h, const std::string& payload, const char* what) {
  uint64_t off = 0;
  check(w->append(&h, {{payload.data(), payload.size()}}, &off), what);
}

void data_file_seeds() {
  const std::string store = ucm_fuzz::scratch_dir() + "/seed-data";
  check(make_dirs(data_dir(store)), "make_dirs");
  const NamespaceId ns = smollm2().id();
  // File 1: a KV block, a named attachment and a document record.
  {
    auto w = new_data_file(store, 1);
    RecordHeader kv = header(RecordType::kBlockKV, ns, hash_of("block 0"), kRecordFlagTokens);
    kv.token_count = 16;
    std::vector<uint32_t> ids(16);  // the block's token ids in its header (store_v1.md §3.2)
    for (uint32_t i = 0; i < 16; ++i) ids[i] = 1000 + i;
    kv.tokens = ids.data();
    append(w.get(), kv, std::string(100, '\x5a'), "append kv");
    const float proj[4] = {0.5f, -0.5f, 0.25f, 1.0f};
    append(w.get(), header(RecordType::kNsAttachment, ns, hash_of("r4_projection"), kRecordFlagNamed),
           encode_attachment_payload("r4_projection", proj, sizeof proj), "append attachment");
    append(w.get(), header(RecordType::kDocument, ns, hash_of("doc-1")), R"({"id":"doc-1","blocks":1})",
           "append document");
    check(w->sync(), "sync");
  }
  const std::string f1 = read_all(data_file_path(store, 1));
  put("data_file", "three-records", with_prefix(0, f1));
  put("data_file", "three-records-fix", with_prefix(1, f1));
  // File 2: one empty-payload namespace record (the smallest valid file with a record).
  append(new_data_file(store, 2).get(), header(RecordType::kNamespace, ns), smollm2().to_json(), "append namespace");
  const std::string f2 = read_all(data_file_path(store, 2));
  put("data_file", "namespace", with_prefix(0, f2));
  put("data_file", "namespace-fix", with_prefix(1, f2));
  // A torn tail: the first file cut in the middle of its last record.
  put("data_file", "torn-tail-fix", with_prefix(1, f1.substr(0, f1.size() - kPage / 2)));
  // A header only.
  put("data_file", "header-only", with_prefix(0, f1.substr(0, kPage)));
}

void index_value_seeds() {
  BlockRecord r;
  r.flags = 1;
  r.token_count = 16;
  r.parent = hash_of("parent");
  r.kv_file = 3;
  r.repr_file = 3;
  r.kv_offset = 4096;
  r.kv_length = 368640;
  r.kv_checksum = 0x1234;
  r.repr_offset = 4096 + 372736;
  r.repr_length = 57728;
  r.repr_checksum = 0x5678;
  r.created_ms = 1700000000000ull;
  r.last_access_ms = 1700000001000ull;
  put("index_values", "block-record", with_prefix(0, encode_block_record(r)));
  FileRecord f;
  f.size = 1 << 20;
  f.live_bytes = 500000;
  f.state = FileState::kSealed;
  put("index_values", "file-record", with_prefix(1, encode_file_record(f)));
  f.state = FileState::kRetired;
  f.retired_ms = 1700000000000ull;
  put("index_values", "file-record-retired", with_prefix(1, encode_file_record(f)));
  JournalEntry e;
  e.op = JournalOp::kRemove;
  e.ns = smollm2().id();
  e.hash = hash_of("block");
  put("index_values", "journal", with_prefix(2, encode_journal_entry(e)));
  AccessRecord a;
  a.ns = e.ns;
  a.hash = e.hash;
  a.access_ms = 1700000000000ull;
  uint8_t ab[kAccessRecordSize];
  encode_access_record(a, ab);
  put("index_values", "access", with_prefix(3, std::string(reinterpret_cast<char*>(ab), sizeof ab)));
  const float proj[3] = {1.0f, 2.0f, 3.0f};
  put("index_values", "attachment-named", with_prefix(4, encode_attachment_payload("r4_projection", proj, sizeof proj)));
  put("index_values", "attachment-old", with_prefix(5, std::string("raw attachment bytes")));
  put("index_values", "block-key", with_prefix(6, block_key(e.ns, e.hash)));
  put("index_values", "file-key", with_prefix(6, file_key(7)));
  put("index_values", "journal-key", with_prefix(6, journal_key(123456789)));
  put("index_values", "data-file-name", with_prefix(6, "00000042.ucmd"));
}

void meta_json_seeds() {
  NamespaceDesc d = smollm2();
  put("meta_json", "namespace", with_prefix(0, d.to_json()));
  d.name = "python-docs";
  d.dtype = DType::kFP16;
  d.extra_json = R"({"hash_seed_namespace":")" + to_hex(smollm2().id()) + R"("})";
  put("meta_json", "namespace-migrated", with_prefix(0, d.to_json()));
  DocumentEntry doc;
  doc.id = "library/os.rst.txt";
  doc.first_block = hash_of("first");
  doc.last_block = hash_of("last");
  doc.blocks = 12;
  doc.tokens = 200;
  doc.source = "corpus.jsonl:3";
  doc.created_ms = 1700000000000ull;
  put("meta_json", "document", with_prefix(1, document_to_json(doc)));
}

std::string safetensors_file(const std::string& header, size_t data_bytes) {
  std::string f(8, '\0');
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) f[size_t(i)] = char((n >> (8 * i)) & 0xff);
  f += header;
  for (size_t i = 0; i < data_bytes; ++i) f.push_back(char(i * 7));
  return f;
}

void safetensors_seeds() {
  put("safetensors", "two-tensors",
      with_prefix(0, safetensors_file(R"({"__metadata__":{"format":"pt"},)"
                                      R"("model.embed_tokens.weight":{"dtype":"BF16","shape":[4,2],"data_offsets":[0,16]},)"
                                      R"("model.norm.weight":{"dtype":"F32","shape":[2],"data_offsets":[16,24]}})",
                                      24)));
  put("safetensors", "all-dtypes",
      with_prefix(0, safetensors_file(R"({"a":{"dtype":"BOOL","shape":[1],"data_offsets":[0,1]},)"
                                      R"("b":{"dtype":"I64","shape":[1,1],"data_offsets":[1,9]},)"
                                      R"("c":{"dtype":"F8_E4M3","shape":[0,5],"data_offsets":[9,9]},)"
                                      R"("d":{"dtype":"F16","shape":[],"data_offsets":[9,11]}})",
                                      11)));
  put("safetensors", "index", with_prefix(1, R"({"metadata":{"total_size":13},"weight_map":{"a":"a.safetensors","b":"a.safetensors","c":"b.safetensors"}})"));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fuzz_make_seeds OUTDIR\n");
    return 2;
  }
  g_out = argv[1];
  superblock_seeds();
  data_file_seeds();
  index_value_seeds();
  meta_json_seeds();
  safetensors_seeds();
  return 0;
}
