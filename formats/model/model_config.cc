// formats/model/model_config.cc: config.json of a Hugging Face model directory (ucm/model/config.h).
#include "ucm/model/config.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <string_view>
#include <utility>

namespace ucm::model {
namespace {

using nlohmann::json;

[[noreturn]] void cfg_fail(const std::string& path, const std::string& what) {
  throw ModelError("model config " + path + ": " + what);
}

// Required positive integer field.
int64_t req_int(const json& j, const std::string& key, const std::string& path) {
  if (!j.contains(key) || j[key].is_null()) cfg_fail(path, "missing field \"" + key + "\"");
  if (!j[key].is_number_integer() || j[key].get<int64_t>() <= 0)
    cfg_fail(path, "field \"" + key + "\" must be a positive integer, got " + j[key].dump());
  return j[key].get<int64_t>();
}

int64_t opt_int(const json& j, const std::string& key, int64_t def, const std::string& path) {
  if (!j.contains(key) || j[key].is_null()) return def;
  return req_int(j, key, path);
}

double opt_num(const json& j, const std::string& key, double def, const std::string& path) {
  if (!j.contains(key) || j[key].is_null()) return def;
  if (!j[key].is_number()) cfg_fail(path, "field \"" + key + "\" must be a number, got " + j[key].dump());
  return j[key].get<double>();
}

bool opt_bool(const json& j, const std::string& key, bool def, const std::string& path) {
  if (!j.contains(key) || j[key].is_null()) return def;
  if (!j[key].is_boolean()) cfg_fail(path, "field \"" + key + "\" must be true/false, got " + j[key].dump());
  return j[key].get<bool>();
}

// model_type -> the transformers class of that family's causal LM (docs/model.md, "Supported
// families"). A config must name one of these model_types, and its "architectures" (when present)
// the class of that model_type: a Qwen2ForSequenceClassification or a LlamaForCausalLM labelled
// qwen2 is refused before any weight is read.
constexpr std::pair<std::string_view, std::string_view> kFamilies[] = {
    {"llama", "LlamaForCausalLM"},
    {"mistral", "MistralForCausalLM"},
    {"qwen2", "Qwen2ForCausalLM"},
    {"qwen3", "Qwen3ForCausalLM"},
};

void check_architecture(const json& j, const std::string& model_type, const std::string& path) {
  std::string supported;
  std::string_view arch;
  for (const auto& [t, a] : kFamilies) {
    supported += (supported.empty() ? "" : ", ") + std::string(t);
    if (t == model_type) arch = a;
  }
  if (arch.empty())
    cfg_fail(path, "unsupported model_type \"" + model_type + "\" (field \"model_type\"; supported: " + supported +
                       "; docs/model.md says how to add a family)");
  if (!j.contains("architectures") || j["architectures"].is_null()) return;
  const auto& a = j["architectures"];
  if (!a.is_array() || a.size() != 1 || !a[0].is_string() || a[0].get<std::string>() != arch)
    cfg_fail(path, "field \"architectures\" is " + a.dump() + ", but model_type \"" + model_type +
                       "\" is supported only as [\"" + std::string(arch) + "\"] (a causal LM with a language-model head)");
}

// The attention geometry every decoder config states the same way (hidden_size, layers, heads,
// KV heads, head_dim), with transformers' defaults: num_key_value_heads = num_attention_heads,
// head_dim = hidden_size / num_attention_heads.
void read_geometry(const json& j, const std::string& path, ModelConfig* c) {
  c->hidden_size = req_int(j, "hidden_size", path);
  c->num_hidden_layers = req_int(j, "num_hidden_layers", path);
  c->num_attention_heads = req_int(j, "num_attention_heads", path);
  c->num_key_value_heads = opt_int(j, "num_key_value_heads", c->num_attention_heads, path);
  if (c->num_attention_heads % c->num_key_value_heads != 0)
    cfg_fail(path, "num_attention_heads (" + std::to_string(c->num_attention_heads) +
                       ") is not a multiple of num_key_value_heads (" + std::to_string(c->num_key_value_heads) + ")");
  if (j.contains("head_dim") && !j["head_dim"].is_null()) {
    c->head_dim = req_int(j, "head_dim", path);
  } else {
    if (c->hidden_size % c->num_attention_heads != 0)
      cfg_fail(path, "hidden_size is not a multiple of num_attention_heads and head_dim is absent");
    c->head_dim = c->hidden_size / c->num_attention_heads;
  }
  if (c->head_dim % 2 != 0) cfg_fail(path, "head_dim must be even for RoPE");
}

json read_json_object(const std::string& path) {
  std::ifstream in(path);
  if (!in) cfg_fail(path, "cannot open (a Hugging Face model directory needs config.json)");
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    cfg_fail(path, std::string("not valid JSON: ") + e.what());
  }
  if (!j.is_object()) cfg_fail(path, "not a JSON object");
  return j;
}

}  // namespace

