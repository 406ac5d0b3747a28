/* A libcupti for attaching --gpu-time on a machine without a GPU: the
 * functions cupti/gputime.c calls, answering as CUPTI does when it records,
 * so that the injection, the recording and its stop run for real. Each
 * cuptiActivityFlushAll hands the library one buffer with one kernel record
 * (named fake_attached_kernel, on the calling thread's clock) and the API
 * record of the runtime call that launched it, on the flushing thread.
 * With FAKE_CUPTI_SUBSCRIBED=1 in the program's environment, cuptiSubscribe
 * says another subscriber holds CUPTI (as when a profiler runs). With
 * FAKE_CUPTI_LOG=FILE, each activity kind switched on or off is appended to
 * FILE ("enable 10", "disable 10"), and the stop's unsubscribe ("unsubscribe 0"),
 * and each switch of the callback on cudaLaunchKernel ("tie-on 211", "tie-off 211"):
 * what a test of the recording's switches reads. The API record comes only
 * while CUPTI is asked for it (the RUNTIME kind, or cudaLaunchKernel's switch);
 * while the subscriber's callback on cudaLaunchKernel is on, each flush first
 * calls it at the launch's entry and exit, with the kernel's correlation id
 * (FAKE_CUPTI_TIES=N: for N launches, ids 7, 8, ..., at the first such flush).
 * A stand-in runtime may call fake_cupti_launch() inside its launch (as the
 * real runtime has CUPTI do): with the callback on, the subscriber's callback
 * is called there, at the entry and the exit, with a correlation id of its
 * own, and the next flush hands over that launch's kernel record
 * (fake_launched_kernel, its GPU time what the runtime said), each such
 * kernel's id and time appended to FAKE_CUPTI_KERNELS=FILE ("ID NS") as it
 * is handed over. FAKE_CUPTI_LAUNCHES_ONLY=1: no kernel but those.
 * FAKE_CUPTI_NO_CALLBACKS=1: cuptiEnableCallback refuses (an older CUPTI). With FAKE_CUPTI_FLUSH_MS=N,
 * each flush takes N ms (a flush under way when the program forks).
 * FAKE_CUPTI_WRITE_AFTER_FORCED=1: a forced flush (CUPTI_ACTIVITY_FLAG_FLUSH_FORCED)
 * writes into the buffer it handed back, after the library's callback returned,
 * as CUPTI may complete a record it handed back incomplete.
 * Detaching: cuptiGetVersion says FAKE_CUPTI_VERSION (else 130001, CUDA 13's);
 * cuptiEnableDomain on the runtime or driver domain has fake_cupti_launch()
 * call the subscriber at every launch's entry and exit ("domain-on 2",
 * "domain-off 2", by domain); cuptiFinalize forgets every subscriber, switch
 * and callback, as CUPTI's does, logged "finalize-exit" when called from the
 * subscriber's callback at a call's exit, "finalize-outside" otherwise; each
 * cuptiSubscribe is logged ("subscribe 0").
 *
 *   cc -shared -fPIC -o libcupti-fake.so fake_libcupti.c -I/usr/local/cuda/include */
#define _GNU_SOURCE
#include <cupti.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static int enabled;  /* kinds switched on since the last flush: a record to hand over */
static int runtime_kind, launch_api;  /* API records asked for: the kind, the launch's switch */
static int launch_tie;  /* the subscriber's callback on cudaLaunchKernel on */
static int domain_on;  /* the subscriber's callback on every call on (cuptiEnableDomain) */
static __thread int in_site = -1;  /* the callback site the subscriber is being called at */
static CUpti_CallbackFunc subscriber_callback;

/* kernels of launches tied since the last flush (fake_cupti_launch) */
#define MAX_LAUNCHED 65536
static struct { uint32_t correlation; uint64_t start, ns; } launched[MAX_LAUNCHED];
static int nlaunched;
static uint32_t next_correlation = 1000;
static pthread_mutex_t launched_lock = PTHREAD_MUTEX_INITIALIZER;
static __thread uint32_t launch_correlation;
static __thread uint64_t launch_data;

