// AddedMatcher: leftmost-longest matching of added tokens (like tokenizers' aho-corasick); see tables.h.
#include "tables.h"

#include <algorithm>

namespace ucm::tok::detail {

void AddedMatcher::add(const AddedToken* t) {
  if (t->content.empty()) return;
  first_[static_cast<unsigned char>(t->content[0])] = true;
  toks_.push_back(t);
  std::stable_sort(toks_.begin(), toks_.end(),
                   [](const AddedToken* a, const AddedToken* b) { return a->content.size() > b->content.size(); });
}

void AddedMatcher::split(std::string_view s, std::vector<std::pair<std::string_view, const AddedToken*>>& out) const {
  std::size_t start = 0, i = 0;
  while (i < s.size()) {
    if (first_[static_cast<unsigned char>(s[i])]) {
      const AddedToken* hit = nullptr;
      for (const AddedToken* t : toks_) {
        if (s.compare(i, t->content.size(), t->content) == 0 && s.size() - i >= t->content.size()) {
          hit = t;
          break;
        }
      }
      if (hit) {
        if (i > start) out.push_back({s.substr(start, i - start), nullptr});
        out.push_back({s.substr(i, hit->content.size()), hit});
        i += hit->content.size();
        start = i;
        continue;
      }
    }
    ++i;
  }
  if (start < s.size()) out.push_back({s.substr(start), nullptr});
}

}  // namespace ucm::tok::detail
