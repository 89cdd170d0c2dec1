// pipelines/generate/generate_internal.h: helpers the entry points share (the setup itself: session.h).
#pragma once
#include <torch/torch.h>

#include <chrono>
#include <string>
#include <vector>

#include "ucm/status.h"
#include "ucm/tok/tokenizer.h"

namespace ucm::generate::detail {

/// Milliseconds of the steady clock since t0.
inline double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

/// The torch dtype of a store dtype name: "bf16" -> kBFloat16, "fp16" -> kHalf, else kFloat.
torch::ScalarType torch_dtype_of(const std::string& dtype);
/// Token ids of the prompt with the template applied (as precompute applies it to documents).
/// Throws on an unreadable template or invalid UTF-8.
std::vector<int32_t> prompt_ids(const tok::Tokenizer& t, const std::string& template_file, const std::string& prompt);
/// The prompt text of --prompt, or of --prompt-file when given. InvalidArgument: the file cannot
/// be read, or the result is empty (`what` names the text in the message: "prompt", "question").
Status prompt_text(const std::string& prompt, const std::string& prompt_file, const char* what, std::string* out);

}  // namespace ucm::generate::detail
