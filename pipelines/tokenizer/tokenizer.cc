// Tokenizer's public methods other than loading: encode, decode, the id/token lookups, find_invalid_utf8.
#include <sstream>

#include "byte_alphabet.h"
#include "impl.h"
#include "ucm/utf8/utf8.h"

namespace ucm::tok {

using detail::AddedToken;
using detail::alphabet;
using detail::MatchData;

std::optional<std::size_t> find_invalid_utf8(std::string_view s) noexcept {
  // One validator for the whole pipeline: ucm_utf8's (RFC 3629, ASCII fast path).
  return ucm::utf8::find_invalid_utf8(s);
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

std::vector<int32_t> Tokenizer::encode(std::string_view utf8, bool add_special_tokens) const {
  if (auto bad = ucm::utf8::find_invalid_utf8(utf8)) {
    std::ostringstream ss;
    ss << "input is not valid UTF-8: bad byte 0x" << std::hex << static_cast<int>(static_cast<unsigned char>(utf8[*bad]))
       << std::dec << " at byte offset " << *bad << " (decode or clean the text before tokenizing)";
    throw InvalidUtf8Error(*bad, ss.str());
  }
  std::vector<int32_t> out;
  out.reserve(utf8.size() / 3 + 8);
  if (add_special_tokens) out.insert(out.end(), impl_->template_prefix.begin(), impl_->template_prefix.end());
  MatchData md;
  std::vector<std::pair<std::string_view, const AddedToken*>> segs;
  impl_->raw_matcher.split(utf8, segs);
  for (const auto& [seg, tok] : segs) {
    if (tok) {
      out.push_back(tok->id);
    } else {
      impl_->encode_text(seg, out, md.md);
    }
  }
  if (add_special_tokens) out.insert(out.end(), impl_->template_suffix.begin(), impl_->template_suffix.end());
  return out;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  const auto& abc = alphabet();
  std::string bytes;
  for (int32_t id : ids) {
    if (id < 0 || static_cast<std::size_t>(id) >= impl_->id_to_tok.size())
      throw TokenizerError("decode: token id " + std::to_string(id) + " is outside [0, " +
                           std::to_string(impl_->id_to_tok.size()) + ")");
    if (skip_special_tokens && impl_->id_is_special[static_cast<std::size_t>(id)]) continue;
    const std::string& t = impl_->id_to_tok[static_cast<std::size_t>(id)];
    // ByteLevel decoder: every char maps back to a byte, else the token's own UTF-8 is used.
    std::string tb;
    bool ok = true;
    for (std::size_t i = 0; i < t.size();) {
      const std::size_t n = ucm::utf8::sequence_length(t, i);
      if (!n) {
        ok = false;
        break;
      }
      auto it = abc.char_to_byte.find(ucm::utf8::decode_code_point(t, i, n));
      if (it == abc.char_to_byte.end()) {
        ok = false;
        break;
      }
      tb.push_back(static_cast<char>(it->second));
      i += n;
    }
    bytes += ok ? tb : t;
  }
  return ucm::utf8::decode_lossy(bytes);
}

int32_t Tokenizer::token_id(std::string_view token) const {
  if (auto it = impl_->added_by_content.find(token); it != impl_->added_by_content.end()) return it->second;
  if (auto it = impl_->vocab.find(token); it != impl_->vocab.end()) return it->second;
  return -1;
}

const std::string& Tokenizer::id_to_token(int32_t id) const {
  if (id < 0 || static_cast<std::size_t>(id) >= impl_->id_to_tok.size())
    throw TokenizerError("token id " + std::to_string(id) + " is outside [0, " + std::to_string(impl_->id_to_tok.size()) + ")");
  return impl_->id_to_tok[static_cast<std::size_t>(id)];
}

std::size_t Tokenizer::vocab_size() const { return impl_->id_to_tok.size(); }
std::optional<int32_t> Tokenizer::bos_id() const { return impl_->bos; }
std::optional<int32_t> Tokenizer::eos_id() const { return impl_->eos; }
std::size_t Tokenizer::merges_size() const { return impl_->merges.size(); }

}  // namespace ucm::tok
