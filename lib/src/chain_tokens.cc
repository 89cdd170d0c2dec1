// lib/src/chain_tokens.cc: Store::chain_tokens, a block's whole chain of token ids from the
// ids its records hold (store_v1.md §3.2), walking parents to the chain root (§4.1).
#include <algorithm>

#include "ucm/hash.h"
#include "ucm/store.h"

namespace ucm {

Status Store::chain_tokens(const NamespaceId& ns, const BlockHash& hash, std::vector<uint32_t>* tokens,
                           size_t* blocks, size_t max_blocks) {
  tokens->clear();
  if (blocks) *blocks = 0;
  NamespaceDesc d;
  Status s = get_namespace(ns, &d);
  if (!s.ok()) return s;
  const BlockHash root = root_hash(d.hash_seed());
  std::vector<std::vector<uint32_t>> chain;  // last block first
  BlockHash cur = hash;
  while (cur != root) {
    if (chain.size() >= max_blocks)
      return Status::Corruption("chain of block " + to_hex(hash) + " is longer than " + std::to_string(max_blocks) +
                                " blocks without reaching the namespace's chain root (a cycle of parents?)");
    std::vector<uint32_t> t;
    BlockHash parent{};
    s = block_tokens(ns, cur, &t, &parent);
    const std::string pos = chain.empty() ? "the block itself"
                                          : std::to_string(chain.size()) + " block(s) before " + to_hex(hash);
    if (s.code() == Code::kNotFound)
      return Status::NotFound("chain of block " + to_hex(hash) + ": block " + to_hex(cur) + " (" + pos +
                              ") is not stored (removed by gc, or never saved)");
    if (!s.ok()) return s;
    if (t.empty())
      return Status::NotSupported("chain of block " + to_hex(hash) + ": block " + to_hex(cur) + " (" + pos +
                                  ") was stored without token ids (tokens unknown: a version-2 store, or a "
                                  "writer that gave no ids; store_v1.md §3.2)");
    chain.push_back(std::move(t));
    cur = parent;
  }
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) tokens->insert(tokens->end(), it->begin(), it->end());
  if (blocks) *blocks = chain.size();
  return Status::OK();
}

}  // namespace ucm
