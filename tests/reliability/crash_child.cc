// ucm_crash_child: the helper process of the reliability tests (tests/reliability/).
// The tests fork + exec it (never fork alone: the gtest process has threads) and SIGKILL it at
// random moments, or run several at once. It reports on stdout, one line per event, each line
// written with a single write(2) so a kill never leaves half a line:
//
//   ucm_crash_child dump STORE BASE COUNT BATCH
//       Opens STORE read-write (creating it), registers the "keep" and "victim" namespaces,
//       prints "ready", then dumps generator blocks BASE..BASE+COUNT-1 of both namespaces in
//       batches of BATCH (one dump task per namespace per batch, run concurrently). After the
//       keep task's wait() returns OK it prints "ack FIRST LAST" (inclusive indices).
//   ucm_crash_child gc STORE VERIFY
//       Prints "ready", then gc: evicts every "victim" block (max_age 1 ms, namespace rel-victim),
//       compacts files more than 5% dead, grace 0, full verify pass when VERIFY is 1.
//   ucm_crash_child migrate SRC DST
//       Prints "ready", then migrate SRC -> DST (all namespaces, same dtype).
//   ucm_crash_child fill STORE
//       Opens STORE read-write (creating it) and dumps batches of 16 keep blocks from index 0 until
//       a dump fails, printing "ack FIRST LAST" after each successful wait() and then
//       "full CODE STATUS" with the failing dump's status and "block CODE" for each block
//       status; then tries one more single-block dump and prints "again CODE STATUS".
//   ucm_crash_child writer STORE DURATION_MS BASE BATCH INTERVAL_MS PHASE_MS MAX_BYTES GRACE_MS
//       For DURATION_MS: open read-write, dump batches of BATCH new keep blocks every INTERVAL_MS
//       for PHASE_MS, printing "commit FIRST LAST T_MS" after each wait() OK (T = commit time,
//       ms since the epoch); close; gc --max-bytes MAX_BYTES --grace GRACE_MS, printing
//       "gc EVICTED DELETED"; repeat. Ends with "end NEXT_INDEX".
//   ucm_crash_child reader STORE DURATION_MS MAX_INDEX SEED
//       Opens STORE read-only and, for DURATION_MS, looks up keep blocks 0..MAX_INDEX-1, prints
//       "seen I T_MS" the first time block I is present, loads up to 8 random present blocks
//       (sometimes a KV-head range) and checks their bytes against the generator. Prints
//       "wrong I" for bytes that differ, "err I CODE MESSAGE" for a status other than OK or
//       NotFound, and at the end "stats ITERATIONS LOADS OK NOTFOUND".
//
// Exit status: 0 on success, 1 on an error (the line before says which), 2 on bad usage.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "rel_common.h"
#include "ucm/admin.h"
#include "ucm/store.h"

