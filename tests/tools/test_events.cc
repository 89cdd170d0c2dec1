// tests/tools/test_events.cc: StoreFollower (lib/admin/events_follow.h) on real stores: the
// snapshot in chain order with the ids the writer gave, journal following (adds, gc removals),
// blocks without ids, a trimmed journal, sharded stores; and the msgpack batch layout
// (events_wire.h) read back with msgpack-c. The wire format against vLLM's own decoder:
// tests/vllm/test_events.py (the reference; needs the vLLM venv).
#ifdef UCM_HAVE_EVENTS
#define MSGPACK_NO_BOOST 1
#include <gtest/gtest.h>
#include <msgpack.hpp>
#include <unistd.h>

#include <zmq.hpp>
#include <zmq_addon.hpp>

#include <atomic>
#include <filesystem>
#include <future>
#include <map>
#include <random>
#include <thread>

#include "events_follow.h"
#include "events_wire.h"
#include "store_blocks.h"
#include "temp_dir.h"
#include "ucm/admin.h"
#include "ucm/kv_event_publisher.h"
#include "ucm/hash.h"
#include "ucm/store.h"

using namespace ucm;
using ucm::admin::KvEvent;
using ucm::admin::StoreFollower;
namespace fs = std::filesystem;

namespace {

struct TempDir : test::TaggedTempDir {
  explicit TempDir(const std::string& tag) : TaggedTempDir("ucm-events-", tag) {}
};

NamespaceDesc tiny_ns() { return test::test_ns("events", 1, 1, 8); }  // 512-byte payloads

struct Chain {
  std::vector<uint32_t> ids;
  std::vector<BlockHash> hashes;
  BlockHash parent{};  // of the first block
};

Chain make_chain(const BlockHash& parent, size_t blocks, uint32_t seed) {
  Chain c;
  c.parent = parent;
  c.ids.resize(blocks * 16);
  std::mt19937 rng(seed);
  for (auto& t : c.ids) t = rng() % 49152;
  hash_blocks(parent, c.ids.data(), c.ids.size(), 16, &c.hashes);
  return c;
}

std::unique_ptr<Store> open_rw(const std::string& p, const std::string& shard = "") {
  return test::open_test_store(p, /*rw=*/true, /*create=*/true, 2, shard);
}

// Dumps blocks [from, to) of chain c, with their ids unless `no_ids`.
void dump(Store* s, const NamespaceId& ns, const Chain& c, size_t from, size_t to, bool no_ids = false) {
  const uint64_t n = tiny_ns().payload_bytes();
  std::vector<std::vector<uint8_t>> pl;
  std::vector<DumpItem> items;
  for (size_t i = from; i < to; ++i) pl.push_back(test::block_payload(c.hashes[i], n));
  for (size_t i = from; i < to; ++i) {
    DumpItem it;
    it.hash = c.hashes[i];
    it.parent = i == 0 ? c.parent : c.hashes[i - 1];
    it.token_count = 16;
    it.kv = pl[i - from].data();
    it.tokens = no_ids ? nullptr : c.ids.data() + i * 16;
    items.push_back(it);
  }
  Status st = s->dump(ns, items.data(), items.size())->wait(-1);
  ASSERT_TRUE(st.ok()) << st.ToString();
}

// A writer of `p` (or of its shard) registers the namespace, makes a chain of `blocks` blocks (seed
// `seed`) from its root into *c and dumps the first `dumped` of them.
NamespaceId start_chain(const std::string& p, size_t blocks, uint32_t seed, size_t dumped, Chain* c,
                        const std::string& shard = "") {
  NamespaceId ns{};
  auto s = open_rw(p, shard);
  EXPECT_TRUE(s->register_namespace(tiny_ns(), &ns).ok());
  *c = make_chain(root_hash(ns), blocks, seed);
  dump(s.get(), ns, *c, 0, dumped);
  return ns;
}

// Every block hash published as stored (in order) and removed, with the ids each came with.
struct Seen {
  std::vector<BlockHash> stored, removed;
  std::map<BlockHash, std::vector<uint32_t>> ids;
  std::map<BlockHash, BlockHash> parent;  // zero hash: published without a parent (chain start)
  size_t cleared = 0;
};

void collect(const std::vector<KvEvent>& evs, Seen* seen) {
  for (const auto& e : evs) {
    if (e.kind == KvEvent::Kind::kCleared) {
      ++seen->cleared;
      continue;
    }
    if (e.kind == KvEvent::Kind::kRemoved) {
      seen->removed.insert(seen->removed.end(), e.hashes.begin(), e.hashes.end());
      continue;
    }
    ASSERT_EQ(e.tokens.size(), e.hashes.size() * e.block_size);
    for (size_t i = 0; i < e.hashes.size(); ++i) {
      seen->stored.push_back(e.hashes[i]);
      seen->ids[e.hashes[i]].assign(e.tokens.begin() + i * e.block_size, e.tokens.begin() + (i + 1) * e.block_size);
      seen->parent[e.hashes[i]] = i > 0 ? e.hashes[i - 1] : (e.has_parent ? e.parent : BlockHash{});
    }
  }
}

// A follower of a store, the events of its snapshot and what they published.
struct Followed {
  std::unique_ptr<StoreFollower> f;
  std::vector<KvEvent> evs;
  Seen seen;
};

// Opens a follower of store `p` (namespace `name`, "" for its only one) and takes its snapshot in
// events of at most `batch` blocks.
void follow(const std::string& p, const std::string& name, size_t batch, Followed* out) {
  ASSERT_TRUE(StoreFollower::Open(p, name, &out->f).ok());
  ASSERT_TRUE(out->f->snapshot(&out->evs, batch).ok());
  collect(out->evs, &out->seen);
}

size_t pos(const std::vector<BlockHash>& v, const BlockHash& h) {
  return static_cast<size_t>(std::find(v.begin(), v.end(), h) - v.begin());
}

TEST(Events, SnapshotInChainOrderWithTheWritersIds) {
  TempDir dir("snap");
  NamespaceId ns{};
  Chain a, b, c;
  {
    auto s = open_rw(dir.path);
    ASSERT_TRUE(s->register_namespace(tiny_ns(), &ns).ok());
    const BlockHash root = root_hash(ns);
    a = make_chain(root, 12, 1);
    b = make_chain(a.hashes[5], 4, 2);  // branches off a's 6th block
    c = make_chain(root, 3, 3);
    dump(s.get(), ns, b, 0, 4);          // children committed before their parents
    dump(s.get(), ns, a, 0, 12);
    dump(s.get(), ns, c, 0, 3, /*no_ids=*/true);
  }
  Followed fl;
  ASSERT_NO_FATAL_FAILURE(follow(dir.path, "", 5, &fl));
  auto& [f, evs, seen] = fl;
  EXPECT_EQ(seen.stored.size(), 16u);  // a and b; c has no ids
  EXPECT_EQ(f->stats().without_tokens, 3u);
  EXPECT_EQ(f->published(), 16u);
  for (const Chain* ch : {&a, &b})
    for (size_t i = 0; i < ch->hashes.size(); ++i) {
      const BlockHash& h = ch->hashes[i];
      ASSERT_LT(pos(seen.stored, h), seen.stored.size());
      EXPECT_EQ(seen.ids[h], std::vector<uint32_t>(ch->ids.begin() + i * 16, ch->ids.begin() + (i + 1) * 16));
      const BlockHash parent = i ? ch->hashes[i - 1] : ch->parent;
      EXPECT_EQ(seen.parent[h], parent == root_hash(ns) ? BlockHash{} : parent);
      if (parent != root_hash(ns)) {
        EXPECT_LT(pos(seen.stored, parent), pos(seen.stored, h));  // parents first
      }
    }
  for (const auto& e : evs) EXPECT_LE(e.hashes.size(), 5u);
  // Nothing changed: a poll publishes nothing.
  evs.clear();
  ASSERT_TRUE(f->poll(&evs, 5).ok());
  EXPECT_TRUE(evs.empty());
}

// With a sink (set_sink), the snapshot leaves in pieces of `every` events as it is made, never
// whole: the pieces, then what is left, announce the same blocks in the same order with the same
// parents and ids as the snapshot taken without one (a run cut at a piece's end continues in the
// next event, so there are more events).
TEST(Events, SnapshotThroughASinkInPiecesIsTheSameSnapshot) {
  TempDir dir("sink");
  NamespaceId ns{};
  {
    auto s = open_rw(dir.path);
    ASSERT_TRUE(s->register_namespace(tiny_ns(), &ns).ok());
    for (uint32_t c = 0; c < 6; ++c) {
      Chain ch = make_chain(root_hash(ns), 7, 40 + c);
      dump(s.get(), ns, ch, 0, 7);
    }
  }
  Followed whole;
  ASSERT_NO_FATAL_FAILURE(follow(dir.path, "", 3, &whole));
  std::unique_ptr<StoreFollower> f;
  ASSERT_TRUE(StoreFollower::Open(dir.path, "", &f).ok());
  std::vector<KvEvent> got;
  size_t calls = 0, most = 0;
  f->set_sink([&](std::vector<KvEvent>* ev) {
    ++calls;
    most = std::max(most, ev->size());
    got.insert(got.end(), ev->begin(), ev->end());
    ev->clear();
  }, 2);
  std::vector<KvEvent> rest;
  ASSERT_TRUE(f->snapshot(&rest, 3).ok());
  got.insert(got.end(), rest.begin(), rest.end());
  EXPECT_GE(calls, 5u);  // 6 chains of 7 blocks in runs of 3: 18 events
  EXPECT_LE(most, 2u);
  EXPECT_GE(got.size(), whole.evs.size());
  for (const auto& e : got) EXPECT_LE(e.hashes.size(), 3u);
  Seen a, b;
  collect(got, &a);
  collect(whole.evs, &b);
  EXPECT_EQ(a.stored, b.stored);
  EXPECT_EQ(a.parent, b.parent);
  EXPECT_EQ(a.ids, b.ids);
}

TEST(Events, FollowsAddsAndGcRemovalsAndRescansATrimmedJournal) {
  TempDir dir("follow");
  Chain a;
  const NamespaceId ns = start_chain(dir.path, 8, 7, 4, &a);
  ASSERT_FALSE(HasFailure());
  Followed fl;
  ASSERT_NO_FATAL_FAILURE(follow(dir.path, "", 64, &fl));
  auto& [f, evs, seen] = fl;
  ASSERT_EQ(seen.stored.size(), 4u);

  {  // a writer adds the rest of the chain while the follower runs
    auto s = open_rw(dir.path);
    dump(s.get(), ns, a, 4, 8);
  }
  evs.clear();
  ASSERT_TRUE(f->poll(&evs, 64).ok());
  Seen added;
  collect(evs, &added);
  ASSERT_EQ(added.stored, std::vector<BlockHash>(a.hashes.begin() + 4, a.hashes.end()));
  ASSERT_EQ(evs.size(), 1u);  // one run, chained to the block before it
  EXPECT_TRUE(evs[0].has_parent);
  EXPECT_EQ(evs[0].parent, a.hashes[3]);

  // gc removes block 6 (and 7, chained after it).
  admin::GcOptions g;
  g.remove.push_back({ns, a.hashes[6]});
  g.grace_ms = 0;
  admin::GcReport rep;
  ASSERT_TRUE(admin::gc(dir.path, g, &rep).ok());
  evs.clear();
  ASSERT_TRUE(f->poll(&evs, 64).ok());
  Seen removed;
  collect(evs, &removed);
  std::sort(removed.removed.begin(), removed.removed.end());
  std::vector<BlockHash> want = {a.hashes[6], a.hashes[7]};
  std::sort(want.begin(), want.end());
  EXPECT_EQ(removed.removed, want);
  EXPECT_EQ(f->published(), 6u);

  // The journal trimmed past the follower: it rescans and still publishes the difference.
  {
    auto s = open_rw(dir.path);
    dump(s.get(), ns, a, 6, 8);
  }
  g.remove = {{ns, a.hashes[0]}};  // takes the whole chain
  g.journal_keep = 1;
  ASSERT_TRUE(admin::gc(dir.path, g, &rep).ok());
  evs.clear();
  ASSERT_TRUE(f->poll(&evs, 64).ok());
  EXPECT_GE(f->stats().rescans, 1u);
  Seen last;
  collect(evs, &last);
  EXPECT_EQ(last.removed.size(), 6u);  // 0-5; 6 and 7 came and went between two polls
  EXPECT_EQ(f->published(), 0u);
}

TEST(Events, ShardedStoreBlockHeldByTwoShardsIsPublishedOnce) {
  TempDir dir("sharded");
  Chain a;
  NamespaceId ns = start_chain(dir.path, 4, 11, 4, &a, "one");
  ASSERT_FALSE(HasFailure());
  {
    auto s = open_rw(dir.path, "two");
    ASSERT_TRUE(s->register_namespace(tiny_ns(), &ns).ok());
    dump(s.get(), ns, a, 0, 2);
  }
  Followed fl;
  ASSERT_NO_FATAL_FAILURE(follow(dir.path, tiny_ns().display_name(), 64, &fl));
  auto& [f, evs, seen] = fl;
  EXPECT_EQ(seen.stored.size(), 4u);
  EXPECT_EQ(f->stats().shards, 2u);

  // A third writer's new shard is picked up by the next poll.
  Chain b = make_chain(a.hashes[3], 2, 12);
  {
    auto s = open_rw(dir.path, "three");
    ASSERT_TRUE(s->register_namespace(tiny_ns(), &ns).ok());
    dump(s.get(), ns, b, 0, 2);
  }
  evs.clear();
  ASSERT_TRUE(f->poll(&evs, 64).ok());
  Seen more;
  collect(evs, &more);
  EXPECT_EQ(more.stored, b.hashes);
  EXPECT_EQ(f->stats().shards, 3u);

  std::unique_ptr<StoreFollower> g;
  EXPECT_EQ(StoreFollower::Open(dir.path, "no-such-namespace", &g).code(), Code::kInvalidArgument);
}

// The batch read back with msgpack-c: the layout events_wire.h documents.
TEST(Events, BatchLayoutIsVllmsKVEventBatch) {
  std::vector<KvEvent> evs(3);
  evs[0].kind = KvEvent::Kind::kCleared;
  evs[1].kind = KvEvent::Kind::kStored;
  evs[1].hashes = {BlockHash{1}, BlockHash{2}};
  evs[1].tokens.assign(32, 7);
  evs[1].tokens[31] = 100000;
  evs[1].block_size = 16;
  evs[1].has_parent = false;
  evs[2].kind = KvEvent::Kind::kRemoved;
  evs[2].hashes = {BlockHash{3}};
  const std::string b = admin::encode_kv_event_batch(1234.5, evs, 0, 3, "ucm:corpus", 0);
  msgpack::object_handle oh = msgpack::unpack(b.data(), b.size());
  const msgpack::object& o = oh.get();
  ASSERT_EQ(o.type, msgpack::type::ARRAY);
  ASSERT_EQ(o.via.array.size, 3u);  // [ts, events, data_parallel_rank], as vLLM's publisher stamps it
  EXPECT_EQ(o.via.array.ptr[2].type, msgpack::type::POSITIVE_INTEGER);
  EXPECT_EQ(o.via.array.ptr[2].as<int>(), 0);
  {  // rank 3; and None: omitted, the class default
    const std::string r3 = admin::encode_kv_event_batch(1.0, evs, 0, 1, "m", 3);
    EXPECT_EQ(msgpack::unpack(r3.data(), r3.size()).get().via.array.ptr[2].as<int>(), 3);
    const std::string none = admin::encode_kv_event_batch(1.0, evs, 0, 1, "m", -1);
    EXPECT_EQ(msgpack::unpack(none.data(), none.size()).get().via.array.size, 2u);
  }
  EXPECT_EQ(o.via.array.ptr[0].type, msgpack::type::FLOAT64);
  EXPECT_EQ(o.via.array.ptr[0].as<double>(), 1234.5);
  const msgpack::object& events = o.via.array.ptr[1];
  ASSERT_EQ(events.via.array.size, 3u);
  auto as_map = [](const msgpack::object& m) {
    std::map<std::string, msgpack::object> r;
    for (uint32_t i = 0; i < m.via.map.size; ++i) r[m.via.map.ptr[i].key.as<std::string>()] = m.via.map.ptr[i].val;
    return r;
  };
  auto cleared = as_map(events.via.array.ptr[0]);
  EXPECT_EQ(cleared.size(), 1u);
  EXPECT_EQ(cleared["type"].as<std::string>(), "AllBlocksCleared");
  auto st = as_map(events.via.array.ptr[1]);
  EXPECT_EQ(st["type"].as<std::string>(), "BlockStored");
  ASSERT_EQ(st["block_hashes"].via.array.size, 2u);
  EXPECT_EQ(st["block_hashes"].via.array.ptr[1].type, msgpack::type::BIN);
  EXPECT_EQ(st["block_hashes"].via.array.ptr[1].via.bin.size, 16u);
  EXPECT_EQ(static_cast<uint8_t>(st["block_hashes"].via.array.ptr[1].via.bin.ptr[0]), 2);
  EXPECT_TRUE(st["parent_block_hash"].is_nil());
  EXPECT_EQ(st["token_ids"].via.array.size, 32u);
  EXPECT_EQ(st["token_ids"].via.array.ptr[31].as<uint32_t>(), 100000u);
  EXPECT_EQ(st["block_size"].as<uint32_t>(), 16u);
  EXPECT_TRUE(st["lora_id"].is_nil());
  EXPECT_TRUE(st["lora_name"].is_nil());
  EXPECT_EQ(st["medium"].as<std::string>(), "ucm:corpus");
  auto rm = as_map(events.via.array.ptr[2]);
  EXPECT_EQ(rm.size(), 3u);
  EXPECT_EQ(rm["type"].as<std::string>(), "BlockRemoved");
  EXPECT_EQ(rm["medium"].as<std::string>(), "ucm:corpus");
}

// publish_events end to end on sockets: the replay socket gives the snapshot as vLLM's
// publisher frames it, the PUB socket the live batch of a writer's blocks, and a second
// publisher on a taken port fails with IOError.
TEST(Events, PublishesVllmFramesAndAnswersReplay) {
  TempDir dir("zmq");
  Chain a;
  const NamespaceId ns = start_chain(dir.path, 6, 21, 3, &a);
  ASSERT_FALSE(HasFailure());
  std::atomic<bool> stop{false};
  std::promise<std::pair<std::string, std::string>> ready;
  admin::EventsOptions o;
  o.endpoint = "tcp://*:0";
  o.replay_endpoint = "tcp://127.0.0.1:0";
  o.topic = "kv";
  o.poll_ms = 50;
  o.resend_min_ms = 0;  // the sequence numbers below: no snapshot sent again for the subscriber
  o.stop = &stop;
  o.on_ready = [&](const std::string& p, const std::string& r) { ready.set_value({p, r}); };
  admin::EventsReport rep;
  Status result;
  std::thread t([&] { result = admin::publish_events(dir.path, o, &rep); });
  auto eps = ready.get_future().get();
  const std::string pub_port = eps.first.substr(eps.first.rfind(':') + 1);

  zmq::context_t ctx;
  zmq::socket_t sub(ctx, zmq::socket_type::sub);
  sub.set(zmq::sockopt::subscribe, "kv");
  sub.connect("tcp://127.0.0.1:" + pub_port);
  zmq::socket_t replay(ctx, zmq::socket_type::dealer);
  replay.connect(eps.second);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the subscription reaches the PUB

  const std::string from_seq(8, '\0');  // from seq 0 (outlives the send: zmq::buffer keeps a pointer)
  std::array<zmq::const_buffer, 2> req = {zmq::const_buffer(), zmq::buffer(from_seq)};
  ASSERT_TRUE(zmq::send_multipart(replay, req));
  std::vector<std::vector<zmq::message_t>> got;
  for (;;) {
    std::vector<zmq::message_t> f;
    ASSERT_TRUE(zmq::recv_multipart(replay, std::back_inserter(f)));
    ASSERT_EQ(f.size(), 4u);  // "", topic, seq, payload
    if (f[2].to_string() == std::string(8, '\xff')) break;  // the end marker: seq -1
    EXPECT_EQ(f[1].to_string(), "kv");
    got.push_back(std::move(f));
  }
  ASSERT_EQ(got.size(), 1u);  // AllBlocksCleared + the 3-block run: one batch
  EXPECT_EQ(got[0][2].to_string(), std::string(8, '\0'));
  msgpack::object_handle oh = msgpack::unpack(static_cast<const char*>(got[0][3].data()), got[0][3].size());
  ASSERT_EQ(oh.get().via.array.ptr[1].via.array.size, 2u);

  {  // a writer adds the rest: the live batch, sequence 1, on the PUB socket
    auto s = open_rw(dir.path);
    dump(s.get(), ns, a, 3, 6);
  }
  sub.set(zmq::sockopt::rcvtimeo, 10000);
  std::vector<zmq::message_t> live;
  do {  // the snapshot (seq 0) may have reached the SUB socket too
    live.clear();
    ASSERT_TRUE(zmq::recv_multipart(sub, std::back_inserter(live)));
    ASSERT_EQ(live.size(), 3u);
  } while (live[1].to_string() == std::string(8, '\0'));
  EXPECT_EQ(live[0].to_string(), "kv");
  EXPECT_EQ(live[1].to_string(), std::string("\0\0\0\0\0\0\0\1", 8));
  msgpack::object_handle lh = msgpack::unpack(static_cast<const char*>(live[2].data()), live[2].size());
  const msgpack::object& ev = lh.get().via.array.ptr[1].via.array.ptr[0];
  bool stored = false;
  for (uint32_t i = 0; i < ev.via.map.size; ++i)
    if (ev.via.map.ptr[i].key.as<std::string>() == "block_hashes") stored = ev.via.map.ptr[i].val.via.array.size == 3;
  EXPECT_TRUE(stored);

  admin::EventsOptions taken = o;  // the same PUB port again
  taken.endpoint = "tcp://*:" + pub_port;
  taken.replay_endpoint.clear();
  taken.on_ready = nullptr;
  admin::EventsReport r2;
  EXPECT_EQ(admin::publish_events(dir.path, taken, &r2).code(), Code::kIOError);

  stop = true;
  t.join();
  ASSERT_TRUE(result.ok()) << result.ToString();
  EXPECT_EQ(rep.batches, 2u);
  EXPECT_EQ(rep.blocks_stored, 6u);
  EXPECT_EQ(rep.replay_requests, 1u);
}

// A subscriber that connects after the snapshot went out gets the store's blocks again on the PUB
// socket (XPUB), without AllBlocksCleared; one whose subscription does not match the topic does not
// make it happen; with --no-clear the first snapshot has no AllBlocksCleared either.
TEST(Events, LateSubscriberGetsTheSnapshotAgain) {
  TempDir dir("late");
  Chain a;
  start_chain(dir.path, 4, 23, 4, &a);
  ASSERT_FALSE(HasFailure());
  std::atomic<bool> stop{false};
  std::promise<std::string> ready;
  admin::EventsOptions o;
  o.endpoint = "tcp://*:0";
  o.replay_endpoint.clear();
  o.topic = "kv@ucm-store@SmolLM2";
  o.poll_ms = 20;
  o.resend_min_ms = 1;
  o.clear_on_start = false;
  o.stop = &stop;
  o.on_ready = [&](const std::string& p, const std::string&) { ready.set_value(p); };
  admin::EventsReport rep;
  Status result;
  std::thread t([&] { result = admin::publish_events(dir.path, o, &rep); });
  struct Join {  // an ASSERT below returns early: stop the publisher first
    std::atomic<bool>& stop;
    std::thread& t;
    ~Join() {
      stop = true;
      if (t.joinable()) t.join();
    }
  } join{stop, t};
  const std::string bound = ready.get_future().get();
  const std::string ep = "tcp://127.0.0.1:" + bound.substr(bound.rfind(':') + 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the first snapshot is out: nobody heard it

  zmq::context_t ctx;
  zmq::socket_t other(ctx, zmq::socket_type::sub);  // another topic: no resend for it
  other.set(zmq::sockopt::subscribe, "zz");
  other.connect(ep);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));

