// tests/common/cli_run.h: runs the `ucm` binary (or any command) through the shell and captures
// its exit code, stdout and stderr. Header-only, for the tests that drive the CLI.
#pragma once
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace ucm::test {

struct CliRun {
  int code = -1;    ///< exit status; -1 when the command did not exit normally
  std::string out;  ///< stdout
  std::string err;  ///< stderr
};

/// Runs `cmd` (a shell command line) with stdout and stderr captured in temporary files.
inline CliRun run_shell(const std::string& cmd) {
  static int n = 0;
  const std::string base = (std::filesystem::temp_directory_path() /
                            ("ucm-cli-" + std::to_string(::getpid()) + "-" + std::to_string(n++)))
                               .string();
  const std::string full = cmd + " >" + base + ".out 2>" + base + ".err";
  const int rc = std::system(full.c_str());
  CliRun r;
  r.code = rc != -1 && WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  auto slurp = [](const std::string& p) {
    std::ifstream f(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
  };
  r.out = slurp(base + ".out");
  r.err = slurp(base + ".err");
  std::remove((base + ".out").c_str());
  std::remove((base + ".err").c_str());
  return r;
}

/// Single-quotes `s` for the shell.
inline std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

}  // namespace ucm::test
