// ucm/core/fptable.h: the in-memory lookup table of block fingerprints (store_v1.md §8).
// Open addressing, linear probing, backward-shift deletion; one u64 per slot (0 = empty; a
// fingerprint of 0 is stored as 1). Capacity: the next power of two >= 2N (load <= 1/2).
// Set semantics: a fingerprint collision between two blocks can only cause a miss (the index
// confirms every hit on load), never wrong bytes. Not thread-safe: the owner locks.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace ucm {

class FpTable {
 public:
  explicit FpTable(size_t expected = 0) { reset(expected); }
  void reset(size_t expected) {
    size_t cap = 16;
    while (cap < 2 * expected) cap <<= 1;
    slots_.assign(cap, 0);
    mask_ = cap - 1;
    size_ = 0;
  }
  size_t size() const { return size_; }
  size_t capacity() const { return slots_.size(); }
  size_t memory_bytes() const { return slots_.size() * sizeof(uint64_t); }

  static uint64_t norm(uint64_t fp) { return fp ? fp : 1; }

  bool contains(uint64_t fp) const {
    fp = norm(fp);
    for (size_t i = fp & mask_;; i = (i + 1) & mask_) {
      uint64_t s = slots_[i];
      if (s == fp) return true;
      if (s == 0) return false;
    }
  }
  /// Hints the CPU to fetch the slot of fp (batch lookups).
  void prefetch(uint64_t fp) const { __builtin_prefetch(&slots_[norm(fp) & mask_]); }

  void insert(uint64_t fp) {
    if (2 * (size_ + 1) > slots_.size()) grow();
    fp = norm(fp);
    for (size_t i = fp & mask_;; i = (i + 1) & mask_) {
      if (slots_[i] == fp) return;
      if (slots_[i] == 0) {
        slots_[i] = fp;
        ++size_;
        return;
      }
    }
  }

  void erase(uint64_t fp) {
    fp = norm(fp);
    size_t i = fp & mask_;
    for (;; i = (i + 1) & mask_) {
      if (slots_[i] == 0) return;
      if (slots_[i] == fp) break;
    }
    // Backward-shift deletion keeps probe chains intact without tombstones.
    size_t j = i;
    for (;;) {
      j = (j + 1) & mask_;
      if (slots_[j] == 0) break;
      size_t home = slots_[j] & mask_;
      // Move slots_[j] into the hole i if its home is not in the cyclic range (i, j].
      bool in_range = (i <= j) ? (home > i && home <= j) : (home > i || home <= j);
      if (!in_range) {
        slots_[i] = slots_[j];
        i = j;
      }
    }
    slots_[i] = 0;
    --size_;
  }

 private:
  void grow() {
    std::vector<uint64_t> old;
    old.swap(slots_);
    slots_.assign(old.size() * 2, 0);
    mask_ = slots_.size() - 1;
    size_ = 0;
    for (uint64_t s : old)
      if (s) insert(s);
  }
  std::vector<uint64_t> slots_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

}  // namespace ucm