static void log_switch(const char *what, CUpti_ActivityKind kind)
{
    const char *path = getenv("FAKE_CUPTI_LOG");
    char line[32];
    if (!path)
        return;
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600), n;
    n = snprintf(line, sizeof line, "%s %d\n", what, (int)kind);
    if (fd >= 0 && write(fd, line, (size_t)n) != n)
        n = 0;
    if (fd >= 0)
        close(fd);
}

CUptiResult cuptiActivityEnable(CUpti_ActivityKind kind)
{
    log_switch("enable", kind);
    enabled++;
    runtime_kind |= kind == CUPTI_ACTIVITY_KIND_RUNTIME;
    return CUPTI_SUCCESS;
}
CUptiResult cuptiUnsubscribe(CUpti_SubscriberHandle h)
{
    (void)h;
    log_switch("unsubscribe", 0);
    subscriber_callback = NULL;
    launch_tie = 0;
    return CUPTI_SUCCESS;
}
CUptiResult cuptiActivityDisable(CUpti_ActivityKind kind)
{
    log_switch("disable", kind);
    if (kind == CUPTI_ACTIVITY_KIND_RUNTIME)
        runtime_kind = 0;
    return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityEnableRuntimeApi(CUpti_CallbackId cbid, uint8_t on)
{
    if (cbid == CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000)
        launch_api = on;
    return CUPTI_SUCCESS;
}

CUptiResult cuptiEnableCallback(uint32_t on, CUpti_SubscriberHandle h, CUpti_CallbackDomain d,
                                CUpti_CallbackId cbid)
{
    const char *refuse = getenv("FAKE_CUPTI_NO_CALLBACKS");
    (void)h;
    if (refuse && *refuse == '1')
        return CUPTI_ERROR_NOT_SUPPORTED;
    if (d == CUPTI_CB_DOMAIN_RUNTIME_API && cbid == CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000) {
        launch_tie = on != 0;
        log_switch(on ? "tie-on" : "tie-off", (CUpti_ActivityKind)cbid);
    }
    return CUPTI_SUCCESS;
}
CUptiResult cuptiEnableDomain(uint32_t on, CUpti_SubscriberHandle h, CUpti_CallbackDomain d)
{
    (void)h;
    if (d == CUPTI_CB_DOMAIN_RUNTIME_API || d == CUPTI_CB_DOMAIN_DRIVER_API) {
        domain_on = on != 0;
        log_switch(on ? "domain-on" : "domain-off", (CUpti_ActivityKind)d);
    }
    return CUPTI_SUCCESS;
}

CUptiResult cuptiGetVersion(uint32_t *version)
{
    const char *v = getenv("FAKE_CUPTI_VERSION");
    *version = v ? (uint32_t)atol(v) : 130001;
    return CUPTI_SUCCESS;
}

static CUpti_BuffersCallbackRequestFunc requested;
static CUpti_BuffersCallbackCompleteFunc completed;

CUptiResult cuptiFinalize(void)
{
    log_switch(in_site == CUPTI_API_EXIT ? "finalize-exit" : "finalize-outside", 0);
    subscriber_callback = NULL;
    launch_tie = domain_on = 0;
    enabled = runtime_kind = launch_api = 0;
    requested = NULL;
    completed = NULL;
    return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityEnableDriverApi(CUpti_CallbackId cbid, uint8_t on) { (void)cbid, (void)on; return CUPTI_SUCCESS; }
CUptiResult cuptiSetThreadIdType(CUpti_ActivityThreadIdType t) { (void)t; return CUPTI_SUCCESS; }
CUptiResult cuptiGetThreadIdType(CUpti_ActivityThreadIdType *t) { *t = CUPTI_ACTIVITY_THREAD_ID_TYPE_DEFAULT; return CUPTI_SUCCESS; }
CUptiResult cuptiActivityFlushPeriod(uint32_t ms) { (void)ms; return CUPTI_SUCCESS; }
CUptiResult cuptiActivityGetNumDroppedRecords(CUcontext c, uint32_t s, size_t *n) { (void)c, (void)s; *n = 0; return CUPTI_SUCCESS; }
CUptiResult cuptiUnsubscribe(CUpti_SubscriberHandle h);

CUptiResult cuptiSubscribe(CUpti_SubscriberHandle *h, CUpti_CallbackFunc f, void *d)
{
    const char *busy = getenv("FAKE_CUPTI_SUBSCRIBED");
    (void)d;
    log_switch("subscribe", 0);
    *h = (CUpti_SubscriberHandle)1;
    if (!(busy && *busy == '1'))
        subscriber_callback = f;
    return busy && *busy == '1' ? CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED : CUPTI_SUCCESS;
}

CUptiResult cuptiGetCallbackName(CUpti_CallbackDomain d, uint32_t cbid, const char **name)
{
    if (d == CUPTI_CB_DOMAIN_RUNTIME_API && cbid == CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000) {
        *name = "cudaLaunchKernel_v7000";
        return CUPTI_SUCCESS;
    }
    return CUPTI_ERROR_INVALID_PARAMETER;
}

CUptiResult cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc r,
                                           CUpti_BuffersCallbackCompleteFunc c)
{
    requested = r;
    completed = c;
    return CUPTI_SUCCESS;
}

/* the buffer: `n` records, each a CUPTI struct in a slot of one size */
union fake_record {
    CUpti_ActivityKernel10 kernel;
    CUpti_ActivityAPI api;
};
struct fake_buffer {
    size_t n;
    union fake_record records[];
};

CUptiResult cuptiActivityGetNextRecord(uint8_t *buffer, size_t valid, CUpti_Activity **record)
{
    struct fake_buffer *b = (struct fake_buffer *)buffer;
    size_t next = *record ? (size_t)((union fake_record *)*record - b->records) + 1 : 0;
    (void)valid;
    if (next >= b->n)
        return CUPTI_ERROR_MAX_LIMIT_REACHED;
    *record = (CUpti_Activity *)&b->records[next];
    return CUPTI_SUCCESS;
}

static uint64_t realtime_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

CUptiResult cuptiGetTimestamp(uint64_t *timestamp)
{
    *timestamp = realtime_ns();
    return CUPTI_SUCCESS;
}

/* the stand-in runtime's launch calls this at its entry (CUPTI_API_ENTER) and
 * exit (CUPTI_API_EXIT), `ns` the GPU time its kernel is to have */
void fake_cupti_launch(int site, uint64_t ns)
{
    if (!(launch_tie || domain_on) || !subscriber_callback)
        return;
    if (site == CUPTI_API_ENTER) {
        pthread_mutex_lock(&launched_lock);
        launch_correlation = next_correlation++;
        pthread_mutex_unlock(&launched_lock);
        launch_data = 0;
    }
    CUpti_CallbackData cb = {.callbackSite = (CUpti_ApiCallbackSite)site,
                             .functionName = "cudaLaunchKernel",
                             .correlationData = &launch_data,
                             .correlationId = launch_correlation};
    int tied = launch_tie;
    in_site = site;
    subscriber_callback(NULL, CUPTI_CB_DOMAIN_RUNTIME_API,
                        CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, &cb);
    in_site = -1;
    if (site != CUPTI_API_EXIT || !tied)
        return;
    pthread_mutex_lock(&launched_lock);
    if (nlaunched < MAX_LAUNCHED) {
        launched[nlaunched].correlation = launch_correlation;
        launched[nlaunched].start = realtime_ns() + 1000;
        launched[nlaunched].ns = ns;
        nlaunched++;
    }
    pthread_mutex_unlock(&launched_lock);
}

/* each kernel of a tied launch handed over: "ID NS" appended to FAKE_CUPTI_KERNELS */
static void log_kernel(uint32_t correlation, uint64_t ns)
{
    const char *path = getenv("FAKE_CUPTI_KERNELS");
    char line[48];
    if (!path)
        return;
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600), n;
    n = snprintf(line, sizeof line, "%u %llu\n", correlation, (unsigned long long)ns);
    if (fd >= 0 && write(fd, line, (size_t)n) != n)
        n = 0;
    if (fd >= 0)
        close(fd);
}

