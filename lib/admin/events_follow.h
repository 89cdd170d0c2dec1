// lib/admin/events_follow.h: a store's blocks as a stream of KV events, for `ucm events`.
// Internal to lib/admin; not installed. docs/cli.md ("ucm events"), store_v1.md §5.5 (journal).
//
// StoreFollower turns a store (single or sharded, §11) into vLLM-style KV events: snapshot()
// gives every block that holds its token ids (store_v1.md §3.2) as BlockStored, parents before
// children; poll() gives what writers and gc changed since, from each shard's journal (§5.5).
// A shard whose journal was trimmed past the follower's position, or whose index was rebuilt
// (a new RocksDB identity), is rescanned and diffed against what was published. A block held by
// several shards is published once, and removed when the last shard holding it drops it.
// Blocks stored without ids ("tokens unknown") are counted, never published.
//
// Not thread-safe: one thread calls snapshot() once, then poll().
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ucm/status.h"
#include "ucm/types.h"

namespace ucm::admin {

/// One event, in ucm's terms; events_wire.h encodes it as vLLM's BlockStored / BlockRemoved /
/// AllBlocksCleared (ucm/kv_event_blocks.h gives the mapping).
struct KvEvent {
  enum class Kind { kStored, kRemoved, kCleared };
  Kind kind = Kind::kStored;
  NamespaceId ns{};
  /// kStored: a run of blocks, each the parent of the next; kRemoved: any blocks.
  std::vector<BlockHash> hashes;
  /// kStored: the first block's parent; false when it is the chain root (first block of a chain).
  bool has_parent = false;
  BlockHash parent{};
  /// kStored: hashes.size() x block_size token ids, block by block.
  std::vector<uint32_t> tokens;
  uint32_t block_size = 0;
};

struct FollowStats {
  uint64_t blocks_stored = 0;    ///< blocks published as stored
  uint64_t blocks_removed = 0;   ///< blocks published as removed
  uint64_t blocks_resent = 0;    ///< blocks published again as stored by resend()
  uint64_t without_tokens = 0;   ///< blocks seen without token ids (not published)
  uint64_t unreadable = 0;       ///< blocks whose ids could not be read (gone, corrupt: not published)
  uint64_t rescans = 0;          ///< shard rescans (journal trimmed past us, index rebuilt, new shard)
  uint64_t shards = 0;           ///< shards followed (1 for a single store)
};

class StoreFollower {
 public:
  /// `ns`: a namespace name or 32-hex id to follow, "" for every namespace. InvalidArgument
  /// (not a store; `ns` names no namespace of the store), Version, Corruption, IOError.
  static Status Open(const std::string& store, const std::string& ns, std::unique_ptr<StoreFollower>* out);
  virtual ~StoreFollower() = default;
  /// From now on, whenever the vector given to snapshot(), poll() or resend() holds at least
  /// `every` events, hands it to `sink` (which publishes them and empties it), so a snapshot of
  /// millions of blocks is never held whole; the events keep their order.
  virtual void set_sink(std::function<void(std::vector<KvEvent>*)> sink, size_t every) = 0;
  /// Appends BlockStored events for every block with ids, parents before children; blocks of
  /// one chain come in runs of at most `max_run` blocks per event. Call once, first.
  virtual Status snapshot(std::vector<KvEvent>* out, uint32_t max_run) = 0;
  /// Appends the changes since the last snapshot()/poll(), in journal order per shard.
  virtual Status poll(std::vector<KvEvent>* out, uint32_t max_run) = 0;
  /// Appends BlockStored events again for every block published now, parents before children (as
  /// snapshot()), reading their ids again: what a subscriber that came after the snapshot needs.
  /// Call right after poll(). Changes nothing that is published.
  virtual Status resend(std::vector<KvEvent>* out, uint32_t max_run) = 0;
  virtual const FollowStats& stats() const = 0;
  /// Blocks currently published (stored and not removed).
  virtual uint64_t published() const = 0;
};

}  // namespace ucm::admin
