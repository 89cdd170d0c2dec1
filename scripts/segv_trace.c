/* scripts/segv_trace.c: a development-time crash tracer for machines without gdb (the lent
 * device machine). Preloaded, it prints, on SIGSEGV, SIGBUS or SIGABRT, the faulting pc, the
 * word at the stack pointer (the return address when the fault is a call through a null
 * function pointer, where backtrace() cannot unwind) and backtrace(), each as
 * "SEGV_TRACE <object> <offset> <symbol>", then dies of the signal as before. Resolve an offset
 * with `addr2line -f -C -i -e <object> <offset>`.
 *
 *   gcc -shared -fPIC -O1 -o segv_trace.so scripts/segv_trace.c -ldl
 *   LD_PRELOAD=$PWD/segv_trace.so build/libexec/ucm/ucm-torch bench precompute ...
 *
 * scripts/device_check.sh does this for a step that crashes. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <ucontext.h>
#include <unistd.h>

static void say(const char* what, void* a) {
  Dl_info di;
  if (a && dladdr(a, &di) && di.dli_fname)
    dprintf(2, "SEGV_TRACE %s 0x%lx %s (%s)\n", di.dli_fname, (unsigned long)((char*)a - (char*)di.dli_fbase),
            di.dli_sname ? di.dli_sname : "?", what);
  else
    dprintf(2, "SEGV_TRACE ? %p ? (%s)\n", a, what);
}

static void on_signal(int sig, siginfo_t* si, void* ucv) {
  ucontext_t* u = (ucontext_t*)ucv;
  void* pc = (void*)u->uc_mcontext.gregs[REG_RIP];
  void** sp = (void**)u->uc_mcontext.gregs[REG_RSP];
  dprintf(2, "SEGV_TRACE signal %d (%s), fault address %p, thread %d\n", sig, strsignal(sig), si->si_addr, (int)gettid());
  say("pc", pc);
  if (sp) say("return address at sp", sp[0]);
  void* frames[96];
  const int n = backtrace(frames, 96);
  for (int i = 0; i < n; ++i) say("frame", frames[i]);
  signal(sig, SIG_DFL);
  raise(sig);
}

__attribute__((constructor)) static void install(void) {
  static char alt[1 << 16];
  stack_t ss = {.ss_sp = alt, .ss_size = sizeof alt};
  sigaltstack(&ss, 0);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_signal;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigaction(SIGSEGV, &sa, 0);
  sigaction(SIGBUS, &sa, 0);
  sigaction(SIGABRT, &sa, 0);
}
