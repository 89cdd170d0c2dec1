// ucm/format/layout.h: the store directory layout (§1) and its creation (§1.1).
// The contract is formats/store/store_v1.md; section numbers refer to it. Pure format code:
// no RocksDB, no threads; thread-safe unless noted.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include "ucm/format/superblock.h"

namespace ucm::fmt {

// Store directory layout (§1)
std::string superblock_path(const std::string& store);  ///< STORE/UCMSTORE
std::string lock_path(const std::string& store);        ///< STORE/LOCK
std::string index_dir(const std::string& store);        ///< STORE/index
std::string data_dir(const std::string& store);         ///< STORE/data
std::string access_dir(const std::string& store);       ///< STORE/access
std::string readers_dir(const std::string& store);      ///< STORE/readers
std::string tmp_dir(const std::string& store);          ///< STORE/tmp
/// STORE/data/NNNNNNNN.ucmd (8 decimal digits).
std::string data_file_path(const std::string& store, uint32_t file_id);
/// Parses "NNNNNNNN.ucmd" (a bare file name); false for anything else.
bool parse_data_file_name(std::string_view name, uint32_t* file_id);
/// Host name of this machine ("unknown" if gethostname fails).
std::string host_name();
/// fsync of a directory (after creating / renaming / unlinking an entry in it).
Status fsync_dir(const std::string& dir);
/// mkdir -p. IOError names the path.
Status make_dirs(const std::string& dir);

/// Creates a new empty store skeleton in `store` (missing or empty dir): directories of §1 and
/// the superblock. Does not create the index (the caller opens RocksDB with create_if_missing
/// and writes the meta keys). Not crash-atomic by itself: libucm runs it on the sibling
/// creating_dir() and renames the finished store into place (§1.1). InvalidArgument when `store` exists and is a non-empty directory
/// without a superblock, or is not a directory.
Status create_store_skeleton(const std::string& store, Superblock* sb_out);

/// What a path holds, as seen by open and create (§1.1).
enum class StoreDirState {
  kMissing,      ///< nothing there
  kEmpty,        ///< an empty directory
  kSkeleton,     ///< no superblock and nothing of value: only skeleton entries of §1 left by a
                 ///< killed creation (empty data/ access/ readers/, tmp/ with at most
                 ///< UCMSTORE.tmp, index/ with RocksDB files only, LOCK); safe to create into
  kHalfCreated,  ///< superblock, but no index/CURRENT and no data file: creation was killed
                 ///< before the index existed; a writer finishes creating it
  kStore,        ///< superblock and an index (or data files to rebuild one from)
  kNotAStore,    ///< anything else: a non-empty directory without superblock, or not a directory
};
/// Classifies `store` (never modifies it). IOError when it cannot be listed.
Status classify_store_dir(const std::string& store, StoreDirState* state);
/// Removes the entries of a kSkeleton directory, leaving it empty. InvalidArgument when the
/// directory is not (or no longer) a skeleton.
Status clear_store_skeleton(const std::string& store);
/// The sibling where a store is built before it is renamed into place (§1.1):
/// "<parent>/.<name>.creating-<pid>".
std::string creating_dir(const std::string& store, long pid);
/// Removes leftover "<parent>/.<name>.creating-<pid>" siblings of `store` whose creator is gone
/// (the pid does not exist on this host and the directory's LOCK is not flock-ed). Best effort;
/// returns how many it removed.
int remove_dead_creating_dirs(const std::string& store);

}  // namespace ucm::fmt