CUptiResult cuptiActivityFlushAll(uint32_t flag)
{
    uint8_t *buffer;
    size_t size, max;
    const char *slow = getenv("FAKE_CUPTI_FLUSH_MS"), *only = getenv("FAKE_CUPTI_LAUNCHES_ONLY");
    if (slow)
        usleep((useconds_t)atoi(slow) * 1000);
    if (!requested || !completed)
        return CUPTI_SUCCESS;
    int legacy = enabled && !(only && *only == '1');
    enabled = 0;
    pthread_mutex_lock(&launched_lock);
    int pending = nlaunched;
    pthread_mutex_unlock(&launched_lock);
    const char *late = getenv("FAKE_CUPTI_WRITE_AFTER_FORCED");
    int write_late = (flag & CUPTI_ACTIVITY_FLAG_FLUSH_FORCED) && late && *late == '1';
    if (!legacy && !pending && !write_late)
        return CUPTI_SUCCESS;
    static int tied;
    const char *many = getenv("FAKE_CUPTI_TIES");
    long launches = many && !tied ? atol(many) : 1;
    for (long n = 0; legacy && launch_tie && subscriber_callback && n < launches; n++) {
        /* the launch's entry and exit, as CUPTI calls them */
        uint64_t start = 0;
        CUpti_CallbackData cb = {.functionName = "cudaLaunchKernel", .correlationData = &start,
                                 .correlationId = (uint32_t)(7 + n)};
        for (int site = CUPTI_API_ENTER; site <= CUPTI_API_EXIT; site++) {
            cb.callbackSite = (CUpti_ApiCallbackSite)site;
            subscriber_callback(NULL, CUPTI_CB_DOMAIN_RUNTIME_API,
                                CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, &cb);
        }
        tied = 1;
    }
    requested(&buffer, &size, &max);
    if (!buffer || size < sizeof(struct fake_buffer) + 2 * sizeof(union fake_record))
        return CUPTI_SUCCESS;
    struct fake_buffer *b = (struct fake_buffer *)buffer;
    size_t room = (size - sizeof *b) / sizeof(union fake_record);
    memset(b, 0, sizeof *b);
    uint64_t now = realtime_ns();
    if (legacy) {
        CUpti_ActivityKernel10 *k = &b->records[b->n++].kernel;
        memset(k, 0, sizeof *k);
        k->kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
        k->start = now - 2000;
        k->end = now - 1000;
        k->correlationId = 7;
        k->streamId = 3;
        k->name = "fake_attached_kernel";
    }
    if (legacy && (runtime_kind || launch_api)) {
        CUpti_ActivityAPI *api = &b->records[b->n++].api;
        memset(api, 0, sizeof *api);
        api->kind = CUPTI_ACTIVITY_KIND_RUNTIME;
        api->cbid = CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000;
        api->start = now - 5000;
        api->end = now - 4000;
        api->correlationId = 7;
        api->threadId = (uint32_t)syscall(SYS_gettid);
    }
    pthread_mutex_lock(&launched_lock);
    int take = 0;
    for (; take < nlaunched && b->n < room; take++) {
        CUpti_ActivityKernel10 *k = &b->records[b->n++].kernel;
        memset(k, 0, sizeof *k);
        k->kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
        k->start = launched[take].start;
        k->end = launched[take].start + launched[take].ns;
        k->correlationId = launched[take].correlation;
        k->streamId = 3;
        k->name = "fake_launched_kernel";
        log_kernel(launched[take].correlation, launched[take].ns);
    }
    memmove(launched, launched + take, (size_t)(nlaunched - take) * sizeof *launched);
    nlaunched -= take;
    pthread_mutex_unlock(&launched_lock);
    completed(NULL, 0, buffer, size, sizeof *b + b->n * sizeof(union fake_record));
    if (write_late)
        memset(buffer, 0xab, 64);  /* a record completed after the hand-back */
    return CUPTI_SUCCESS;
}