namespace {

void say(const std::string& line) {
  std::string l = line + "\n";
  size_t off = 0;
  while (off < l.size()) {
    ssize_t k = write(1, l.data() + off, l.size() - off);
    if (k <= 0) return;
    off += static_cast<size_t>(k);
  }
}

int fail(const std::string& what, const ucm::Status& s) {
  say("err -1 " + std::to_string(static_cast<int>(s.code())) + " " + what + ": " + s.ToString());
  return 1;
}

uint64_t num(const char* s) { return std::strtoull(s, nullptr, 10); }

struct Writer {
  std::unique_ptr<ucm::Store> store;
  ucm::NamespaceId keep{}, victim{};
};

ucm::Status open_writer(const std::string& path, Writer* w) {
  ucm::Status s = rel::open_rw(path, &w->store);
  if (!s.ok()) return s;
  s = w->store->register_namespace(rel::test_desc("keep"), &w->keep);
  if (!s.ok()) return s;
  return w->store->register_namespace(rel::test_desc("victim"), &w->victim);
}

using rel::Batch;
using rel::start_batch;

int mode_dump(int argc, char** argv) {
  if (argc != 6) return 2;
  const std::string path = argv[2];
  const uint64_t base = num(argv[3]), count = num(argv[4]), batch = std::max<uint64_t>(1, num(argv[5]));
  Writer w;
  ucm::Status s = open_writer(path, &w);
  if (!s.ok()) return fail("open", s);
  say("ready");
  for (uint64_t first = base; first < base + count; first += batch) {
    const uint64_t n = std::min(batch, base + count - first);
    Batch keep, victim;
    start_batch(w.store.get(), w.keep, first, n, &keep);
    start_batch(w.store.get(), w.victim, first, n, &victim);
    ucm::Status sk = keep.task->wait();
    ucm::Status sv = victim.task->wait();
    if (!sk.ok()) return fail("dump keep", sk);
    say("ack " + std::to_string(first) + " " + std::to_string(first + n - 1));
    if (!sv.ok()) return fail("dump victim", sv);
  }
  say("done");
  return 0;
}

int mode_gc(int argc, char** argv) {
  if (argc != 4) return 2;
  ucm::admin::GcOptions o;
  o.ns = "rel-victim";
  o.max_age_ms = 1;
  o.grace_ms = 0;
  o.compact_dead_ratio = 0.05;
  o.verify = num(argv[3]) != 0;
  ucm::admin::GcReport r;
  say("ready");
  ucm::Status s = ucm::admin::gc(argv[2], o, &r);
  if (!s.ok()) return fail("gc", s);
  say("done evicted=" + std::to_string(r.evicted_blocks) + " compacted=" +
      std::to_string(r.files_compacted) + " deleted=" + std::to_string(r.files_deleted) +
      " reclaimed=" + std::to_string(r.bytes_reclaimed));
  return 0;
}

int mode_migrate(int argc, char** argv) {
  if (argc != 4) return 2;
  ucm::admin::MigrateOptions o;
  ucm::admin::MigrateReport r;
  say("ready");
  ucm::Status s = ucm::admin::migrate(argv[2], argv[3], o, &r);
  if (!s.ok()) return fail("migrate", s);
  say("done copied=" + std::to_string(r.blocks_copied) + " skipped=" + std::to_string(r.blocks_skipped));
  return 0;
}

int mode_fill(int argc, char** argv) {
  if (argc != 3) return 2;
  Writer w;
  ucm::Status s = open_writer(argv[2], &w);
  if (!s.ok()) return fail("open", s);
  say("ready");
  for (uint64_t first = 0; first < 10000000; first += 16) {
    Batch b;
    start_batch(w.store.get(), w.keep, first, 16, &b);
    s = b.task->wait();
    if (!s.ok()) {
      say("full " + std::to_string(static_cast<int>(s.code())) + " " + s.ToString());
      for (const auto& bs : b.task->block_status()) say("block " + std::to_string(static_cast<int>(bs.code())));
      Batch one;
      start_batch(w.store.get(), w.keep, 9999999, 1, &one);
      ucm::Status a = one.task->wait();
      say("again " + std::to_string(static_cast<int>(a.code())) + " " + a.ToString());
      return 0;
    }
    say("ack " + std::to_string(first) + " " + std::to_string(first + 15));
  }
  return fail("fill", ucm::Status::Internal("never ran out of space"));
}

int mode_writer(int argc, char** argv) {
  if (argc != 10) return 2;
  const std::string path = argv[2];
  const uint64_t duration = num(argv[3]);
  uint64_t next = num(argv[4]);
  const uint64_t batch = std::max<uint64_t>(1, num(argv[5]));
  const uint64_t interval = num(argv[6]), phase = num(argv[7]), max_bytes = num(argv[8]),
                 grace = num(argv[9]);
  const uint64_t t_end = rel::now_ms() + duration;
  while (rel::now_ms() < t_end) {
    {
      Writer w;
      ucm::Status s = open_writer(path, &w);
      if (!s.ok()) return fail("open", s);
      const uint64_t phase_end = std::min(t_end, rel::now_ms() + phase);
      while (rel::now_ms() < phase_end) {
        Batch b;
        start_batch(w.store.get(), w.keep, next, batch, &b);
        s = b.task->wait();
        if (!s.ok()) return fail("dump", s);
        say("commit " + std::to_string(next) + " " + std::to_string(next + batch - 1) + " " +
            std::to_string(rel::now_ms()));
        next += batch;
        std::this_thread::sleep_for(std::chrono::milliseconds(interval));
      }
    }
    ucm::admin::GcOptions o;
    o.max_bytes = max_bytes;
    o.grace_ms = grace;
    o.compact_dead_ratio = 0.3;
    ucm::admin::GcReport r;
    ucm::Status s = ucm::admin::gc(path, o, &r);
    if (!s.ok()) return fail("gc", s);
    say("gc " + std::to_string(r.evicted_blocks) + " " + std::to_string(r.files_deleted));
  }
  say("end " + std::to_string(next));
  return 0;
}

int mode_reader(int argc, char** argv) {
  if (argc != 6) return 2;
  const std::string path = argv[2];
  const uint64_t duration = num(argv[3]), max_index = num(argv[4]);
  std::mt19937_64 rng(num(argv[5]));
  ucm::OpenOptions o;
  o.mode = ucm::OpenOptions::Mode::kReadOnly;
  o.io_threads = 2;
  std::unique_ptr<ucm::Store> st;
  ucm::Status s = ucm::Store::Open(path, o, &st);
  if (!s.ok()) return fail("open", s);
  ucm::NamespaceId ns = rel::test_desc("keep").id();
  std::vector<ucm::BlockHash> hashes(max_index);
  for (uint64_t i = 0; i < max_index; ++i) hashes[i] = rel::block_hash(ns, i);
  std::vector<uint8_t> present(max_index), seen(max_index);
  uint64_t iters = 0, loads = 0, ok = 0, notfound = 0;
  const uint64_t t_end = rel::now_ms() + duration;
  std::vector<uint8_t> sentinel(rel::kPayload, 0xA5);
  while (rel::now_ms() < t_end) {
    ++iters;
    size_t prefix = 0;
    s = st->lookup(ns, hashes.data(), hashes.size(), present.data(), &prefix);
    if (!s.ok()) return fail("lookup", s);
    const uint64_t t = rel::now_ms();
    std::vector<uint64_t> avail;
    for (uint64_t i = 0; i < max_index; ++i) {
      if (!present[i]) continue;
      avail.push_back(i);
      if (!seen[i]) {
        seen[i] = 1;
        say("seen " + std::to_string(i) + " " + std::to_string(t));
      }
    }
    if (avail.empty()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      continue;
    }
    const size_t n = std::min<size_t>(8, avail.size());
    std::vector<ucm::BlockHash> pick(n);
    std::vector<uint64_t> idx(n);
    for (size_t k = 0; k < n; ++k) {
      idx[k] = avail[rng() % avail.size()];
      pick[k] = hashes[idx[k]];
    }
    const bool part = (iters % 4) == 0;  // every 4th load: KV heads [1, 2)
    std::vector<std::vector<uint8_t>> bufs(n, sentinel);
    ucm::LoadDest d;
    d.kind = ucm::LoadDest::Kind::kContiguous;
    if (part) d.heads = {1, 2};
    for (auto& b : bufs) d.ptrs.push_back(b.data());
    auto task = st->load(ns, pick.data(), n, d);
    (void)task->wait();  // per-block results below
    const auto& bs = task->block_status();
    for (size_t k = 0; k < n; ++k) {
      ++loads;
      const ucm::Status& b = k < bs.size() ? bs[k] : ucm::Status::Internal("no block status");
      if (b.ok()) {
        ++ok;
        bool good;
        if (part) {
          std::vector<uint8_t> want = rel::payload_heads(pick[k], 1, 2);
          good = std::memcmp(want.data(), bufs[k].data(), want.size()) == 0;
        } else {
          good = rel::check_payload(pick[k], bufs[k].data());
        }
        if (!good) say("wrong " + std::to_string(idx[k]));
      } else if (b.code() == ucm::Code::kNotFound) {
        ++notfound;
        if (bufs[k] != sentinel) say("wrong " + std::to_string(idx[k]) + " (miss wrote the destination)");
      } else {
        say("err " + std::to_string(idx[k]) + " " + std::to_string(static_cast<int>(b.code())) + " " +
            b.ToString());
      }
    }
  }
  say("stats " + std::to_string(iters) + " " + std::to_string(loads) + " " + std::to_string(ok) + " " +
      std::to_string(notfound));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: ucm_crash_child dump|gc|migrate|writer|reader ARGS (see source)\n");
    return 2;
  }
  const std::string m = argv[1];
  int rc = 2;
  if (m == "dump") rc = mode_dump(argc, argv);
  else if (m == "gc") rc = mode_gc(argc, argv);
  else if (m == "migrate") rc = mode_migrate(argc, argv);
  else if (m == "fill") rc = mode_fill(argc, argv);
  else if (m == "writer") rc = mode_writer(argc, argv);
  else if (m == "reader") rc = mode_reader(argc, argv);
  if (rc == 2) std::fprintf(stderr, "ucm_crash_child: bad usage of mode '%s'\n", m.c_str());
  return rc;
}