  zmq::socket_t sub(ctx, zmq::socket_type::sub);  // llm-d's filter
  sub.set(zmq::sockopt::subscribe, "kv@");
  sub.set(zmq::sockopt::rcvtimeo, 10000);
  sub.connect(ep);
  std::vector<zmq::message_t> f;
  ASSERT_TRUE(zmq::recv_multipart(sub, std::back_inserter(f)));
  ASSERT_EQ(f.size(), 3u);
  EXPECT_EQ(f[0].to_string(), o.topic);
  EXPECT_EQ(f[1].to_string(), std::string("\0\0\0\0\0\0\0\1", 8));  // after the first snapshot's batch
  msgpack::object_handle h = msgpack::unpack(static_cast<const char*>(f[2].data()), f[2].size());
  const msgpack::object& evs = h.get().via.array.ptr[1];
  ASSERT_EQ(evs.via.array.size, 1u);  // the 4-block run, no AllBlocksCleared
  const msgpack::object& ev = evs.via.array.ptr[0];
  std::map<std::string, msgpack::object> m;
  for (uint32_t i = 0; i < ev.via.map.size; ++i) m[ev.via.map.ptr[i].key.as<std::string>()] = ev.via.map.ptr[i].val;
  EXPECT_EQ(m["type"].as<std::string>(), "BlockStored");
  ASSERT_EQ(m["block_hashes"].via.array.size, 4u);
  EXPECT_TRUE(m["parent_block_hash"].is_nil());
  stop = true;
  t.join();
  ASSERT_TRUE(result.ok()) << result.ToString();
  EXPECT_EQ(rep.subscriptions, 1u);  // "zz" does not match the topic
  EXPECT_EQ(rep.resends, 1u);
  EXPECT_EQ(rep.blocks_resent, 4u);
  EXPECT_EQ(rep.blocks_stored, 4u);  // published once; resent apart
  EXPECT_EQ(rep.batches, 2u);
  // The first snapshot had no AllBlocksCleared (clear_on_start off): its one event is the run.
  EXPECT_EQ(rep.events, 2u);
}

}  // namespace
#endif  // UCM_HAVE_EVENTS
