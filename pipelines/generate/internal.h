// pipelines/generate/internal.h: what run_generate, the sparse comparison and the bench share.
#pragma once
#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "fingerprint.h"
#include "llama_model.h"
#include "ucm/status.h"
#include "ucm/tok/tokenizer.h"

namespace ucm::generate::detail {

struct Inputs {
  std::unique_ptr<model::LlamaModel> model;
  std::unique_ptr<tok::Tokenizer> tokenizer;
  int64_t eos = -1;  ///< config.json eos_token_id (-1 when absent)
};

/// Loads the model (model::load_model, on the CPU), its tokenizer (default MODEL/tokenizer.json)
/// and its eos token. compute: the runner's GEMM dtype, "auto" | "bf16" | "fp32".
Status load_inputs(const std::string& model_dir, const std::string& tokenizer_file, Inputs* in,
                   const std::string& compute = "fp32");
/// The namespace descriptor JSON precompute registers for `m` with the fingerprint options of
/// `precompute_config` (precompute's defaults when empty): the one the engine looks up. *fp gets
/// the options (model::read_fingerprint_config, model::namespace_desc_json).
Status fingerprint(const model::LlamaModel& m, const std::string& precompute_config, std::string* desc_json,
                   model::FingerprintOptions* fp);
/// The torch dtype of a store dtype name: "bf16" -> kBFloat16, "fp16" -> kHalf, else kFloat.
torch::ScalarType torch_dtype_of(const std::string& dtype);
/// Token ids of the prompt with the template applied (as precompute applies it to documents).
/// Throws on an unreadable template or invalid UTF-8.
std::vector<int32_t> prompt_ids(const tok::Tokenizer& t, const std::string& template_file, const std::string& prompt);
/// The prompt text of --prompt, or of --prompt-file when given. InvalidArgument: the file cannot
/// be read, or the result is empty (`what` names the text in the message: "prompt", "question").
Status prompt_text(const std::string& prompt, const std::string& prompt_file, const char* what, std::string* out);

}  // namespace ucm::generate::detail
