// tests/common/real_data.h: where the tests that run on real input find it, and whole-file I/O.
// The default model: SmolLM2-135M-Instruct in $UCM_MODEL_DIR, else in models/ of the source tree
// (scripts/fetch_model.py). The corpus: Debian's python3.11-doc pages.
// A test binary that includes this defines UCM_SOURCE_DIR (the source tree's root).
#pragma once
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#ifndef UCM_SOURCE_DIR
#error "define UCM_SOURCE_DIR (the source tree) for tests that include real_data.h"
#endif

namespace ucm::test {

/// The python3.11-doc library pages (reStructuredText sources).
inline constexpr const char* kDocsDir = "/usr/share/doc/python3.11/html/_sources/library";

/// Four library pages of 2.5-3.5 KB (about 600-900 tokens with the chat template), in corpus order:
/// the documents of the model tests that answer or blend them, short enough for their fp32 passes.
inline const std::vector<std::string> kShortDocs = {"codeop.rst.txt", "copy.rst.txt", "linecache.rst.txt",
                                                    "netrc.rst.txt"};

/// The model directory: $UCM_MODEL_DIR, else UCM_SOURCE_DIR/models/SmolLM2-135M-Instruct.
inline std::string model_dir() {
  if (const char* e = std::getenv("UCM_MODEL_DIR")) return e;
  return std::string(UCM_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct";
}
/// "" when the model directory holds config.json and tokenizer.json, else why a test cannot run.
inline std::string model_missing() {
  const std::filesystem::path dir = model_dir();
  if (std::filesystem::exists(dir / "config.json") && std::filesystem::exists(dir / "tokenizer.json")) return "";
  return "model directory " + dir.string() + " missing or incomplete: run scripts/fetch_model.py";
}
/// Whether the model's weights are there (tests skip without them).
inline bool have_model() { return std::filesystem::exists(std::filesystem::path(model_dir()) / "model.safetensors"); }

inline std::string read_file(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}
inline void write_file(const std::filesystem::path& p, const std::string& s) {
  std::ofstream f(p, std::ios::binary);
  f << s;
}

}  // namespace ucm::test
