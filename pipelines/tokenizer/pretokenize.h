// Pre-tokenizer steps (Split, Digits, ByteLevel) and split_piece, tokenizers' SplitDelimiterBehavior. Internal.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "regex.h"

namespace ucm::tok::detail {

// ---------------------------------------------------------------------------------------------
// Pre-tokenizers

enum class Behavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

// One pre-tokenizer step: Split(regex|string) and Digits are a regex with a behaviour; ByteLevel
// is the GPT-2 regex (Isolated) or, with use_regex=false, no split, plus an optional prefix space.
struct PreStep {
  std::shared_ptr<const Regex> re;  // null: no split
  Behavior behavior = Behavior::Isolated;
  bool add_prefix_space = false;  // ByteLevel only
};

using Span = std::pair<std::size_t, std::size_t>;

// Splits `piece` by `re` with tokenizers' SplitDelimiterBehavior semantics; appends non-empty
// results to `out`.
void split_piece(const std::string& piece, const Regex& re, Behavior behavior, pcre2_match_data* md,
                 std::vector<std::string>& out);

}  // namespace ucm::tok::detail