ModelConfig ModelConfig::geometry_from_json_file(const std::string& path) {
  const json j = read_json_object(path);
  ModelConfig c;
  if (j.contains("model_type") && j["model_type"].is_string()) c.model_type = j["model_type"].get<std::string>();
  read_geometry(j, path, &c);
  return c;
}

ModelConfig ModelConfig::from_json_file(const std::string& path) {
  const json j = read_json_object(path);
  ModelConfig c;
  if (!j.contains("model_type") || !j["model_type"].is_string()) cfg_fail(path, "missing string field \"model_type\"");
  c.model_type = j["model_type"].get<std::string>();
  check_architecture(j, c.model_type, path);
  if (j.contains("hidden_act") && !j["hidden_act"].is_null() && j["hidden_act"] != "silu")
    cfg_fail(path, "unsupported hidden_act " + j["hidden_act"].dump() + " (only \"silu\")");
  if (opt_bool(j, "mlp_bias", false, path)) cfg_fail(path, "mlp_bias=true is not supported");
  read_geometry(j, path, &c);
  c.intermediate_size = req_int(j, "intermediate_size", path);
  c.vocab_size = req_int(j, "vocab_size", path);
  c.max_position_embeddings = req_int(j, "max_position_embeddings", path);
  c.rms_norm_eps = opt_num(j, "rms_norm_eps", 1e-6, path);
  // transformers >= 5 writes rope_theta and the scaling into one "rope_parameters" object;
  // earlier versions (and most published checkpoints) write "rope_theta" + "rope_scaling".
  const json* rope = nullptr;
  if (j.contains("rope_parameters") && !j["rope_parameters"].is_null()) {
    if (!j["rope_parameters"].is_object()) cfg_fail(path, "rope_parameters must be null or an object");
    rope = &j["rope_parameters"];
    c.rope_theta = opt_num(*rope, "rope_theta", opt_num(j, "rope_theta", 10000.0, path), path);
  } else {
    c.rope_theta = opt_num(j, "rope_theta", 10000.0, path);
    if (j.contains("rope_scaling") && !j["rope_scaling"].is_null()) {
      if (!j["rope_scaling"].is_object()) cfg_fail(path, "rope_scaling must be null or an object");
      rope = &j["rope_scaling"];
    }
  }
  c.tie_word_embeddings = opt_bool(j, "tie_word_embeddings", false, path);
  c.attention_bias = c.model_type == "qwen2" ? true : opt_bool(j, "attention_bias", false, path);
  c.qk_norm = c.model_type == "qwen3";
  if (j.contains("torch_dtype") && j["torch_dtype"].is_string()) c.torch_dtype = j["torch_dtype"].get<std::string>();

  if (c.model_type == "mistral") {
    // transformers' MistralConfig defaults sliding_window to 4096 when the key is absent.
    if (!j.contains("sliding_window")) c.sliding_window = 4096;
    else if (!j["sliding_window"].is_null()) c.sliding_window = req_int(j, "sliding_window", path);
  } else if (c.model_type == "qwen2" || c.model_type == "qwen3") {
    if (opt_bool(j, "use_sliding_window", false, path))
      cfg_fail(path, c.model_type + " with use_sliding_window=true is not supported (field \"use_sliding_window\")");
  }
  if (j.contains("layer_types") && j["layer_types"].is_array()) {
    for (const auto& t : j["layer_types"])
      if (t != "full_attention")
        cfg_fail(path, "layer_types holds " + t.dump() + ": only \"full_attention\" layers are supported (field \"layer_types\")");
  }

  if (rope) {
    const auto& r = *rope;
    std::string type;
    if (r.contains("rope_type") && r["rope_type"].is_string()) type = r["rope_type"].get<std::string>();
    else if (r.contains("type") && r["type"].is_string()) type = r["type"].get<std::string>();
    else cfg_fail(path, "rope_scaling has no string \"rope_type\"/\"type\"");
    if (type == "default") {
      c.rope_scaling.type = RopeScaling::Type::None;
    } else if (type == "linear" || type == "llama3") {
      c.rope_scaling.type = type == "linear" ? RopeScaling::Type::Linear : RopeScaling::Type::Llama3;
      if (!r.contains("factor") || !r["factor"].is_number() || r["factor"].get<double>() <= 0)
        cfg_fail(path, "rope_scaling." + type + " needs a positive number \"factor\"");
      c.rope_scaling.factor = r["factor"].get<double>();
      if (type == "llama3") {
        c.rope_scaling.low_freq_factor = opt_num(r, "low_freq_factor", 1.0, path);
        c.rope_scaling.high_freq_factor = opt_num(r, "high_freq_factor", 4.0, path);
        c.rope_scaling.original_max_position_embeddings =
            opt_int(r, "original_max_position_embeddings", 8192, path);
        if (c.rope_scaling.high_freq_factor <= c.rope_scaling.low_freq_factor)
          cfg_fail(path, "rope_scaling.llama3 needs high_freq_factor > low_freq_factor");
      }
    } else {
      cfg_fail(path, "unsupported rope_scaling type \"" + type + "\" (supported: null, default, linear, llama3)");
    }
  }
  return c;
}

}  // namespace ucm::model
