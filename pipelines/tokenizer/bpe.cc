// BPE (tokenizers' Word::merge_all, word cache) and encode_text: normalize, added tokens, pre-tokenize, BPE.
#include <unicode/normalizer2.h>
#include <unicode/unistr.h>

#include <functional>
#include <mutex>
#include <queue>

#include "byte_alphabet.h"
#include "impl.h"

namespace ucm::tok {

using detail::alphabet;
using detail::AddedToken;
using detail::PreStep;
using detail::split_piece;

// BPE of one pre-token (raw UTF-8 bytes; mapped to the byte alphabet here). Mirrors tokenizers'
// Word::merge_all: a min-heap of candidate pairs ordered by (rank, position); stale entries are
// skipped when popped.
void Tokenizer::Impl::bpe_word(std::string_view piece, std::vector<int32_t>& out) const {
  {
    std::shared_lock lk(cache_mu);
    auto it = cache.find(piece);
    if (it != cache.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> ids;
  if (ignore_merges) {
    std::string mapped;
    for (unsigned char c : piece) mapped += alphabet().byte_to_str[c];
    auto it = vocab.find(mapped);
    if (it != vocab.end()) ids.push_back(it->second);
  }
  if (ids.empty()) {
    struct Sym {
      int32_t id;
      int32_t prev, next;
      bool alive;
    };
    std::vector<Sym> syms;
    syms.reserve(piece.size());
    for (unsigned char c : piece) {
      int32_t id = byte_id[c];
      if (id < 0) {
        if (!unk) continue;  // tokenizers drops a symbol that has no id and no unk token
        id = *unk;
      }
      const int32_t n = static_cast<int32_t>(syms.size());
      syms.push_back({id, n - 1, n + 1, true});
    }
    if (!syms.empty()) syms.back().next = -1;
    struct Cand {
      int32_t rank, pos, new_id;
      bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
    };
    const auto key = [](int32_t a, int32_t b) {
      return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
    };
    std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
    for (std::size_t i = 0; i + 1 < syms.size(); ++i) {
      if (const auto* v = merges.find(key(syms[i].id, syms[i + 1].id)))
        heap.push({v->rank, static_cast<int32_t>(i), v->new_id});
    }
    while (!heap.empty()) {
      const Cand top = heap.top();
      heap.pop();
      Sym& left = syms[static_cast<std::size_t>(top.pos)];
      if (!left.alive || left.next < 0) continue;
      Sym& right = syms[static_cast<std::size_t>(left.next)];
      const auto* v = merges.find(key(left.id, right.id));
      if (!v || v->new_id != top.new_id) continue;
      left.id = top.new_id;
      right.alive = false;
      left.next = right.next;
      if (right.next >= 0) syms[static_cast<std::size_t>(right.next)].prev = top.pos;
      if (left.prev >= 0) {
        const Sym& p = syms[static_cast<std::size_t>(left.prev)];
        if (const auto* w = merges.find(key(p.id, left.id))) heap.push({w->rank, left.prev, w->new_id});
      }
      if (left.next >= 0) {
        const Sym& n = syms[static_cast<std::size_t>(left.next)];
        if (const auto* w = merges.find(key(left.id, n.id))) heap.push({w->rank, top.pos, w->new_id});
      }
    }
    for (const Sym& s : syms)
      if (s.alive) ids.push_back(s.id);
  }
  out.insert(out.end(), ids.begin(), ids.end());
  std::unique_lock lk(cache_mu);
  if (cache.size() >= kCacheMax) cache.clear();
  cache.emplace(std::string(piece), std::move(ids));
}

void Tokenizer::Impl::encode_text(std::string_view text, std::vector<int32_t>& out, pcre2_match_data* md) const {
  std::string normalized;
  if (nfc) {
    UErrorCode st = U_ZERO_ERROR;
    const icu::Normalizer2* n2 = icu::Normalizer2::getNFCInstance(st);
    if (U_FAILURE(st)) throw TokenizerError(std::string("ICU NFC normalizer unavailable: ") + u_errorName(st));
    const icu::UnicodeString us = icu::UnicodeString::fromUTF8(icu::StringPiece(text.data(), static_cast<int32_t>(text.size())));
    icu::UnicodeString res = n2->normalize(us, st);
    if (U_FAILURE(st)) throw TokenizerError(std::string("ICU NFC normalization failed: ") + u_errorName(st));
    res.toUTF8String(normalized);
    text = normalized;
  }
  std::vector<std::pair<std::string_view, const AddedToken*>> segs;
  if (!normalized_matcher.empty()) {
    normalized_matcher.split(text, segs);
  } else {
    segs.push_back({text, nullptr});
  }
  std::vector<std::string> pieces, next;
  for (const auto& [seg, tok] : segs) {
    if (tok) {
      out.push_back(tok->id);
      continue;
    }
    pieces.clear();
    pieces.emplace_back(seg);
    for (const PreStep& st : pre_steps) {
      next.clear();
      for (std::string& p : pieces) {
        if (st.add_prefix_space && (p.empty() || p[0] != ' ')) p.insert(p.begin(), ' ');
        if (st.re) {
          split_piece(p, *st.re, st.behavior, md, next);
        } else if (!p.empty()) {
          next.push_back(std::move(p));
        }
      }
      pieces.swap(next);
    }
    for (const std::string& p : pieces) bpe_word(p, out);
  }
}

}  // namespace ucm::tok
