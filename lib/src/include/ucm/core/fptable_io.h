// ucm/core/fptable_io.h: the lookup table (ucm/core/fptable.h) and its persisted file
// STORE/fptable (formats/store/fptable.md): rebuild from the index, journal replay, load (map +
// check), save (tmp + rename), and the open procedure of fptable.md §4. Internal to libucm and
// the admin commands.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include "ucm/core/fptable.h"
#include "ucm/core/index.h"
#include "ucm/status.h"

namespace ucm {

/// Rebuilds `t` by a scan of the `blocks` family (O(N)); *seq = the journal sequence it reflects.
Status fptable_scan(const Index& ix, FpTable* t, uint64_t* seq);
/// Options of fptable_replay.
struct FpReplayHooks {
  /// Stop with NotSupported ("full: ...") before an addition would grow the table (a table
  /// mapped from a file must stay where it is).
  bool no_grow = false;
  /// Called after each entry applied, with the count applied so far by this call.
  std::function<void(uint64_t)> after_entry;
};
/// Replays the journal entries after *seq into `t`, advancing *seq; *replayed counts them.
/// Corruption ("stale: ...") when the journal has a gap after *seq (entries trimmed by gc).
Status fptable_replay(const Index& ix, FpTable* t, uint64_t* seq, uint64_t* replayed,
                      const FpReplayHooks& hooks = {});
/// Maps STORE/fptable (private, copy on write) and checks it (fptable.md §4 step 1) against the
/// index's identity and journal sequence. NotFound when missing; Corruption / Version with the
/// reason ("corrupt: ...", "stale: ...", "version N unknown") otherwise.
Status fptable_load(const std::string& store, const std::string& identity, uint64_t index_seq, FpTable* t,
                    uint64_t* seq);
/// The journal sequence of STORE/fptable from its header alone (no slots read): OK only when
/// the header is sound and the file belongs to the index `identity`.
Status fptable_file_seq(const std::string& store, const std::string& identity, uint64_t* seq);
/// Writes STORE/fptable whole: STORE/tmp/fptable.<unique>, fdatasync, rename, fsync of STORE.
Status fptable_save(const std::string& store, const uint64_t* slots, size_t capacity, size_t count, uint64_t seq,
                    const std::string& identity);

/// Brings STORE/fptable up to the index's journal sequence in memory bounded by a few MiB,
/// whatever the table's size (fptable.md §3, "gc"): copies the file to STORE/tmp/ (in the page
/// cache, not this process), checks it as fptable_load does, maps the copy shared and replays the
/// journal entries after its journal_seq into it, dropping the touched pages from this process
/// every 256 entries, checksums the slots with sequential reads and renames the copy over
/// STORE/fptable. For a primary index (the caller holds the writer lock), typically gc after
/// removing many blocks: the next open then maps the table and replays nothing. *replayed: the
/// entries replayed. NotFound / Corruption with the reason (missing, corrupt, stale) when the
/// table cannot be brought up to date, or when the entries would grow the table past half
/// its slots (NotSupported, "full: ..."). On any error nothing is replaced: the next open replays or rebuilds as before.
Status fptable_update_file(const std::string& store, Index& ix, uint64_t* replayed);

/// What fptable_open did.
struct FpTableOpenInfo {
  bool loaded = false;      ///< the file was used (then replayed)
  std::string reason;       ///< when rebuilt: why the file was rejected
  uint64_t replayed = 0;    ///< journal entries replayed into the loaded table
  bool should_save = false; ///< the caller should write the file anew (rebuilt, or replayed >= kFpTableSaveEntries)
  double seconds = 0;       ///< time taken, all of it
};
/// fptable.md §4: load the file and replay the journal after it, or rebuild by a scan (with a
/// message on the "ucm" logger); info->should_save when `may_save` and the file should be
/// written anew (off the open's path: the caller saves a copy later). A secondary index is
/// caught up once more when the file is ahead of it. *seq = the journal sequence `t` reflects.
Status fptable_open(const std::string& store, Index& ix, bool may_save, FpTable* t, uint64_t* seq,
                    FpTableOpenInfo* info);
/// The writer's bookkeeping (fptable.md §3): save when this many journal entries are behind...
inline constexpr uint64_t kFpTableSaveEntries = 100000;
/// ...or when any is and this many milliseconds passed since the last save.
inline constexpr uint64_t kFpTableSaveMs = 60000;

}  // namespace ucm
