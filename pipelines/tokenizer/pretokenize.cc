// split_piece: one pre-tokenizer split with tokenizers' SplitDelimiterBehavior; see pretokenize.h.
#include "pretokenize.h"

#include <algorithm>

namespace ucm::tok::detail {

void split_piece(const std::string& piece, const Regex& re, Behavior behavior, pcre2_match_data* md,
                 std::vector<std::string>& out) {
  std::vector<std::pair<Span, bool>> spans;
  std::size_t prev = 0;
  re.for_each_match(piece, md, [&](std::size_t a, std::size_t b) {
    if (prev != a) spans.push_back({{prev, a}, false});
    spans.push_back({{a, b}, true});
    prev = b;
  });
  if (prev != piece.size()) spans.push_back({{prev, piece.size()}, false});

  std::vector<Span> res;
  switch (behavior) {
    case Behavior::Removed:
      for (auto& [sp, m] : spans)
        if (!m) res.push_back(sp);
      break;
    case Behavior::Isolated:
      for (auto& [sp, m] : spans) res.push_back(sp);
      break;
    case Behavior::MergedWithPrevious: {
      bool prev_match = false;
      for (auto& [sp, m] : spans) {
        if (m && !prev_match && !res.empty()) {
          res.back().second = sp.second;
        } else {
          res.push_back(sp);
        }
        prev_match = m;
      }
      break;
    }
    case Behavior::MergedWithNext: {
      bool prev_match = false;
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->second && !prev_match && !res.empty()) {
          res.back().first = it->first.first;
        } else {
          res.push_back(it->first);
        }
        prev_match = it->second;
      }
      std::reverse(res.begin(), res.end());
      break;
    }
    case Behavior::Contiguous: {
      bool prev_match = false;
      for (auto& [sp, m] : spans) {
        if (m == prev_match && !res.empty()) {
          res.back().second = sp.second;
        } else {
          res.push_back(sp);
        }
        prev_match = m;
      }
      break;
    }
  }
  for (auto& [a, b] : res)
    if (b > a) out.emplace_back(piece, a, b - a);
}

}  // namespace ucm::tok::detail
