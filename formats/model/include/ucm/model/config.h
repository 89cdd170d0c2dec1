// ucm/model/config.h: a Hugging Face model directory's config.json as ucm reads it: the
// families the model runner supports (docs/model.md), their geometry and RoPE. One reader for
// libucm (a model's namespace fingerprint, ucm/model/identity.h) and the model runner
// (pipelines/model). No libtorch.
#pragma once
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>

namespace ucm::model {

/// Bad/missing config field, missing or mis-shaped tensor, unsupported architecture,
/// bad forward() arguments. what() names the field/tensor and the model directory.
class ModelError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct RopeScaling {
  enum class Type { None, Linear, Llama3 };
  Type type = Type::None;
  double factor = 1.0;
  // llama3 only:
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};

struct ModelConfig {
  std::string model_type;  // "llama" | "mistral" | "qwen2" | "qwen3"
  int64_t hidden_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;  // config "head_dim", else hidden_size / num_attention_heads
  int64_t intermediate_size = 0;
  int64_t vocab_size = 0;
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  bool attention_bias = false;       // q/k/v bias (always true for qwen2)
  bool qk_norm = false;              // per-head RMSNorm of q and k before RoPE (qwen3)
  std::optional<int64_t> sliding_window;  // mistral only; nullopt = full causal
  std::string torch_dtype = "float32";    // as stored; the compute dtype is load()'s `compute`

  /// Parses a Hugging Face config.json. Throws ModelError naming the file and the
  /// field for a missing/invalid field, unsupported model_type, hidden_act other than
  /// silu, or unsupported rope_scaling (e.g. "dynamic", "yarn").
  static ModelConfig from_json_file(const std::string& path);
  /// The attention geometry alone (hidden_size, num_hidden_layers, num_attention_heads,
  /// num_key_value_heads, head_dim; model_type when present), of any decoder family, supported by
  /// the model runner or not: what a namespace fingerprint needs (ucm/model/identity.h). Throws
  /// ModelError naming the file and the field.
  static ModelConfig geometry_from_json_file(const std::string& path);
};

}  // namespace ucm::model
