/* An independent count of CUDA API calls: a CUPTI callback subscriber loaded
 * into the program with CUDA_INJECTION64_PATH (the CUDA driver calls its
 * InitializeInjection() at cuInit), counting every runtime and driver API
 * call by name at its entry. cudaprobe's own counts are checked against it.
 *
 *   cc -O2 -shared -fPIC -o cupti_counter.so cupti_counter.c \
 *      -I$CUDA/include -I$CUDA/extras/CUPTI/include -L$CUDA/extras/CUPTI/lib64 -lcupti
 *   CUDA_INJECTION64_PATH=$PWD/cupti_counter.so CUPTI_COUNTER_OUT=counts.txt ./prog
 *
 * At exit it writes "# total" then one "<domain> <name> <count>" line per
 * function called (domain: runtime or driver) to $CUPTI_COUNTER_OUT (default
 * stderr; a "%p" in it is replaced by the process id, for a tree of processes
 * that each count their own). A program may also take a snapshot at a moment of its choosing
 * (the window a `cudaprobe trace --pid` was attached for) by calling the
 * exported cupti_counter_dump(path, label), e.g. from Python:
 *   ctypes.CDLL(os.environ["CUDA_INJECTION64_PATH"]).cupti_counter_dump(b"f", b"before")
 * Counters are atomics indexed by callback id; the name of each id is taken
 * from the first callback that carries it. CUPTI itself makes driver calls of
 * its own, which go through no callback: what CUPTI counts is what the program
 * called. */
#include <cupti.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_CBID 4096
enum { RUNTIME, DRIVER, NDOMAINS };
static const char *domain_names[NDOMAINS] = {"runtime", "driver"};
static _Atomic unsigned long counts[NDOMAINS][MAX_CBID];
static const char *names[NDOMAINS][MAX_CBID];
static CUpti_SubscriberHandle subscriber;
static int initialized;

static void CUPTIAPI on_callback(void *userdata, CUpti_CallbackDomain domain,
                                 CUpti_CallbackId cbid, const void *data)
{
    const CUpti_CallbackData *info = data;
    int d = domain == CUPTI_CB_DOMAIN_RUNTIME_API ? RUNTIME : DRIVER;
    (void)userdata;
    if (info->callbackSite != CUPTI_API_ENTER || cbid >= MAX_CBID)
        return;
    if (!names[d][cbid])
        names[d][cbid] = info->functionName;  /* a static string of CUPTI's */
    atomic_fetch_add_explicit(&counts[d][cbid], 1, memory_order_relaxed);
}

static void write_counts(FILE *f, const char *label)
{
    unsigned long total = 0;
    for (int d = 0; d < NDOMAINS; d++)
        for (int i = 0; i < MAX_CBID; i++)
            total += atomic_load(&counts[d][i]);
    fprintf(f, "# %s total %lu\n", label, total);
    for (int d = 0; d < NDOMAINS; d++)
        for (int i = 0; i < MAX_CBID; i++) {
            unsigned long n = atomic_load(&counts[d][i]);
            if (n)
                fprintf(f, "%s %s %lu\n", domain_names[d], names[d][i] ? names[d][i] : "?", n);
        }
}

/* exported: append a snapshot of the counts, headed by `label`, to `path` */
int cupti_counter_dump(const char *path, const char *label)
{
    FILE *f = fopen(path, "a");
    if (!f)
        return -1;
    write_counts(f, label);
    return fclose(f);
}

static void at_exit(void)
{
    const char *path = getenv("CUPTI_COUNTER_OUT");
    char own[4096];
    if (!initialized)
        return;
    cuptiUnsubscribe(subscriber);  /* no callbacks while the table is written */
    const char *mark = path ? strstr(path, "%p") : NULL;
    if (mark && strlen(path) < sizeof(own) - 16) {  /* CUPTI_COUNTER_OUT=dir/%p.cupti */
        snprintf(own, sizeof(own), "%.*s%d%s", (int)(mark - path), path, (int)getpid(),
                 mark + 2);
        path = own;
    }
    if (path) {
        FILE *f = fopen(path, "w");
        if (f) {
            write_counts(f, "exit");
            fclose(f);
            return;
        }
    }
    write_counts(stderr, "exit");
}

int InitializeInjection(void)
{
    if (initialized)
        return 1;
    if (cuptiSubscribe(&subscriber, (CUpti_CallbackFunc)on_callback, NULL) != CUPTI_SUCCESS ||
        cuptiEnableDomain(1, subscriber, CUPTI_CB_DOMAIN_RUNTIME_API) != CUPTI_SUCCESS ||
        cuptiEnableDomain(1, subscriber, CUPTI_CB_DOMAIN_DRIVER_API) != CUPTI_SUCCESS) {
        fprintf(stderr, "cupti_counter: cannot subscribe (another CUPTI subscriber?)\n");
        return 0;
    }
    initialized = 1;
    atexit(at_exit);
    return 1;
}
