// cmd/sglang_pages.cc: `ucm sglang-pages` parses arguments and calls ucm::build_sglang_pages.
#include "sglang_pages_cmd.h"

#include <nlohmann/json.hpp>

#include <memory>

#include "ucm/sglang_pages.h"
#include "ucm/store.h"

namespace ucm::cli {
namespace {

struct Report {
  std::string ns_name, ns_id;
  SglangPagesBuildReport r;
  std::string to_json() const {
    nlohmann::ordered_json j;
    j["namespace"] = ns_name;
    j["namespace_id"] = ns_id;
    j["page_size"] = r.page_size;
    j["block_size"] = r.block_size;
    j["documents"] = r.documents;
    j["documents_used"] = r.documents_used;
    j["documents_skipped"] = r.documents_skipped;
    if (!r.first_skip.empty()) j["first_skip"] = r.first_skip;
    j["chains"] = r.chains;
    j["chains_used"] = r.chains_used;
    j["chains_skipped"] = r.chains_skipped;
    j["pages"] = r.pages;
    j["table_bytes"] = r.table_bytes;
    return j.dump();
  }
  std::string to_text() const {
    std::string s = "namespace " + ns_name + ": SGLang page table for page size " + std::to_string(r.page_size) +
                    " (block size " + std::to_string(r.block_size) + "): " + std::to_string(r.pages) + " pages from " +
                    std::to_string(r.documents_used) + " of " + std::to_string(r.documents) + " documents and " +
                    std::to_string(r.chains_used) + " of " + std::to_string(r.chains) + " other chains with ids, " +
                    std::to_string(r.table_bytes) + " bytes\n";
    if (r.documents_skipped)
      s += std::to_string(r.documents_skipped) + " document(s) skipped; first: " + r.first_skip + "\n";
    return s;
  }
};

void add_sglang_pages_options(CLI::App* sub, SglangPagesCmdOptions* opt) {
  sub->add_option("STORE", opt->store, "Store directory")->required()->check(CLI::ExistingDirectory);
  sub->add_option("--page-size", opt->page_size,
                  "SGLang's --page-size (tokens), a multiple of the namespace's block size")
      ->required()
      ->check(CLI::PositiveNumber);
  sub->add_option("--namespace", opt->ns, "Namespace name or 32-hex id (default: the store's only one)");
}

}  // namespace

void run_sglang_pages(const SglangPagesCmdOptions& opt) {
  Report rep;
  OpenOptions oo;
  oo.mode = OpenOptions::Mode::kReadWrite;
  std::unique_ptr<Store> store;
  Status st = Store::Open(opt.store, oo, &store);
  NamespaceId id{};
  NamespaceDesc d;
  if (st.ok()) {
    if (!opt.ns.empty()) {
      st = store->find_namespace(opt.ns, &d, &id);
    } else {
      const auto all = store->namespaces();
      if (all.size() != 1)
        st = Status::InvalidArgument(std::to_string(all.size()) + " namespaces in the store: name one with --namespace "
                                     "(`ucm inspect STORE` lists them)");
      else {
        d = all[0];
        id = d.id();
      }
    }
  }
  if (st.ok()) {
    rep.ns_name = d.display_name();
    rep.ns_id = to_hex(id);
    auto progress = make_progress("sglang-pages", opt.common);
    st = build_sglang_pages(store.get(), id, opt.page_size, &rep.r,
                            progress ? std::function<void(const std::string&)>(progress) : nullptr);
  }
  store.reset();
  finish("sglang-pages", opt.common, st, rep, st.ok());
}

CLI::App* setup_sglang_pages(CLI::App& app) {
  return add_command(app, "sglang-pages", run_sglang_pages, add_sglang_pages_options,
                     "Build a namespace's SGLang page alias table, so SGLang's HiCache (the ucm.sglang backend) "
                     "finds its blocks by page key (store_v1.md §12.1); takes the writer lock");
}

}  // namespace ucm::cli
