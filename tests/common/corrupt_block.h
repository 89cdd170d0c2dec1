// tests/common/corrupt_block.h: flips one payload byte of block `index` (0-based) of a registered
// document, found by walking its chain back from the registry's last block (tests of the load
// paths that must report a bad block and never use it). Header-only; links ucm_core.
#pragma once
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "ucm/store.h"

namespace ucm::test {

/// Returns "" on success, else what went wrong. The byte is at payload offset `offset`.
inline std::string corrupt_document_block(const std::filesystem::path& store, const std::string& doc_id,
                                          uint32_t index, uint64_t offset, char mask) {
  std::unique_ptr<ucm::Store> s;
  ucm::OpenOptions oo;
  if (!ucm::Store::Open(store.string(), oo, &s).ok()) return "cannot open " + store.string();
  auto nss = s->namespaces();
  if (nss.size() != 1) return "expected one namespace";
  const ucm::NamespaceId ns = nss[0].id();
  ucm::DocumentEntry e;
  if (!s->get_document(ns, doc_id, &e).ok()) return "no document " + doc_id;
  std::vector<ucm::BlockHash> chain;
  ucm::BlockHash h = e.last_block;
  for (uint32_t i = 0; i < e.blocks; ++i) {
    chain.push_back(h);
    ucm::BlockInfo bi;
    if (!s->get_block(ns, h, &bi).ok()) return "chain broken";
    h = bi.parent;
  }
  std::reverse(chain.begin(), chain.end());
  if (index >= chain.size()) return "document has fewer blocks";
  ucm::BlockInfo bi;
  if (!s->get_block(ns, chain[index], &bi).ok()) return "no block";
  char name[32];
  std::snprintf(name, sizeof name, "%08u.ucmd", bi.kv_file);
  std::filesystem::path data;
  for (auto& p : std::filesystem::recursive_directory_iterator(store))
    if (p.path().filename() == name) data = p.path();
  if (data.empty()) return std::string("no data file ") + name;
  s.reset();
  std::fstream f(data, std::ios::in | std::ios::out | std::ios::binary);
  const auto at = std::streamoff(bi.kv_offset + 4096 + offset);  // after the record header page
  f.seekg(at);
  char c = 0;
  f.read(&c, 1);
  c ^= mask;
  f.seekp(at);
  f.write(&c, 1);
  return f ? "" : "write failed";
}

}  // namespace ucm::test
