// ucm/core/fptable.h: the in-memory lookup table of block fingerprints (store_v1.md §8), also
// the slot array of the persisted table file (formats/store/fptable.md §1).
// Open addressing, linear probing, backward-shift deletion; one u64 per slot (0 = empty; a
// fingerprint of 0 is stored as 1). Capacity: the next power of two >= 2N (load <= 1/2).
// The slots live on the heap or in a private (copy-on-write) mapping of the table file.
// Set semantics: a fingerprint collision between two blocks can only cause a miss (the index
// confirms every hit on load), never wrong bytes. Not thread-safe: the owner locks.
#pragma once
#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace ucm {

class FpTable {
 public:
  explicit FpTable(size_t expected = 0) { reset(expected); }
  ~FpTable() { unmap(); }
  FpTable(FpTable&& o) noexcept { take(o); }
  FpTable& operator=(FpTable&& o) noexcept {
    if (this != &o) {
      unmap();
      take(o);
    }
    return *this;
  }
  FpTable(const FpTable&) = delete;
  FpTable& operator=(const FpTable&) = delete;

  /// A table over `capacity` slots at `slots` inside the mapping [map, map + map_len) (munmap'd
  /// by the table); `count` non-empty slots. The caller has checked capacity (power of two).
  static FpTable Adopt(void* map, size_t map_len, uint64_t* slots, size_t capacity, size_t count) {
    FpTable t(0);
    t.heap_ = {};
    t.map_ = map;
    t.map_len_ = map_len;
    t.slots_ = slots;
    t.cap_ = capacity;
    t.mask_ = capacity - 1;
    t.size_ = count;
    return t;
  }

  void reset(size_t expected) {
    size_t cap = 16;
    while (cap < 2 * expected) cap <<= 1;
    unmap();
    heap_.assign(cap, 0);
    slots_ = heap_.data();
    cap_ = cap;
    mask_ = cap - 1;
    size_ = 0;
  }
  size_t size() const { return size_; }
  size_t capacity() const { return cap_; }
  size_t memory_bytes() const { return cap_ * sizeof(uint64_t); }
  const uint64_t* slots() const { return slots_; }
  bool mapped() const { return map_ != nullptr; }

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
    if (2 * (size_ + 1) > cap_) grow();
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
  void take(FpTable& o) {
    heap_ = std::move(o.heap_);
    map_ = std::exchange(o.map_, nullptr);
    map_len_ = std::exchange(o.map_len_, 0);
    slots_ = map_ ? o.slots_ : heap_.data();
    cap_ = o.cap_;
    mask_ = o.mask_;
    size_ = o.size_;
    o.reset(0);
  }
  void unmap() {
    if (map_) ::munmap(map_, map_len_);
    map_ = nullptr;
    map_len_ = 0;
  }
  void grow() {
    std::vector<uint64_t> next(cap_ * 2, 0);
    const uint64_t* old = slots_;
    const size_t old_cap = cap_;
    std::vector<uint64_t> keep = std::move(heap_);  // old heap slots stay alive until copied
    void* old_map = std::exchange(map_, nullptr);
    const size_t old_len = std::exchange(map_len_, 0);
    heap_ = std::move(next);
    slots_ = heap_.data();
    cap_ = heap_.size();
    mask_ = cap_ - 1;
    size_ = 0;
    for (size_t k = 0; k < old_cap; ++k)
      if (old[k]) insert(old[k]);
    if (old_map) ::munmap(old_map, old_len);
  }
  std::vector<uint64_t> heap_;
  void* map_ = nullptr;  // the table file's mapping, when the slots live there
  size_t map_len_ = 0;
  uint64_t* slots_ = nullptr;
  size_t cap_ = 0;
  size_t mask_ = 0;
  size_t size_ = 0;
};

}  // namespace ucm
