// ucm_tokenize_bench TOKENIZER_JSON DIR [SUFFIX] [REPEAT]
// Tokenizes every regular file under DIR whose name ends in SUFFIX (default ".rst.txt"),
// REPEAT times (default 2; the first pass fills the word cache), and prints per pass:
// documents, bytes, tokens, wall seconds, docs/s, MB/s (1 MB = 1e6 bytes), tokens/s, and the same
// rates per second of this thread's CPU time (robust when other processes share the cores).
#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "ucm/tok/tokenizer.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s TOKENIZER_JSON DIR [SUFFIX] [REPEAT]\n", argv[0]);
    return 2;
  }
  const std::string suffix = argc > 3 ? argv[3] : ".rst.txt";
  const int repeat = argc > 4 ? std::stoi(argv[4]) : 2;
  try {
    auto t0 = std::chrono::steady_clock::now();
    auto tok = ucm::tok::Tokenizer::from_file(argv[1]);
    const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("loaded %s: vocab %zu, merges %zu, %.3f s\n", argv[1], tok.vocab_size(), tok.merges_size(), load_s);
    std::vector<std::string> docs;
    std::vector<std::filesystem::path> paths;
    for (const auto& e : std::filesystem::recursive_directory_iterator(argv[2])) {
      const std::string n = e.path().filename().string();
      if (e.is_regular_file() && n.size() >= suffix.size() && n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0)
        paths.push_back(e.path());
    }
    std::sort(paths.begin(), paths.end());
    std::size_t bytes = 0;
    for (const auto& p : paths) {
      std::ifstream f(p, std::ios::binary);
      std::ostringstream ss;
      ss << f.rdbuf();
      docs.push_back(ss.str());
      bytes += docs.back().size();
    }
    for (int r = 0; r < repeat; ++r) {
      std::size_t tokens = 0;
      const auto cpu = [] {
        timespec ts{};
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
        return static_cast<double>(ts.tv_sec) + ts.tv_nsec * 1e-9;
      };
      const double c1 = cpu();
      auto t1 = std::chrono::steady_clock::now();
      for (const auto& d : docs) tokens += tok.encode(d).size();
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
      const double c = cpu() - c1;
      std::printf("pass %d: %zu docs, %zu bytes, %zu tokens; wall %.3f s: %.1f docs/s, %.2f MB/s, %.0f tokens/s; "
                  "cpu %.3f s: %.1f docs/s, %.2f MB/s\n",
                  r + 1, docs.size(), bytes, tokens, s, docs.size() / s, bytes / s / 1e6, tokens / s, c,
                  docs.size() / c, bytes / c / 1e6);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
