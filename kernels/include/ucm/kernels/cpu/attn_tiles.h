// kernels/include/ucm/kernels/cpu/attn_tiles.h: how the CPU attention kernels (fp32.h, bf16.h) tile a
// unit's keys: one rule, each kernel giving its own rows per pass, key block and element sizes; and
// which keys a query row sees (the sliding window).
// Header-only arithmetic (no standard header but <cstdint>): safe to include in a unit compiled
// for any ISA.
#pragma once
#include <cstdint>

namespace ucm::kernels::cpu {

/// Passes of a unit whose scores are kept at once (a pass group): as many as a 4 MiB budget
/// holds of `row_bytes` bytes per score column (fp32 scores: 4; scores and probabilities: 8) for
/// `pass_rows` rows at S keys padded to whole blocks of `key_block`, 1 to 8. A group sweeps the
/// unit's packed keys in chunks that stay in L2 (chunk_keys()), each chunk serving every pass of
/// the group, rather than every pass sweeping all keys (at 8K keys, K and V of a KV head are 2 MiB
/// in bf16 and 4 MiB in fp32: left L2 on every pass; docs/benchmarks.md, 2026-11-29 and
/// 2026-12-02).
inline int64_t group_passes(int64_t S, int64_t pass_rows, int64_t key_block, int64_t row_bytes) {
  const int64_t per_pass = pass_rows * ((S + key_block - 1) / key_block * key_block) * row_bytes;
  const int64_t p = (int64_t(4) << 20) / (per_pass > 0 ? per_pass : 1);
  return p < 1 ? 1 : p > 8 ? 8 : p;
}

/// Keys per chunk of a pass group's sweep: 128 KiB of packed K (and as much V) of `elem_bytes`
/// per element at head_dim hd, whole blocks of `key_block` (at least one).
inline int64_t chunk_keys(int64_t hd, int64_t key_block, int64_t elem_bytes) {
  const int64_t c = (int64_t(128) << 10) / (hd * elem_bytes) / key_block * key_block;
  return c < key_block ? key_block : c;
}

/// The first key a query row at position `qpos` attends (causal attention with a sliding window
/// of `window` positions, 0: none): it sees keys j with first_visible_key(qpos, window) <= j <= qpos
/// (transformers' sliding-window mask: qpos - j < window). Every CPU attention kernel's one rule.
inline int64_t first_visible_key(int64_t qpos, int64_t window) {
  return window > 0 && qpos - window + 1 > 0 ? qpos - window + 1 : 0;
}

}  // namespace ucm::kernels::cpu
