// gc beside a live writer (store_v1.md §11.5, docs/cli.md "gc beside a live writer"): a store (or
// shard) whose writer lock a running handle holds is planned read-only and its removals are
// handed to that writer, which applies them at its heartbeat while it keeps dumping; loads of the
// removed blocks become NOT_FOUND misses, the rest still load bit-exact; a malformed request is
// refused (.bad) and changes nothing; a writer that does not poll leaves gc with the documented
// report and exit code 4.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "cli_run.h"
#include "store_blocks.h"
#include "temp_dir.h"
#include "tools_test_util.h"
#include "ucm/admin.h"
#include "ucm/format/format.h"
#include "ucm/hash.h"
#include "ucm/store.h"

using namespace ucm;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

NamespaceDesc tiny_ns() { return test::test_ns("gc-live", 1, 1, 8); }  // 512-byte payloads
constexpr uint64_t kBlock = 512;

struct TempDir : test::TaggedTempDir {
  explicit TempDir(const std::string& tag) : TaggedTempDir("ucm-gclive-", tag) {}
};

std::unique_ptr<Store> open_rw(const std::string& p, const std::string& shard = "") {
  return test::open_test_store(p, /*rw=*/true, /*create=*/true, 2, shard);
}

Status dump(Store* s, const NamespaceId& ns, const BlockHash& parent, const std::vector<BlockHash>& hs) {
  const NamespaceDesc d = tiny_ns();
  std::vector<std::vector<uint8_t>> pl;
  std::vector<DumpItem> items;
  for (size_t i = 0; i < hs.size(); ++i) pl.push_back(test::block_payload(hs[i], d.payload_bytes()));
  for (size_t i = 0; i < hs.size(); ++i) {
    DumpItem it;
    it.hash = hs[i];
    it.parent = i ? hs[i - 1] : parent;
    it.token_count = d.block_size;
    it.kv = pl[i].data();
    items.push_back(it);
  }
  return s->dump(ns, items.data(), items.size())->wait();
}

/// Per block: OK with the derived payload, NOT_FOUND, or anything else (a failure of the test).
std::vector<Code> load_codes(Store* s, const NamespaceId& ns, const std::vector<BlockHash>& hs) {
  const test::CheckedLoad r = test::load_checked(s, ns, hs, tiny_ns().payload_bytes());
  std::vector<Code> out = r.codes();
  for (size_t i = 0; i < hs.size(); ++i)
    if (out[i] == Code::kOk && !r.payload_ok[i]) out[i] = Code::kInternal;  // wrong bytes
  return out;
}

size_t count(const std::vector<Code>& v, Code c) { return size_t(std::count(v.begin(), v.end(), c)); }

std::vector<BlockHash> cat(std::initializer_list<const std::vector<BlockHash>*> l) {
  std::vector<BlockHash> out;
  for (auto* v : l) out.insert(out.end(), v->begin(), v->end());
  return out;
}

void expect_verified_clean(const std::string& p) {
  admin::InspectOptions io;
  io.verify = true;
  EXPECT_EQ(test::must_inspect(p, io).corrupt_total, 0u);
}

/// Loads of `gone` through s are NOT_FOUND misses; those of `kept` are OK with their payloads.
void expect_served(Store* s, const NamespaceId& ns, const std::vector<BlockHash>& gone,
                   const std::vector<BlockHash>& kept) {
  EXPECT_EQ(count(load_codes(s, ns, gone), Code::kNotFound), gone.size());
  EXPECT_EQ(count(load_codes(s, ns, kept), Code::kOk), kept.size());
}

/// expect_served() through a new read-only handle of p; once it is closed, p verifies clean.
void expect_reader_served(const std::string& p, const NamespaceId& ns, const std::vector<BlockHash>& gone,
                          const std::vector<BlockHash>& kept) {
  expect_served(test::open_test_store(p, false).get(), ns, gone, kept);
  expect_verified_clean(p);
}

