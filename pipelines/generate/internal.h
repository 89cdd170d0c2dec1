// pipelines/generate/internal.h: what run_generate, the sparse comparison and the bench share.
#pragma once
#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "llama_model.h"
#include "ucm/namespace.h"
#include "ucm/precompute/precompute.h"
#include "ucm/status.h"
#include "ucm/tok/tokenizer.h"

namespace ucm::generate::detail {

struct Inputs {
  std::unique_ptr<model::LlamaModel> model;
  std::unique_ptr<tok::Tokenizer> tokenizer;
  int64_t eos = -1;  ///< config.json eos_token_id (-1 when absent)
};

/// Loads the model, its tokenizer (default MODEL/tokenizer.json) and its eos token.
/// compute: the runner's GEMM dtype, "auto" | "bf16" | "fp32" (model::choose_compute).
Status load_inputs(const std::string& model_dir, const std::string& tokenizer_file, Inputs* in,
                   const std::string& compute = "fp32");
/// The namespace descriptor JSON precompute registers for `m` with the options of
/// `precompute_config` (defaults when empty): the fingerprint the engine looks up. *po gets them.
Status fingerprint(const model::LlamaModel& m, const std::string& precompute_config, std::string* desc_json,
                   precompute::PrecomputeOptions* po);
torch::ScalarType torch_dtype_of(DType d);
/// Token ids of the prompt with the template applied (as precompute applies it to documents).
/// Throws on an unreadable template or invalid UTF-8.
std::vector<int32_t> prompt_ids(const tok::Tokenizer& t, const std::string& template_file, const std::string& prompt);
/// The prompt text of --prompt, or of --prompt-file when given. InvalidArgument: the file cannot
/// be read, or the result is empty (`what` names the text in the message: "prompt", "question").
Status prompt_text(const std::string& prompt, const std::string& prompt_file, const char* what, std::string* out);

}  // namespace ucm::generate::detail
