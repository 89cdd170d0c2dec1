// Fuzz target: the JSONL corpus reader (pipelines/corpus/include/ucm/corpus/corpus.h,
// docs/corpus.md).
//
// Input: the bytes of a .jsonl file, read three times: non-strict; strict; non-strict as shard 1
// of 2 with a template.
// Contract checked:
//   non-strict  throws nothing (no I/O errors on a readable file); every document has non-empty,
//               valid UTF-8 text and a source, indices increase; documents + malformed + empty
//               equals the number of non-blank lines; the issues are those counted.
//   strict      throws ucm::corpus::CorpusError only, exactly when the non-strict pass found a
//               malformed line, after returning the documents before it.
//   sharded     returns the non-strict documents with odd index, wrapped by the template.
#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_common.h"
#include "ucm/corpus/corpus.h"

namespace corpus = ucm::corpus;

namespace {

struct Pass {
  std::vector<corpus::Document> docs;
  corpus::Stats stats;
  bool threw = false;
};

Pass read_all(const std::string& path, corpus::Options opt) {
  Pass p;
  const bool strict = opt.strict;
  corpus::Reader r = corpus::Reader::open(path, std::move(opt));
  corpus::Document d;
  try {
    while (r.next(d)) p.docs.push_back(d);
  } catch (const corpus::CorpusError& e) {
    FUZZ_CHECK_MSG(strict, std::string("non-strict reader threw: ") + e.what());
    FUZZ_CHECK(std::string_view(e.what()).find("strict") != std::string_view::npos);
    p.threw = true;
  }
  p.stats = r.stats();
  return p;
}

size_t non_blank_lines(std::string_view s) {
  size_t n = 0;
  while (!s.empty()) {
    const size_t nl = s.find('\n');
    const std::string_view line = s.substr(0, nl);
    if (line.find_first_not_of(" \t\r\n") != std::string_view::npos) ++n;
    if (nl == std::string_view::npos) break;
    s.remove_prefix(nl + 1);
  }
  return n;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = ucm_fuzz::scratch_dir() + "/corpus.jsonl";
  ucm_fuzz::write_file(path, data, size);
  const std::string_view input(reinterpret_cast<const char*>(data), size);

  const Pass all = read_all(path, {});
  FUZZ_CHECK(all.stats.documents == all.docs.size());
  FUZZ_CHECK_MSG(all.stats.documents + all.stats.malformed + all.stats.empty == non_blank_lines(input),
                 std::to_string(all.stats.documents) + "+" + std::to_string(all.stats.malformed) + "+" +
                     std::to_string(all.stats.empty) + " != " + std::to_string(non_blank_lines(input)));
  FUZZ_CHECK(all.stats.issues.size() ==
             std::min<uint64_t>(all.stats.malformed + all.stats.empty, corpus::Stats::kMaxStoredIssues));
  for (size_t i = 0; i < all.docs.size(); ++i) {
    const corpus::Document& d = all.docs[i];
    FUZZ_CHECK(!d.text.empty());
    FUZZ_CHECK(!corpus::find_invalid_utf8(d.text).has_value());
    FUZZ_CHECK(!d.source.empty());
    if (i > 0) FUZZ_CHECK(all.docs[i - 1].index < d.index);
  }
  for (const corpus::Issue& is : all.stats.issues) FUZZ_CHECK(!is.location.empty() && !is.reason.empty());

  corpus::Options strict;
  strict.strict = true;
  const Pass st = read_all(path, strict);
  FUZZ_CHECK(st.threw == (all.stats.malformed > 0));
  FUZZ_CHECK(st.docs.size() <= all.docs.size());
  if (!st.threw) FUZZ_CHECK(st.docs.size() == all.docs.size());
  for (size_t i = 0; i < st.docs.size(); ++i)
    FUZZ_CHECK(st.docs[i].id == all.docs[i].id && st.docs[i].text == all.docs[i].text);

  corpus::Options shard;
  shard.shard_index = 1;
  shard.shard_count = 2;
  shard.tmpl = corpus::Template::from_string("<s>{document}</s>");
  const Pass odd = read_all(path, shard);
  size_t j = 0;
  for (const corpus::Document& d : all.docs) {
    if (d.index % 2 != 1) continue;
    FUZZ_CHECK(j < odd.docs.size());
    FUZZ_CHECK(odd.docs[j].index == d.index && odd.docs[j].id == d.id);
    FUZZ_CHECK(odd.docs[j].text == "<s>" + d.text + "</s>");
    ++j;
  }
  FUZZ_CHECK(j == odd.docs.size());
  return 0;
}
