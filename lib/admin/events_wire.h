// lib/admin/events_wire.h: KvEvent batches as vLLM's KV event wire format. Internal to lib/admin.
//
// The reference is vLLM 0.32's vllm/distributed/kv_events.py (msgspec structs):
//   KVEventBatch (array_like, omit_defaults): [ts: float64, events: [...], data_parallel_rank: int]
//     (vLLM's ZmqEventPublisher stamps its rank on every batch, 0 without data parallelism; None,
//     the class default, is omitted: [ts, events]);
//   each event a map tagged by "type" (msgspec tag=True: the class name), its fields by name:
//     {"type": "BlockStored", "block_hashes": [bin16...], "parent_block_hash": bin16 | nil,
//      "token_ids": [uint...], "block_size": uint, "lora_id": nil, "medium": str,
//      "lora_name": nil}  (the fields with defaults, extra_keys .. session_id, omitted)
//     {"type": "BlockRemoved", "block_hashes": [bin16...], "medium": str}
//     {"type": "AllBlocksCleared"}
// Block hashes are ucm's 16-byte block hashes as msgpack bin (vLLM's ExternalBlockHash is
// bytes | int). tests/vllm/test_events.py decodes these bytes with vLLM's own decoder.
#pragma once
#include <string>
#include <vector>

#include "events_follow.h"

namespace ucm::admin {

/// msgpack of KVEventBatch(ts, events[begin, end), data_parallel_rank), every event's medium
/// `medium`. `ts`: seconds since the epoch; `dp_rank` < 0: None (omitted).
std::string encode_kv_event_batch(double ts, const std::vector<KvEvent>& events, size_t begin, size_t end,
                                  const std::string& medium, int dp_rank);

}  // namespace ucm::admin
