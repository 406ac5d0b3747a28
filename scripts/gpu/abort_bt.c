/* A diagnosis preloaded into a workload (LD_PRELOAD): on SIGABRT, SIGSEGV,
 * SIGBUS or SIGILL, the native backtrace of the thread that got it (each
 * frame as library(+offset)) and the thread's name go to stderr, then the
 * signal is raised again with its default action: the exit status is the
 * signal's, as without it. backtrace() is called once at the load, so that
 * the handler allocates nothing (libgcc_s loaded before the heap may be
 * corrupted). Python's faulthandler, installed later, calls this handler
 * after printing the Python stacks.
 *
 *   gcc -shared -fPIC -O2 -o /tmp/abort_bt.so scripts/gpu/abort_bt.c */
#define _GNU_SOURCE
#include <execinfo.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

static void say(const char *s)
{
    ssize_t r = write(2, s, strlen(s));
    (void)r;
}

static void on_fatal(int sig)
{
    void *frames[64];
    char name[32] = {0};
    prctl(PR_GET_NAME, name);
    say("abort_bt: signal ");
    say(sig == SIGABRT ? "SIGABRT" : sig == SIGSEGV ? "SIGSEGV" : sig == SIGBUS ? "SIGBUS" : "SIGILL");
    say(" in thread ");
    say(name);
    say(", native frames:\n");
    int n = backtrace(frames, 64);
    backtrace_symbols_fd(frames, n, 2);
    signal(sig, SIG_DFL);
    raise(sig);
}

__attribute__((constructor)) static void install(void)
{
    void *warm[1];
    backtrace(warm, 1);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_fatal;
    sa.sa_flags = SA_RESETHAND | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    int sigs[] = {SIGABRT, SIGSEGV, SIGBUS, SIGILL};
    for (unsigned i = 0; i < sizeof sigs / sizeof *sigs; i++)
        sigaction(sigs[i], &sa, NULL);
}
