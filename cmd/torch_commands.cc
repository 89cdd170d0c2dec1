// cmd/torch_commands.cc: see torch_commands.h.
#include "torch_commands.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "cli_common.h"

#ifndef UCM_CLI_DELEGATE_TORCH
#define UCM_CLI_DELEGATE_TORCH 0
#endif

namespace ucm::cli {
namespace {

const TorchCommand kTorchCommands[] = {
    {"", "precompute",
     "Prefill a corpus with a model and store the KV cache of every full block, its block "
     "representations and a document registry (docs/precompute.md). Creates the store if missing; "
     "Ctrl-C stops cleanly (re-run with --resume)"},
    {"", "generate",
     "Answer a prompt the way a server with a ucm store does (reference engine, C ABI only): load the "
     "cached prefix, prefill the rest, decode greedily; reports prefix hit, TTFT with the cache and of "
     "full recompute, and checks both give the same tokens (docs/generate.md)"},
    {"", "eval", "Measure the quality of ucm's approximations on real data"},
    {"bench", "precompute",
     "Tokens/s of bare prefill (model forward only) and of full precompute (hashing, payloads, "
     "representations, store dumps, registry) on the same documents and batches; ratio target >= 0.9"},
    {"bench", "generate",
     "TTFT with the cache (lookup + load + prefill of the last block) against full recompute, for cached "
     "prefixes of 1K, 4K and 8K tokens of a real document, in one run; target >= 20x at 8K"},
};

bool has_json(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--json") == 0) return true;
  return false;
}

}  // namespace

const char* torch_description(const std::string& parent, const std::string& name) {
  for (const auto& c : kTorchCommands)
    if (parent == c.parent && name == c.name) return c.description;
  return "";
}

const TorchCommand* torch_command_of(int argc, char** argv) {
  std::string first, second;
  for (int i = 1; i < argc; ++i) {
    if (argv[i][0] == '-') continue;
    if (first.empty()) first = argv[i];
    else {
      second = argv[i];
      break;
    }
  }
  for (const auto& c : kTorchCommands) {
    if (!*c.parent && first == c.name) return &c;
    if (*c.parent && first == c.parent && second == c.name) return &c;
  }
  return nullptr;
}

int exec_torch_binary(const char* relative_path, int argc, char** argv) {
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  const std::string target = (self.parent_path() / relative_path).lexically_normal().string();
  int err = 0;
  if (!ec) {
    ::execv(target.c_str(), argv);
    err = errno;  // execv returns only on failure
  }
  const Status st = Status::NotSupported(
      "this command needs ucm's libtorch binary " + target + ", which cannot be run (" +
      (ec ? ec.message() : std::string(std::strerror(err))) +
      "); reinstall ucm (cmake --install) or run it from the build tree that built this ucm");
  if (has_json(argc, argv)) print_json("", st);
  const TorchCommand* c = torch_command_of(argc, argv);
  print_error(c ? (std::string(*c->parent ? std::string(c->parent) + " " : "") + c->name) : "ucm", st);
  return admin::kExitError;
}

void add_torch_placeholders(CLI::App& app, const std::string& parent) {
  const std::string missing = UCM_CLI_DELEGATE_TORCH ? "" : "needs libtorch";
  for (const auto& c : kTorchCommands) {
    if (parent != c.parent) continue;
    CLI::App* sub = app.add_subcommand(
        c.name, std::string(c.description) + (missing.empty() ? "" : " (not built: " + missing + ")"));
    sub->allow_extras();
    const std::string name = (parent.empty() ? "" : parent + " ") + c.name;
    sub->callback([name, missing, sub] {
      const Status st =
          missing.empty()
              ? Status::Internal("ucm-torch was not started for this command; run ucm-torch " + name + " directly")
              : Status::NotSupported("this ucm was built without it (" + missing + "); rebuild ucm with that support");
      for (const auto& x : sub->remaining())
        if (x == "--json") {
          print_json("", st);
          break;
        }
      print_error(name, st);
      throw CLI::RuntimeError(admin::kExitError);
    });
  }
}

}  // namespace ucm::cli