bool wait_for(const std::function<bool()>& f, int ms) {
  for (int i = 0; i < ms / 20; ++i) {
    if (f()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return f();
}

NamespaceId reg(Store* s) {
  NamespaceId ns;
  EXPECT_TRUE(s->register_namespace(tiny_ns(), &ns).ok());
  return ns;
}

/// A writer of store (or shard) `p` registers the namespace and dumps a chain of `blocks` random
/// blocks (seed `seed`) from its root, then closes; *hs gets their hashes.
NamespaceId fill(const std::string& p, size_t blocks, uint32_t seed, std::vector<BlockHash>* hs,
                 const std::string& shard = "") {
  auto w = open_rw(p, shard);
  const NamespaceId ns = reg(w.get());
  *hs = test::random_chain(root_hash(ns), blocks, seed);
  EXPECT_TRUE(dump(w.get(), ns, root_hash(ns), *hs).ok());
  return ns;
}

/// A test's store (or shard root) `p` in its temp dir, after fill().
struct Filled {
  TempDir t;
  std::string p;
  std::vector<BlockHash> hs;
  NamespaceId ns{};
  Filled(const std::string& tag, size_t blocks, uint32_t seed, const std::string& shard = "") : t(tag), p(t.path) {
    ns = fill(p, blocks, seed, &hs, shard);
  }
};

}  // namespace

// (a) A live read-write handle keeps dumping while gc --max-bytes runs on its store: the writer
// removes the oldest blocks at its heartbeat, retires and unlinks the data file they emptied,
// loads of removed blocks are NOT_FOUND misses and the rest load bit-exact.
TEST(GcLiveWriter, SingleStoreWriterAppliesTheRemovals) {
  TempDir t("single");
  const std::string p = t.path;
  NamespaceId ns;
  std::vector<BlockHash> a, b, c, d, e;
  {
    auto w0 = open_rw(p);  // session 0: the namespace record (its own data file)
    ns = reg(w0.get());
  }
  const BlockHash root = root_hash(ns);
  a = test::random_chain(root, 10, 1);
  b = test::random_chain(root, 10, 2);
  c = test::random_chain(root, 10, 3);
  d = test::random_chain(root, 10, 4);
  e = test::random_chain(root, 10, 5);
  {
    auto w1 = open_rw(p);  // session 1: a and b, alone in a data file
    ASSERT_TRUE(dump(w1.get(), ns, root, a).ok());
    ASSERT_TRUE(dump(w1.get(), ns, root, b).ok());
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(5));  // a and b are older than c and d
  auto w = open_rw(p);  // the live writer (a server saving to the store)
  ASSERT_TRUE(dump(w.get(), ns, root, c).ok());
  ASSERT_TRUE(dump(w.get(), ns, root, d).ok());
  auto doc = [](const std::string& id, const std::vector<BlockHash>& ch) {
    DocumentEntry de;
    de.id = id;
    de.first_block = ch.front();
    de.last_block = ch.back();
    de.blocks = uint32_t(ch.size());
    de.tokens = 16 * ch.size();
    return de;
  };
  ASSERT_TRUE(w->put_document(ns, doc("doc-a", a)).ok());  // loses its blocks: unregistered
  ASSERT_TRUE(w->put_document(ns, doc("doc-c", c)).ok());
  auto r = test::open_test_store(p, false);  // a reader opened before gc (its view goes stale)

  // The server keeps saving, one block at a time, from the moment gc has handed its plan over
  // (so that the plan sees exactly a-d) until after the writer applied it.
  std::atomic<bool> asked{false};
  std::thread server([&] {
    while (!asked) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    for (size_t i = 0; i < e.size(); ++i) {
      EXPECT_TRUE(dump(w.get(), ns, i ? e[i - 1] : root, {e[i]}).ok());
      std::this_thread::sleep_for(std::chrono::milliseconds(40));
    }
  });
  admin::GcOptions go;
  go.grace_ms = 0;
  go.max_bytes = 20 * kBlock;  // of the 40 blocks gc sees, the 20 oldest go: a and b
  go.writer_wait_ms = 10000;
  go.progress = [&](const std::string& line) {
    if (line.find("asked the live writer") != std::string::npos) asked = true;
  };
  admin::GcReport rep;
  Status s = admin::gc(p, go, &rep);
  asked = true;  // (when gc failed before asking)
  server.join();
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(rep.live_writer);
  EXPECT_TRUE(rep.handoff.requested);
  EXPECT_TRUE(rep.handoff.answered);
  EXPECT_EQ(rep.handoff.outcome, "applied");
  EXPECT_GE(rep.blocks_before, 40u);
  EXPECT_EQ(rep.evicted_blocks, 20u);
  EXPECT_EQ(rep.handoff.blocks_requested, 20u);
  EXPECT_EQ(rep.handoff.blocks_removed, 20u);
  EXPECT_EQ(rep.handoff.bytes_removed, 20 * kBlock);
  EXPECT_GE(rep.handoff.files_retired, 1u);  // session 1's file held only a and b
  EXPECT_GE(rep.handoff.files_unlinked, 1u);
  EXPECT_EQ(rep.files_deleted, rep.handoff.files_unlinked);
  EXPECT_EQ(rep.handoff.documents_removed, 1u);
  EXPECT_EQ(rep.documents_removed, 1u);
  DocumentEntry got;
  EXPECT_EQ(w->get_document(ns, "doc-a", &got).code(), Code::kNotFound);
  EXPECT_TRUE(w->get_document(ns, "doc-c", &got).ok());
  EXPECT_FALSE(rep.handoff.writer.empty());
  // The answer and the request are gone from the store directory.
  EXPECT_TRUE(fs::is_empty(fmt::gc_requests_dir(p)));
  // The JSON report carries the hand-off.
  const json j = json::parse(rep.to_json());
  EXPECT_TRUE(j["live_writer"].get<bool>());
  EXPECT_EQ(j["handoff"]["blocks_removed"], 20);
  EXPECT_TRUE(j["handoff"]["answered"].get<bool>());
  EXPECT_NE(rep.to_text().find("live writer"), std::string::npos);

  // The writer keeps dumping after the removals; what is left fits the bound (plus e).
  const auto f = test::random_chain(e.back(), 3, 6);
  ASSERT_TRUE(dump(w.get(), ns, e.back(), f).ok());
  ASSERT_TRUE(r->refresh().ok());
  const auto gone = cat({&a, &b}), kept = cat({&c, &d, &e, &f});
  expect_served(r.get(), ns, gone, kept);
  expect_served(w.get(), ns, gone, kept);  // the writer's own loads
  std::vector<uint8_t> present(gone.size());
  size_t prefix = 0;
  ASSERT_TRUE(w->lookup(ns, gone.data(), gone.size(), present.data(), &prefix).ok());
  EXPECT_EQ(std::count(present.begin(), present.end(), 1), 0);
  admin::InspectReport ir;
  ASSERT_TRUE(admin::inspect(p, {}, &ir).ok());
  EXPECT_EQ(ir.blocks, kept.size());
  EXPECT_EQ(ir.bytes, kept.size() * kBlock);
  EXPECT_LE(ir.bytes - (e.size() + f.size()) * kBlock, *go.max_bytes);
  expect_verified_clean(p);
  r.reset();
  w.reset();
  // A gc under the lock afterwards finds a consistent store: nothing more to evict.
  go.max_bytes.reset();
  ASSERT_TRUE(admin::gc(p, go, &rep).ok());
  EXPECT_FALSE(rep.live_writer);
  EXPECT_EQ(rep.orphans_removed, 0u);
  EXPECT_EQ(rep.blocks_after, kept.size());
  expect_verified_clean(p);
}

// (b) A sharded store whose shard "live" has a running writer: gc evicts in one order across
// the shards, takes the idle shard under its lock and hands the live shard's part to its writer.
TEST(GcLiveWriter, ShardedStoreHandsTheBusyShardToItsWriter) {
  TempDir t("sharded");
  const std::string root = t.path;
  NamespaceId ns;
  std::vector<BlockHash> a, b, c;
  {
    auto idle = open_rw(root, "idle");
    ns = reg(idle.get());
    a = test::random_chain(root_hash(ns), 6, 11);
    ASSERT_TRUE(dump(idle.get(), ns, root_hash(ns), a).ok());
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  auto live = open_rw(root, "live");
  ASSERT_EQ(reg(live.get()), ns);
  b = test::random_chain(root_hash(ns), 6, 12);
  ASSERT_TRUE(dump(live.get(), ns, root_hash(ns), b).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  c = test::random_chain(root_hash(ns), 6, 13);
  ASSERT_TRUE(dump(live.get(), ns, root_hash(ns), c).ok());

  admin::GcOptions go;
  go.grace_ms = 0;
  go.max_bytes = 6 * kBlock;  // a (idle shard) and b (live shard) are the oldest 12 of 18
  go.writer_wait_ms = 10000;
  go.writer_heartbeat_ms = 1200;  // the live writer's heartbeat moves: planned read-only too
  admin::GcReport rep;
  Status s = admin::gc(root, go, &rep);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(rep.sharded);
  EXPECT_TRUE(rep.live_writer);
  EXPECT_EQ(rep.shards_handed_off, 1u);
  EXPECT_EQ(rep.shards_busy, 0u);
  EXPECT_EQ(rep.evicted_blocks, 12u);
  ASSERT_EQ(rep.shards.size(), 2u);
  const auto& idle_line = rep.shards[0].name == "idle" ? rep.shards[0] : rep.shards[1];
  const auto& live_line = rep.shards[0].name == "live" ? rep.shards[0] : rep.shards[1];
  EXPECT_EQ(idle_line.state, "retired");  // emptied, its namespace registered in "live" too
  EXPECT_FALSE(idle_line.live_writer);
  EXPECT_EQ(live_line.state, "done by its writer");
  EXPECT_TRUE(live_line.live_writer);
  EXPECT_TRUE(live_line.handoff.answered);
  EXPECT_EQ(live_line.handoff.blocks_removed, 6u);
  EXPECT_EQ(rep.handoff.blocks_removed, 6u);
  const json j = json::parse(rep.to_json());
  EXPECT_EQ(j["shards_handed_off"], 1);
  bool saw = false;
  for (const auto& sh : j["shards"])
    if (sh["name"] == "live") {
      saw = true;
      EXPECT_EQ(sh["handoff"]["blocks_removed"], 6);
    }
  EXPECT_TRUE(saw);

  // The live writer keeps serving: its loads and a fresh reader's see c, not a or b.
  const auto d = test::random_chain(c.back(), 2, 14);
  ASSERT_TRUE(dump(live.get(), ns, c.back(), d).ok());
  const auto gone = cat({&a, &b}), kept = cat({&c, &d});
  expect_served(live.get(), ns, gone, kept);
  expect_reader_served(root, ns, gone, kept);
}

// (c) A garbage request and one of an unknown version are refused (renamed .bad) and change
// nothing; an expired one is discarded unapplied.
TEST(GcLiveWriter, MalformedAndExpiredRequestsAreNotApplied) {
  TempDir t("bad");
  const std::string p = t.path;
  auto w = open_rw(p);
  const NamespaceId ns = reg(w.get());
  const auto hs = test::random_chain(root_hash(ns), 4, 21);
  ASSERT_TRUE(dump(w.get(), ns, root_hash(ns), hs).ok());
  const std::string dir = fmt::gc_requests_dir(p);
  ASSERT_TRUE(fmt::make_dirs(dir).ok());
  std::ofstream(dir + "/0badc0de.req") << "this is not a gc request";
  fmt::GcRequest rq;
  rq.created_ms = fmt::now_ms();
  rq.expires_ms = rq.created_ms + 60000;
  rq.requester = "test:1:newer";
  rq.entries = {{ns, hs[0]}};
  std::string bytes = fmt::encode_gc_request(rq);
  fmt::put_le32(reinterpret_cast<uint8_t*>(bytes.data()) + 8, 99);  // version 99, checksum fixed up
  fmt::put_le64(reinterpret_cast<uint8_t*>(bytes.data()) + 120, fmt::xxh3(bytes.data(), 120));
  ASSERT_TRUE(fmt::write_file_atomic(dir, "0newer00.req", bytes).ok());
  std::string flipped = fmt::encode_gc_request(rq);  // an entry's byte flipped: entries checksum
  flipped[fmt::kGcRequestHeaderSize + 3] ^= 1;
  ASSERT_TRUE(fmt::write_file_atomic(dir, "0f11pped.req", flipped).ok());
  rq.expires_ms = rq.created_ms - 1;  // its requester gave up already
  ASSERT_TRUE(fmt::write_file_atomic(dir, "0e0p1red.req", fmt::encode_gc_request(rq)).ok());
  ASSERT_TRUE(wait_for(
      [&] {
        // (each step of the writer is a rename, an unlink, then a counter: wait for the last)
        return fs::exists(dir + "/0badc0de.bad") && fs::exists(dir + "/0newer00.bad") &&
               fs::exists(dir + "/0f11pped.bad") && !fs::exists(dir + "/0e0p1red.req") &&
               !fs::exists(dir + "/0e0p1red.work") &&
               w->metrics_text().find("ucm_gc_requests_refused_total 3") != std::string::npos;
      },
      5000));
  EXPECT_FALSE(fs::exists(dir + "/0e0p1red.done"));
  EXPECT_FALSE(fs::exists(dir + "/0e0p1red.work"));
  EXPECT_EQ(count(load_codes(w.get(), ns, hs), Code::kOk), hs.size());
  EXPECT_NE(w->metrics_text().find("ucm_gc_requests_refused_total 3"), std::string::npos) << w->metrics_text();
  w.reset();
  admin::InspectReport ir;
  ASSERT_TRUE(admin::inspect(p, {}, &ir).ok());
  EXPECT_EQ(ir.blocks, hs.size());
  expect_verified_clean(p);
}

// (d) A writer that does not answer (the lock held by a process that never polls, like a writer
// of an older ucm): gc withdraws its request after --writer-wait, reports it, exits 4 (busy);
// --writer-wait 0 keeps the old behaviour (busy at once, no plan).
TEST(GcLiveWriter, AWriterThatDoesNotAnswerLeavesGcBusy) {
  const Filled f("silent", 4, 31);
  ASSERT_FALSE(HasFailure());
  const auto& [t, p, hs, ns] = f;
  std::unique_ptr<fmt::WriterLock> lock;  // held, never polling
  ASSERT_TRUE(fmt::WriterLock::Acquire(p, &lock).ok());
  admin::GcOptions go;
  go.max_bytes = 0;
  go.writer_wait_ms = 300;
  admin::GcReport rep;
  Status s = admin::gc(p, go, &rep);
  EXPECT_EQ(s.code(), Code::kBusy) << s.ToString();
  EXPECT_EQ(admin::exit_code(s), 4);
  EXPECT_NE(s.message().find("did not answer"), std::string::npos) << s.message();
  EXPECT_TRUE(rep.live_writer);
  EXPECT_TRUE(rep.handoff.requested);
  EXPECT_FALSE(rep.handoff.answered);
  EXPECT_EQ(rep.handoff.outcome, "no answer: withdrawn");
  EXPECT_EQ(rep.handoff.blocks_requested, hs.size());
  EXPECT_EQ(rep.blocks_after, hs.size());
  EXPECT_TRUE(fs::is_empty(fmt::gc_requests_dir(p)));  // withdrawn: no writer can apply it later

  go.writer_wait_ms = 0;
  s = admin::gc(p, go, &rep);
  EXPECT_EQ(s.code(), Code::kBusy);
  EXPECT_FALSE(rep.live_writer);
  EXPECT_FALSE(rep.handoff.requested);

#ifdef UCM_BIN
  // The CLI: exit 4 with the report beside the error.
  const auto run = test::run_shell(std::string(UCM_BIN) + " gc " + test::shell_quote(p) +
                                   " --max-bytes 0 --writer-wait 200ms --json");
  EXPECT_EQ(run.code, 4) << run.err;
  const json j = json::parse(run.out);
  EXPECT_EQ(j["error"]["exit_code"], 4);
  EXPECT_TRUE(j["live_writer"].get<bool>());
  EXPECT_EQ(j["handoff"]["outcome"], "no answer: withdrawn");
  EXPECT_EQ(j["handoff"]["blocks_requested"], hs.size());
  const auto bad = test::run_shell(std::string(UCM_BIN) + " gc " + test::shell_quote(p) + " --writer-wait soon");
  EXPECT_EQ(bad.code, 1) << bad.err;
  EXPECT_NE(bad.err.find("--writer-wait"), std::string::npos) << bad.err;
#endif
  lock.reset();
  expect_reader_served(p, ns, {}, hs);
}

// A shard whose writer lost its flock but still beats: planned read-only like a held one; no
// handle polls there, so the shard stays busy and nothing in it changes.
TEST(GcLiveWriter, ABeatingShardWithoutAPollingWriterStaysBusy) {
  const Filled f("beat", 3, 41, "a");
  ASSERT_FALSE(HasFailure());
  const auto& [t, root, hs, ns] = f;
  std::atomic<bool> stop{false};
  const std::string lock = fmt::lock_path(fmt::shard_path(root, "a"));
  std::thread beat([&] {
    while (!stop) {
      ::utimensat(AT_FDCWD, lock.c_str(), nullptr, 0);
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  admin::GcOptions go;
  go.grace_ms = 0;
  go.max_bytes = 0;
  go.writer_heartbeat_ms = 400;
  go.writer_wait_ms = 300;
  admin::GcReport rep;
  Status s = admin::gc(root, go, &rep);
  stop = true;
  beat.join();
  ASSERT_TRUE(s.ok()) << s.ToString();  // busy shards never failed a sharded gc
  EXPECT_EQ(rep.shards_busy, 1u);
  EXPECT_EQ(rep.shards_handed_off, 1u);
  ASSERT_EQ(rep.shards.size(), 1u);
  EXPECT_EQ(rep.shards[0].state.rfind("busy", 0), 0u) << rep.shards[0].state;
  EXPECT_EQ(rep.shards[0].handoff.outcome, "no answer: withdrawn");
  expect_served(test::open_test_store(root, false).get(), ns, {}, hs);
}

// A request a writer claimed (.work) and did not finish (it was killed) is applied by the next
// writer of the store: removals are idempotent.
TEST(GcLiveWriter, AClaimedRequestOfAKilledWriterIsAppliedByTheNext) {
  const Filled f("claimed", 4, 51);
  ASSERT_FALSE(HasFailure());
  const auto& [t, p, hs, ns] = f;
  fmt::GcRequest rq;
  rq.created_ms = fmt::now_ms();
  rq.expires_ms = rq.created_ms + 60000;
  rq.requester = "test:1:claimed";
  rq.entries = {{ns, hs[3]}, {ns, hs[2]}, {ns, hs[2]}};  // tails first; a repeat counts once
  const std::string dir = fmt::gc_requests_dir(p);
  ASSERT_TRUE(fmt::make_dirs(dir).ok());
  ASSERT_TRUE(fmt::write_file_atomic(dir, "0c1a1med.work", fmt::encode_gc_request(rq)).ok());
  auto w = open_rw(p);
  // The writer answers (.done), then removes its claim (.work): wait for both.
  ASSERT_TRUE(wait_for(
      [&] {
        return fs::exists(dir + "/0c1a1med.done") && !fs::exists(dir + "/0c1a1med.work") &&
               w->metrics_text().find("ucm_gc_blocks_removed_total 2") != std::string::npos;
      },
      5000));
  std::string text;
  ASSERT_TRUE(fmt::read_small_file(dir + "/0c1a1med.done", &text).ok());
  const json j = json::parse(text);
  EXPECT_EQ(j["blocks_removed"], 2);
  EXPECT_EQ(j["bytes_removed"], 2 * kBlock);
  EXPECT_EQ(j["requester"], "test:1:claimed");
  const auto codes = load_codes(w.get(), ns, hs);
  EXPECT_EQ(codes, (std::vector<Code>{Code::kOk, Code::kOk, Code::kNotFound, Code::kNotFound}));
  EXPECT_NE(w->metrics_text().find("ucm_gc_blocks_removed_total 2"), std::string::npos);
  w.reset();
  expect_verified_clean(p);
}
