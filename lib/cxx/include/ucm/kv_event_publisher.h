// ucm/kv_event_publisher.h: `ucm events` as a library call: a store's blocks published as vLLM KV
// events (BlockStored / BlockRemoved / AllBlocksCleared) over ZeroMQ, in vLLM's own wire format,
// for KV-aware routers. CLI reference: docs/cli.md ("ucm events"). Built only where libzmq,
// cppzmq and msgpack-c are (scripts/deps.sh installs them); UCM_HAVE_EVENTS says so.
#pragma once
#include <atomic>
#include <cstdint>
#include <string>

#include "ucm/admin.h"

namespace ucm::admin {

struct EventsOptions {
  std::string ns;                                ///< namespace name or 32-hex id; "" = every namespace
  /// PUB socket, as vLLM's ZmqEventPublisher: bound when it holds '*' or '::' or is ipc:// /
  /// inproc://, connected otherwise. "tcp://*:0" binds a free port (the report names it).
  std::string endpoint = "tcp://*:5557";
  /// ROUTER socket answering replay requests (an 8-byte big-endian start sequence; replies
  /// (topic, seq, payload) per buffered batch, then ("", -1, "")); "" = none.
  std::string replay_endpoint = "tcp://*:5558";
  /// First frame of every message (vLLM's default ""). llm-d's indexer subscribes to "kv@" and reads
  /// the pod and model from "kv@<pod>@<model>" (docs/operations.md).
  std::string topic;
  /// The batches' data_parallel_rank, as vLLM's publishers stamp theirs (0 without data
  /// parallelism); < 0: None (omitted: [ts, events]).
  int data_parallel_rank = 0;
  /// Publish AllBlocksCleared before the first snapshot (what a router knew of this publisher is
  /// stale). Off where the topic names a serving pod whose own entries a pod-wide clear would wipe.
  bool clear_on_start = true;
  /// A subscription that arrives after the first snapshot (the PUB socket is a ZeroMQ XPUB) gets
  /// the store's current blocks again, at most once per this many ms (later ones wait for it);
  /// 0: never (subscribers then rely on replay).
  uint32_t resend_min_ms = 5000;
  std::string medium;                            ///< "" = kv_event_medium(store) ("ucm:<dir name>")
  uint32_t poll_ms = 1000;                       ///< how often the journals are read
  uint32_t max_blocks_per_batch = 1024;          ///< blocks per KVEventBatch (and per event)
  uint32_t buffer_batches = 10000;               ///< batches kept for replay (vLLM's buffer_steps)
  uint32_t hwm = 100000;                         ///< PUB high-water mark (messages)
  uint64_t run_for_ms = 0;                       ///< stop after this long; 0 = until *stop
  const std::atomic<bool>* stop = nullptr;       ///< set (e.g. by SIGTERM) to stop; may be null
  ProgressFn progress;
  /// Called once the sockets are bound, with the PUB and replay endpoints as bound.
  std::function<void(const std::string& pub, const std::string& replay)> on_ready;
};

struct EventsReport {
  std::string store, medium, endpoint, replay_endpoint;
  uint64_t batches = 0;         ///< KVEventBatch messages published (sequence numbers 0..batches-1)
  uint64_t events = 0;          ///< events in them
  uint64_t snapshot_blocks = 0; ///< blocks of the start snapshot
  uint64_t blocks_stored = 0;   ///< blocks published as stored (snapshot included)
  uint64_t blocks_removed = 0;  ///< blocks published as removed
  uint64_t published = 0;       ///< blocks stored and not removed at the end
  uint64_t without_tokens = 0;  ///< blocks seen without token ids (never published)
  uint64_t unreadable = 0;      ///< blocks whose ids could not be read (not published)
  uint64_t rescans = 0;         ///< shard rescans (journal trimmed past us, index rebuilt, new shard)
  uint64_t shards = 0;
  uint64_t replay_requests = 0;
  uint64_t subscriptions = 0;   ///< subscriptions seen on the PUB socket that match the topic
  uint64_t resends = 0;         ///< snapshots sent again for them
  uint64_t blocks_resent = 0;   ///< blocks in those
  double seconds = 0;
  std::string to_json() const;
  std::string to_text() const;
};

/// Publishes AllBlocksCleared (clear_on_start), then the store's blocks with ids as BlockStored,
/// parents first, then follows every shard's journal (store_v1.md §5.5) every poll_ms until
/// *opts.stop or run_for_ms; a new subscriber gets the current blocks again (resend_min_ms). Needs only read access to the store. Errors: InvalidArgument (not
/// a store, unknown namespace, bad endpoint), IOError (a socket cannot bind), NotSupported (built
/// without libzmq), and the store's errors.
Status publish_events(const std::string& store, const EventsOptions& opts, EventsReport* report);

}  // namespace ucm::admin
