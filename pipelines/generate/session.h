// pipelines/generate/session.h: the setup every entry point of the engine shares (run_generate,
// run_blend, eval_blend, eval_retrieval, bench_generate): load the model, its tokenizer and eos
// token, fingerprint it, open the store and find the namespace, check the context capacity.
// What to do when the store does not hold the namespace is decided here, once (NamespaceNeed).
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "engine.h"
#include "ucm/model/fingerprint.h"
#include "ucm/model/llama_model.h"
#include "store_client.h"
#include "ucm/status.h"
#include "ucm/tok/tokenizer.h"

namespace ucm::generate {

/// What a run needs of its namespace in the store.
enum class NamespaceNeed {
  kRequired,  ///< open_store() fails with the missing-namespace error when the store lacks it
  kOptional,  ///< a run without it misses every block: the same message, logged as a warning
  kRegister,  ///< the store is opened read-write (created when missing) and the namespace
              ///< registered when missing (--save)
};

struct SessionOptions {
  std::string model_dir;
  std::string tokenizer_file;         ///< default <model_dir>/tokenizer.json
  std::string compute_dtype = "fp32"; ///< the runner's GEMM dtype: "fp32" | "bf16" | "auto"
  std::string precompute_config;      ///< the precompute YAML (fingerprint); "" = precompute's defaults
  std::string store;                  ///< "" = no store (full recompute only)
  std::string namespace_name;         ///< by name or 32-hex id; "" = this model's fingerprint
  NamespaceNeed need = NamespaceNeed::kRequired;
};

/// The SessionOptions of a run's options `o` (generate, eval, bench): its model_dir,
/// tokenizer_file and store; the run sets the rest.
template <class RunOptions>
SessionOptions session_options(const RunOptions& o) {
  SessionOptions so;
  so.model_dir = o.model_dir;
  so.tokenizer_file = o.tokenizer_file;
  so.store = o.store;
  return so;
}

/// The model, tokenizer, fingerprint and (optionally) store of one run. Owns all of them; the
/// references and pointers its accessors return, and the Engine of engine(), live as long as the
/// Session. Not copyable or movable (the engine points into it).
class Session {
 public:
  Session() = default;
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  /// load(o), then open_store().
  Status open(const SessionOptions& o);

  /// Loads the model (on the CPU, o.compute_dtype), its tokenizer and eos token, and reads the
  /// namespace fingerprint (o.precompute_config). Keeps `o` for open_store(). Errors:
  /// InvalidArgument (model, tokenizer, config).
  Status load(const SessionOptions& o);

  /// After load(): when the options name a store, opens it (read-write for
  /// NamespaceNeed::kRegister) and finds the namespace. A store without it: NotFound naming the
  /// store, the namespace and the fingerprint (kRequired, or a namespace asked for by name), a
  /// warning with the same text (kOptional), or the namespace registered (kRegister). Other
  /// errors: the store's codes (opening, the namespace lookup).
  Status open_store();

  /// InvalidArgument when `tokens` plus `new_tokens` exceed the model's positions; `what` names
  /// the tokens in the message ("prompt", "prefix").
  Status check_capacity(uint64_t tokens, uint64_t new_tokens, const std::string& what = "prompt") const;

  const model::LlamaModel& model() const { return *model_; }
  const tok::Tokenizer& tokenizer() const { return *tokenizer_; }
  int64_t eos() const { return eos_; }  ///< config.json eos_token_id (-1 when absent)
  const model::FingerprintOptions& fingerprint() const { return fp_; }
  uint32_t block_size() const { return fp_.block_size; }
  /// The open store; null before open_store() or when the options named none.
  const StoreClient* store() const { return store_.get(); }
  /// An engine on the model and the store (recompute only without one), its KV cache in the
  /// namespace dtype. It borrows the model and store: it must not outlive the Session.
  Engine engine() const;

 private:
  /// The missing-namespace message: the store, the namespace (`ns`: 32-hex id or the name asked
  /// for), the model and its fingerprint, and how to fill it.
  std::string missing_namespace(const std::string& ns) const;

  SessionOptions o_;
  std::unique_ptr<model::LlamaModel> model_;
  std::unique_ptr<tok::Tokenizer> tokenizer_;
  int64_t eos_ = -1;
  model::FingerprintOptions fp_;
  std::string desc_json_;
  std::unique_ptr<StoreClient> store_;
};

}  // namespace ucm::generate
