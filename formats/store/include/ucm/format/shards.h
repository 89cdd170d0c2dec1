// ucm/format/shards.h: sharded stores (§11): the root's layout, shard names, the root
// superblock (format version 3) and the root's creation.
// The contract is formats/store/store_v1.md; section numbers refer to it. Pure format code:
// no RocksDB, no threads; thread-safe unless noted.
#pragma once
#include <string>
#include <vector>

#include "ucm/format/superblock.h"

namespace ucm::fmt {

inline constexpr uint32_t kShardedFormatVersion = 3;  ///< a sharded root's format_version (§11)

std::string shards_dir(const std::string& store);                            ///< STORE/shards
std::string shard_path(const std::string& store, const std::string& name);   ///< STORE/shards/NAME
std::string gc_dir(const std::string& store);                                ///< STORE/gc
std::string gc_lock_path(const std::string& store);                          ///< STORE/gc/LOCK
std::string gc_lease_path(const std::string& store);                         ///< STORE/gc/LEASE

/// OK when `name` is 1-64 bytes of [A-Za-z0-9._-] not starting with '.'; InvalidArgument
/// naming the rule otherwise.
Status check_shard_name(const std::string& name);
/// `name` made into a valid shard name: bytes outside [A-Za-z0-9._-] become '-', a leading '.'
/// becomes '_', cut to 64 bytes; "shard" when empty. For host names.
std::string sanitize_shard_name(const std::string& name);

/// What STORE is, for the open and admin paths.
enum class RootKind {
  kSingle,    ///< a version-1/2 store (§1-§10)
  kSharded,   ///< a sharded root (§11)
};
/// Reads STORE's superblock and says which kind of store it is. Errors as read_superblock
/// (InvalidArgument: missing / not a store; Corruption; Version when format_version > 3), plus
/// InvalidArgument naming `ucm migrate STORE --to-sharded` for an interrupted upgrade (§11.4):
/// a version-2 superblock beside a shards/ directory, or shards/ without any superblock.
Status root_kind(const std::string& store, RootKind* kind, Superblock* sb = nullptr);
/// True when `s` is root_kind's refusal of an interrupted upgrade (every open and command refuses
/// that state with this error; only the upgrade itself goes on).
bool interrupted_upgrade(const Status& s);

/// The registered shards of a sharded root (§11: shards/<name>/UCMSTORE exists), sorted by
/// name. IOError when shards/ cannot be listed (the file system went away).
Status list_shards(const std::string& store, std::vector<std::string>* names);

/// Creates a sharded root at `store` (missing or empty directory), crash-atomically as §1.1:
/// built in the sibling creating_dir() (UCMSTORE format 3, shards/, gc/, tmp/) and renamed into
/// place; in place (superblock last) on a mount point. *created = false when a sharded root was
/// already there (or another process created it meanwhile). InvalidArgument when `store` is a
/// single store (upgrade it with `ucm migrate --to-sharded`) or a non-empty non-store.
Status create_sharded_root(const std::string& store, bool* created);

}  // namespace ucm::fmt
