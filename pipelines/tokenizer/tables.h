// Tokenizer tables: the BPE merge map (MergeMap), StringHash, AddedToken and AddedMatcher. Internal.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ucm::tok::detail {

// ---------------------------------------------------------------------------------------------
// Merge table: open addressing, key = (left id << 32) | right id.
// Kept inline: find() is on BPE's inner loop.

class MergeMap {
 public:
  struct Value {
    int32_t rank;
    int32_t new_id;
  };
  void reserve(std::size_t n) {
    std::size_t cap = 16;
    while (cap < n * 2) cap <<= 1;
    keys_.assign(cap, kEmpty);
    vals_.assign(cap, {});
    mask_ = cap - 1;
  }
  void insert(uint64_t key, Value v) {
    std::size_t i = hash(key) & mask_;
    while (keys_[i] != kEmpty && keys_[i] != key) i = (i + 1) & mask_;
    if (keys_[i] == key) return;  // first (lowest rank) occurrence wins, as in tokenizers
    keys_[i] = key;
    vals_[i] = v;
    ++size_;
  }
  const Value* find(uint64_t key) const {
    if (keys_.empty()) return nullptr;
    std::size_t i = hash(key) & mask_;
    while (keys_[i] != kEmpty) {
      if (keys_[i] == key) return &vals_[i];
      i = (i + 1) & mask_;
    }
    return nullptr;
  }
  std::size_t size() const { return size_; }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  static std::size_t hash(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return static_cast<std::size_t>(k);
  }
  std::vector<uint64_t> keys_;
  std::vector<Value> vals_;
  std::size_t mask_ = 0, size_ = 0;
};

// Hash for unordered_maps keyed by std::string that are searched with a std::string_view.
struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};

// One entry of tokenizer.json's added_tokens.
struct AddedToken {
  std::string content;
  int32_t id;
  bool special;
};

// Leftmost-longest matcher over a small set of literal strings (tokenizers uses aho-corasick
// with MatchKind::LeftmostLongest).
class AddedMatcher {
 public:
  // Adds `t` (which must outlive the matcher); an empty content is ignored.
  void add(const AddedToken* t);
  bool empty() const { return toks_.empty(); }
  // Splits s into (text, nullptr) and (match, token) segments.
  void split(std::string_view s, std::vector<std::pair<std::string_view, const AddedToken*>>& out) const;

 private:
  std::array<bool, 256> first_{};
  std::vector<const AddedToken*> toks_;  // longest content first
};

}  // namespace ucm::tok::detail
