// ucm/audit/audit.h: `ucm inspect STORE --audit`: recompute stored blocks from the token ids their
// records hold (store_v1.md §3.2) with the model and compare every layer's K and V with the stored
// payload. Checksums prove the bytes are the ones written; the audit proves they are the KV of
// the block's tokens, which a server that saved KV it never computed breaks under valid checksums.
// Needs libtorch (ucm-torch). docs/reliability.md, "What the audit catches".
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ucm/status.h"

namespace ucm::audit {

struct AuditOptions {
  std::string store;                 ///< store directory (single or sharded), opened read-only
  std::string model_dir;             ///< the namespace's model (weights digest checked)
  std::string ns;                    ///< namespace name or 32-hex id; "" = the store's only one
  uint64_t sample = 64;              ///< blocks drawn uniformly (a reservoir over the index)
  bool all = false;                  ///< every block instead of a sample
  uint64_t seed = 0;                 ///< sampling seed
  /// Largest deviation an honest block may show, per (layer, K|V) slice [T][H][D]: the largest
  /// over its tokens t of ||stored_t - recomputed_t|| / RMS_t ||recomputed_t||. 0 = default_tolerance.
  double tolerance = 0;
  std::string device = "cpu";        ///< "cpu" | "cuda[:N]"
  /// "fp32" | "bf16" | "auto" (model_load.h). fp32 by default: the recomputation is the reference,
  /// and bf16 compute alone drifts by ~5% of a slice's magnitude over 30 layers (measured).
  std::string compute_dtype = "fp32";
  int threads = 0;                   ///< compute threads (0 = every core)
  bool fix = false;                  ///< remove poisoned blocks with their descendants (ucm gc)
  std::function<void(const std::string&)> progress;  ///< one line at a time, at most once a second
};

/// A block whose stored K/V is not the KV of its tokens.
struct PoisonedBlock {
  std::string block_hex;
  uint64_t chain_position = 0;  ///< 0 = the first block of its chain (its parent is the root)
  uint32_t first_bad_layer = 0;
  std::string first_bad_kv;     ///< "K" or "V"
  double deviation = 0;         ///< the block's largest slice deviation
};

struct AuditReport {
  std::string store, ns_name, ns_hex, dtype, compute_dtype, compute_path;
  uint64_t blocks_in_namespace = 0;
  uint64_t sampled = 0;          ///< blocks drawn
  uint64_t audited = 0;          ///< blocks compared (the drawn ones and the blocks before them in their chains)
  uint64_t chains = 0;           ///< forward passes run
  uint64_t tokens_recomputed = 0;
  uint64_t tokens_unknown = 0;   ///< drawn blocks whose chain has a block without ids (store_v1.md §3.2)
  uint64_t missing = 0;          ///< drawn blocks whose chain lost a block meanwhile (gc)
  uint64_t load_errors = 0;      ///< blocks whose payload did not load (corrupt: `ucm inspect --verify`)
  uint64_t honest = 0, poisoned_total = 0;
  double tolerance = 0;
  double max_honest_deviation = 0;       ///< the largest deviation of a block that passed
  double min_poisoned_deviation = 0;     ///< the smallest of a block that failed (0 when none)
  std::vector<PoisonedBlock> poisoned;   ///< the first 1000
  double seconds = 0;
  bool fixed = false;                    ///< --fix ran gc
  uint64_t fix_blocks_removed = 0, fix_documents_removed = 0;
  std::string fix_message;
  std::string to_json() const;
  std::string to_text() const;
};

/// The default tolerance for a namespace dtype ("bf16", "fp16", "fp32"): docs/reliability.md.
double default_tolerance(const std::string& dtype);

/// Runs the audit. Errors: InvalidArgument (no such store / namespace, several namespaces without
/// --namespace, a model that is not the namespace's: its weights digest or shape differs),
/// NotSupported (device), IOError. Poisoned blocks found (and not fixed) return Corruption with
/// the report filled (exit code 3, as for corrupt blocks).
Status run_audit(const AuditOptions& o, AuditReport* r);

}  // namespace ucm::audit
