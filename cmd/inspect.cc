// cmd/inspect.cc: `ucm inspect` parses arguments and calls ucm::admin::inspect.
#include "inspect_cmd.h"

#include <memory>
#include <nlohmann/json.hpp>

#include "ucm/store.h"
#include "ucm/tok/tokenizer.h"

namespace ucm::cli {

namespace {

void add_inspect_options(CLI::App* sub, InspectCmdOptions* opt) {
  sub->add_option("STORE", opt->store, "Store directory")->required();
  sub->add_flag("--verify", opt->o.verify,
                "Read every block (KV and representations) and check checksums and header "
                "fields; exit 3 when any is corrupt");
  sub->add_option("--threads", opt->o.threads,
                  "--verify: reader threads (blocks read in chunks sorted by file and offset)")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  sub->add_option("--block", opt->o.block_hex, "Show one block's index record (32 hex digits)");
  sub->add_option("--namespace", opt->o.ns, "Restrict to one namespace (name or 32-hex id)");
  sub->add_flag("--docs", opt->o.docs, "List the document registry");
  sub->add_option("--model", opt->model,
                  "Model directory (its tokenizer.json): --block and --docs also show the text of the token "
                  "ids the block records hold (store_v1.md §3.2); --audit: the namespace's model");
  sub->add_flag("--audit", opt->audit,
                "Recompute blocks from the token ids their records hold with --model and compare every "
                "layer's K and V with the stored payload; exit 3 when any is poisoned (needs libtorch)");
  sub->add_option("--sample", opt->sample, "--audit: blocks drawn at random (with the blocks before them "
                                           "in their chains)")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 40));
  sub->add_flag("--all", opt->all, "--audit: every block instead of a sample");
  sub->add_flag("--fix", opt->fix, "--audit: remove poisoned blocks, every block chained after them and their "
                                   "documents (precompute --resume recomputes them)");
  sub->add_option("--tolerance", opt->tolerance, "--audit: largest honest deviation (per layer and K|V, the "
                                                 "largest token error over the RMS token norm); 0 = the default, 0.2")
      ->check(CLI::Range(0.0, 10.0));
  sub->add_option("--seed", opt->seed, "--audit: sampling seed")->capture_default_str();
  sub->add_option("--device", opt->device, "--audit: cpu | cuda[:N]")->capture_default_str();
  sub->add_option("--compute-threads", opt->compute_threads, "--audit: compute threads (0 = every core)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1024));
  sub->add_option("--compute-dtype", opt->compute_dtype,
                  "--audit: fp32 | bf16 | auto (bf16 compute drifts over the layers: keep fp32)")
      ->capture_default_str();
}

void (*g_audit_runner)(const InspectCmdOptions&) = nullptr;

// --model: the text of the ids the store holds (a block's, and each document's whole chain).
Status add_text(const InspectCmdOptions& opt, admin::InspectReport* rep) {
  using json = nlohmann::ordered_json;
  std::unique_ptr<tok::Tokenizer> tk;
  try {
    tk = std::make_unique<tok::Tokenizer>(tok::Tokenizer::from_file(opt.model + "/tokenizer.json"));
  } catch (const std::exception& e) {
    return Status::InvalidArgument("--model " + opt.model + ": " + e.what());
  }
  auto text = [&](const std::vector<uint32_t>& ids) {
    try {
      return tk->decode(std::vector<int32_t>(ids.begin(), ids.end()));
    } catch (const std::exception& e) {
      return std::string("(not text of this tokenizer: ") + e.what() + ")";
    }
  };
  if (!rep->block_json.empty()) {
    json b = json::parse(rep->block_json);
    auto add = [&](json& one) {
      if (one.contains("token_ids") && one["token_ids"].is_array()) one["text"] = text(one["token_ids"]);
    };
    if (b.is_array())
      for (auto& one : b) add(one);
    else
      add(b);
    rep->block_json = b.dump();
  }
  if (rep->docs_run && !rep->docs_json.empty()) {
    OpenOptions oo;
    std::unique_ptr<Store> s;
    Status st = Store::Open(opt.store, oo, &s);
    if (!st.ok()) return st;
    json d = json::parse(rep->docs_json);
    for (auto& e : d) {
      NamespaceId ns{};
      BlockHash last{};
      if (!parse_hex16(e.value("namespace_id", std::string()), &ns).ok() ||
          !parse_hex16(e.value("last_block", std::string()), &last).ok())
        continue;
      std::vector<uint32_t> ids;
      Status cs = s->chain_tokens(ns, last, &ids);
      e["text"] = cs.ok() ? text(ids) : "(" + cs.message() + ")";
    }
    rep->docs_json = d.dump();
  }
  return Status::OK();
}

}  // namespace

void set_audit_runner(void (*run)(const InspectCmdOptions&)) { g_audit_runner = run; }

bool is_audit(int argc, char** argv) {
  bool inspect = false, audit = false;
  for (int i = 1; i < argc; ++i) {
    if (!inspect && argv[i][0] != '-') {
      if (std::string(argv[i]) != "inspect") return false;
      inspect = true;
    }
    if (std::string(argv[i]) == "--audit") audit = true;
  }
  return inspect && audit;
}

void run_inspect(const InspectCmdOptions& opt) {
  if (opt.audit) {
    if (g_audit_runner) return g_audit_runner(opt);
    const Status st = Status::NotSupported("--audit needs libtorch: this ucm was built without it");
    finish("inspect", opt.common, st, admin::InspectReport{}, false);
  }
  if (opt.all || opt.fix || opt.tolerance > 0)
    finish("inspect", opt.common,
           Status::InvalidArgument("--all, --fix and --tolerance go with --audit"), admin::InspectReport{}, false);
  admin::InspectOptions o = opt.o;
  o.progress = make_progress("inspect", opt.common);
  admin::InspectReport rep;
  Status st = admin::inspect(opt.store, o, &rep);
  if (st.ok() && !opt.model.empty() && (!rep.block_json.empty() || rep.docs_run)) st = add_text(opt, &rep);
  // A verify that found corrupt blocks still prints the full report (listing them).
  finish("inspect", opt.common, st, rep, st.ok() || (rep.verified_run && rep.corrupt_total > 0));
}

CLI::App* setup_inspect(CLI::App& app) {
  return add_command(app, "inspect", run_inspect, add_inspect_options,
                     "Show a store: format, namespaces, blocks, files, ages (read-only; safe while a writer runs)");
}

}  // namespace ucm::cli
