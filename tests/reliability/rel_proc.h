// tests/reliability/rel_proc.h: spawning `ucm_crash_child` from a (multi-threaded) gtest process.
// posix_spawn = fork + exec with nothing run in between, which is safe with threads.
#pragma once
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <functional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "rel_common.h"

extern char** environ;

namespace rel {

#ifndef UCM_CRASH_CHILD
#error "UCM_CRASH_CHILD (path of the ucm_crash_child binary) must be defined by CMake"
#endif
inline const char* child_path() { return UCM_CRASH_CHILD; }

/// A running child. stdout goes to a pipe (out_fd) or to a file; stderr is inherited.
struct Child {
  pid_t pid = -1;
  int out_fd = -1;       ///< read end of the stdout pipe (pipe mode), non-blocking
  std::string output;    ///< what was read so far
  int status = 0;        ///< waitpid status once reaped
  bool reaped = false;

  /// Reads what is available (non-blocking). Returns false at EOF.
  bool drain() {
    if (out_fd < 0) return false;
    char buf[4096];
    for (;;) {
      ssize_t k = read(out_fd, buf, sizeof buf);
      if (k > 0) {
        output.append(buf, static_cast<size_t>(k));
        continue;
      }
      if (k == 0) return false;
      return errno == EAGAIN || errno == EINTR;
    }
  }
  /// Waits up to timeout_ms for `needle` to appear in the output. True if it did.
  bool wait_for(const std::string& needle, int timeout_ms) {
    const uint64_t end = now_ms() + static_cast<uint64_t>(timeout_ms);
    while (output.find(needle) == std::string::npos) {
      const uint64_t t = now_ms();
      if (t >= end) return false;
      pollfd p{out_fd, POLLIN, 0};
      poll(&p, 1, static_cast<int>(end - t));
      if (!drain() && output.find(needle) == std::string::npos) return false;
    }
    return true;
  }
  /// Waits for the child to exit; reads the rest of its output.
  void reap() {
    if (reaped) return;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    reaped = true;
    if (out_fd >= 0) {
      int fl = fcntl(out_fd, F_GETFL);
      fcntl(out_fd, F_SETFL, fl & ~O_NONBLOCK);
      char buf[4096];
      ssize_t k;
      while ((k = read(out_fd, buf, sizeof buf)) > 0) output.append(buf, static_cast<size_t>(k));
      close(out_fd);
      out_fd = -1;
    }
  }
  /// SIGKILL, then reap. True if the child was still running (died of the signal).
  bool kill_and_reap() {
    ::kill(pid, SIGKILL);
    reap();
    return WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
  }
  bool exited_ok() const { return reaped && WIFEXITED(status) && WEXITSTATUS(status) == 0; }
  std::vector<std::string> lines() const {
    std::vector<std::string> v;
    std::istringstream in(output);
    std::string l;
    while (std::getline(in, l)) v.push_back(l);
    return v;
  }
};

/// The child's report lines, word by word: `on(word, rest, line)` for each line, with its first
/// word and a stream of the words after it.
inline void for_each_report(const std::vector<std::string>& lines,
                            const std::function<void(const std::string&, std::istream&, const std::string&)>& on) {
  for (const std::string& l : lines) {
    std::istringstream in(l);
    std::string w;
    in >> w;
    on(w, in, l);
  }
}

/// The rest of an "ack A B" line: adds indices A..B to *acked.
inline void read_ack(std::istream& rest, std::set<uint64_t>* acked) {
  uint64_t a, b;
  rest >> a >> b;
  for (uint64_t i = a; i <= b; ++i) acked->insert(i);
}

/// Starts ucm_crash_child with args. stdout_file empty: stdout to a pipe (Child::out_fd).
inline bool spawn_child(const std::vector<std::string>& args, Child* c,
                        const std::string& stdout_file = "") {
  std::vector<std::string> all{child_path()};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  int pfd[2] = {-1, -1};
  if (stdout_file.empty()) {
    if (pipe2(pfd, O_CLOEXEC) != 0) return false;
    posix_spawn_file_actions_adddup2(&fa, pfd[1], 1);
  } else {
    posix_spawn_file_actions_addopen(&fa, 1, stdout_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  }
  pid_t pid;
  int rc = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (pfd[1] >= 0) close(pfd[1]);
  if (rc != 0) {
    if (pfd[0] >= 0) close(pfd[0]);
    return false;
  }
  c->pid = pid;
  c->out_fd = pfd[0];
  if (c->out_fd >= 0) fcntl(c->out_fd, F_SETFL, fcntl(c->out_fd, F_GETFL) | O_NONBLOCK);
  return true;
}

}  // namespace rel
