// UTF-8 validation and encode/decode helpers (RFC 3629), shared by the tokenizer and the corpus.
//
// Valid UTF-8 here is RFC 3629's: no overlong forms, no surrogates (U+D800..U+DFFF), nothing above
// U+10FFFF, no truncated sequences. Offsets and lengths are in bytes.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace ucm::utf8 {

/// Returns the byte offset of the first invalid UTF-8 sequence in `s` (RFC 3629: overlong forms,
/// surrogates, code points above U+10FFFF and truncated sequences are invalid), or std::nullopt
/// when all of `s` is valid. Runs of ASCII are skipped 8 bytes at a time.
std::optional<std::size_t> find_invalid_utf8(std::string_view s) noexcept;

/// Length (1..4) of the valid UTF-8 sequence starting at byte `s[i]`, or 0 when it is invalid
/// (RFC 3629). Requires i < s.size(). When the sequence is invalid and `maximal` is not null,
/// `*maximal` receives the length of its maximal invalid subpart (at least 1; the Unicode
/// Standard §3.9, "U+FFFD Substitution of Maximal Subparts"): the number of bytes that lossy
/// decoding replaces by one U+FFFD.
std::size_t sequence_length(std::string_view s, std::size_t i, std::size_t* maximal = nullptr) noexcept;

/// Code point of the valid UTF-8 sequence of `len` bytes (as given by sequence_length) starting
/// at `s[i]`. The sequence is not checked.
char32_t decode_code_point(std::string_view s, std::size_t i, std::size_t len) noexcept;

/// Appends code point `c` to `out` as UTF-8 (1 to 4 bytes, RFC 3629 §3). `c` must be a Unicode
/// scalar value (at most U+10FFFF, not a surrogate); it is not checked.
void append_code_point(std::string& out, char32_t c);

/// `s` with each maximal invalid subpart replaced by U+FFFD (EF BF BD) and valid sequences copied
/// as they are: the same result as Rust's String::from_utf8_lossy (and `tokenizers`' decoders).
/// The result is valid UTF-8.
std::string decode_lossy(std::string_view s);

}  // namespace ucm::utf8
