// ucm/kv_event_blocks.h: how ucm names its blocks in vLLM KV events (vllm/distributed/kv_events.py of
// vLLM 0.32: BlockStored, BlockRemoved, AllBlocksCleared). One owner for the rule: `ucm events`
// (lib/admin/events_*.cc) and the vLLM connector (through ucm_event_medium) both use it.
//
// A ucm block in an event: block_hashes = its 16-byte block hash (msgpack bin, vLLM's
// ExternalBlockHash bytes form), parent_block_hash = its parent's 16 bytes, or nil for the first
// block of a chain (parent == root_hash(hash seed)), token_ids = its block_size ids,
// block_size = the namespace's block size, lora_id / lora_name = nil, medium = kv_event_medium().
#pragma once
#include <string>

namespace ucm {

/// The `medium` of the KV events that describe blocks of the store at `store_path`:
/// "ucm:" + the store directory's name (the last component of the absolute, lexically
/// normalized path; "/srv/kv/corpus/" -> "ucm:corpus"). Symlinks are not resolved, so every host
/// mounting the store under the same name gives the same medium. Pure: nothing is read.
std::string kv_event_medium(const std::string& store_path);

}  // namespace ucm
