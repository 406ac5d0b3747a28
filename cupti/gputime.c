/* cudaprobe's GPU-time library: loaded into `cudaprobe trace --gpu-time --
 * COMMAND` with CUDA_INJECTION64_PATH (the CUDA driver calls
 * InitializeInjection() at cuInit), it turns on CUPTI's activity records for
 * kernels, copies and memsets, and for the runtime and driver calls that made
 * them, and writes them in the compact form of gputime.h to
 * $CUDAPROBE_GPUTIME_DIR/gputime.<pid>.bin. cudaprobe reads the files when
 * the command has exited and joins each GPU record to its uprobe row through
 * the API record of the same correlation id (docs/gputime.md says why a file).
 *
 * Cost on the program's threads: CUPTI's own record keeping; this library
 * runs only when CUPTI hands back a buffer (on CUPTI's thread or ours, each
 * FLUSH_PERIOD_MS, or at exit), never per call. Timestamps: ours (CLOCK_MONOTONIC, the clock of
 * bpf_ktime_get_ns) through cuptiActivityRegisterTimestampCallback; CUPTI
 * maps GPU timestamps onto it. Thread ids: the kernel's (gettid), through
 * cuptiSetThreadIdType, as the uprobe rows have them.
 *
 * Never harms the program: libcupti is dlopen'ed ($CUDAPROBE_CUPTI, else by
 * soname), so a machine without it still loads this library; any failure is
 * written as a STATUS record and InitializeInjection returns as on success.
 * In a process already running (`--pid`), cudaprobe loads it through
 * inject_stub.S and attach.c starts and stops the same recording into a memfd
 * (gputime_record_to, gputime_stop_recording).
 *
 *   cc -O2 -shared -fPIC -o gputime.so cupti/gputime.c -I/usr/local/cuda/include -ldl */
#define _GNU_SOURCE
#include <cupti.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "gputime.h"
#include "inject.h"  /* FLUSH_PERIOD_MS, shared with attach.c's watcher */

#define BUFFER_BYTES (2u << 20)   /* one CUPTI activity buffer (a thread's records) */
#define OUT_RECORDS 4096          /* records converted before one write() */
#define MAX_CBID 4096
#define MAX_NAMES 65536           /* kernel names kept for interning */

static struct {
    CUptiResult (*enable)(CUpti_ActivityKind);
    CUptiResult (*register_callbacks)(CUpti_BuffersCallbackRequestFunc,
                                      CUpti_BuffersCallbackCompleteFunc);
    CUptiResult (*next_record)(uint8_t *, size_t, CUpti_Activity **);
    CUptiResult (*flush_all)(uint32_t);
    CUptiResult (*flush_period)(uint32_t);
    CUptiResult (*timestamp_callback)(CUpti_TimestampCallbackFunc);
    CUptiResult (*dropped)(CUcontext, uint32_t, size_t *);
    CUptiResult (*callback_name)(CUpti_CallbackDomain, uint32_t, const char **);
    CUptiResult (*thread_id_type)(CUpti_ActivityThreadIdType);
    CUptiResult (*enable_runtime_api)(CUpti_CallbackId, uint8_t);  /* fine-grained, may be NULL */
    CUptiResult (*enable_driver_api)(CUpti_CallbackId, uint8_t);
    CUptiResult (*disable)(CUpti_ActivityKind);  /* attach: may be NULL */
    CUptiResult (*subscribe)(CUpti_SubscriberHandle *, CUpti_CallbackFunc, void *);
    CUptiResult (*unsubscribe)(CUpti_SubscriberHandle);
    CUptiResult (*get_thread_id_type)(CUpti_ActivityThreadIdType *);
    CUptiResult (*timestamp)(uint64_t *);  /* cuptiGetTimestamp: CUPTI's clock now; may be NULL */
    CUptiResult (*enable_callback)(uint32_t, CUpti_SubscriberHandle, CUpti_CallbackDomain,
                                   CUpti_CallbackId);  /* may be NULL */
    CUptiResult (*enable_domain)(uint32_t, CUpti_SubscriberHandle,
                                 CUpti_CallbackDomain);  /* may be NULL */
    CUptiResult (*finalize)(void);  /* may be NULL */
    CUptiResult (*version)(uint32_t *);  /* cuptiGetVersion; may be NULL */
} cupti;

/* the GPU work's records: kernels, copies, memsets (CONCURRENT_KERNEL, not KERNEL:
 * KERNEL serialises the program's kernels) */
static const CUpti_ActivityKind work_kinds[] = {
    CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
    CUPTI_ACTIVITY_KIND_MEMSET};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;  /* the file and the tables */
static int out_fd = -1;
static char out_dir[4096];  /* $CUDAPROBE_GPUTIME_DIR, read once (getenv is not thread-safe) */
static pid_t out_pid;
static int clock_kind = GPUTIME_CLOCK_REALTIME;
static int system_tids;  /* CUPTI gives gettid() in API records (not pthread_self()) */
static int api_records = GPUTIME_API_UNKNOWN;  /* which calls CUPTI records (the header says) */
static int initialized;  /* launched: InitializeInjection ran */
static int recording;  /* attach: between gputime_record_to and gputime_stop_recording */
/* attach: whether CUPTI leaves the process after the stop (inject.h's DETACH_*),
 * in the control block cudaprobe reads (gputime_detach_word) */
static uint32_t detach_here;
static uint32_t *detach = &detach_here;
static int keep_cupti;  /* this recording's stop leaves CUPTI in (GPUTIME_MODE_KEEP_CUPTI) */
#define FINALIZE_WAIT_MS 2000  /* a new attach waits this long for a finalize under way */
/* gputime_flush against the exit: once at_exit has run, CUPTI is called no more
 * from our threads (libcupti's own destructors may run next) */
static pthread_mutex_t flush_lock = PTHREAD_MUTEX_INITIALIZER;
static int exiting;
/* A forced flush (the stop, the exit) hands back buffers whose records are not
 * all complete, and CUPTI may go on writing into those: one freed and reused
 * would have CUPTI write into the program's heap. From a forced flush on, until
 * a new recording asks for new buffers, a buffer handed back is not freed but
 * left to CUPTI (2 MiB a thread that made records, at each stop), LEFT_NS at
 * least: a later recording frees those left that long before it (CUPTI
 * completes a kernel's record once the kernel has run), so that stop after stop
 * holds about one stop's buffers; past LEFT_MAX, one is never freed. */
#define LEFT_MAX 64
#define LEFT_NS 30000000000ull
static int keep_handed_back;
static struct { void *buffer; uint64_t at; } left[LEFT_MAX];  /* under lock */
static size_t n_left;
/* per domain (0 driver, 1 runtime) and cbid: 0 not seen, 1 kept (its name written), 2 not kept */
static unsigned char api_kept[2][MAX_CBID];
/* GPUTIME_API_CALLS: each tied call's record, made at its exit by on_call(), kept
 * in one of two buffers until the next flush (write_ties), which takes the
 * other. on_call() takes tie_lock alone, never `lock`, and never waits on a
 * write: CUPTI calls it from inside the program's CUDA calls. A buffer holds
 * a flush period of about 500,000 tied calls a second; past that a call's
 * record is dropped and counted (a DROPPED record). */
#define TIE_RECORDS (1u << 18)
static pthread_mutex_t tie_lock = PTHREAD_MUTEX_INITIALIZER;
static CUpti_SubscriberHandle subscriber;  /* attach: ours, held while recording, and after
                                              the stop until CUPTI is finalized */
static struct gputime_record tie_buffers[2][TIE_RECORDS];  /* (untouched pages cost nothing) */
static struct gputime_record *ties = tie_buffers[0];  /* the one on_call() appends to */
static size_t n_ties, ties_dropped;
/* paused (gputime_pause): on_call() ties nothing, CUPTI's callbacks left on */
static int ties_paused;
static __thread uint32_t tie_tid;  /* the calling thread's gettid(), once (0 again in a forked child) */
static const char *names[MAX_NAMES];  /* open addressing on CUPTI's name pointers */
static uint32_t name_ids[MAX_NAMES];
static uint32_t next_name_id = 1;

static uint64_t now_ns(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t CUPTIAPI monotonic_ns(void) { return now_ns(CLOCK_MONOTONIC); }

static void write_header(void);

static void write_all(const void *data, size_t n)
{
    const char *p = data;
    while (n) {
        ssize_t w = write(out_fd, p, n);
        if (w <= 0)
            return;  /* disk full: the records are lost; cudaprobe sees a short file */
        p += w;
        n -= (size_t)w;
    }
}

/* the file of this process (a forked child gets its own), opened on first use; under lock */
static int open_output(void)
{
    if (out_fd >= 0 && out_pid == getpid())
        return 1;
    if (!out_dir[0])
        return 0;
    char path[sizeof out_dir + 32];
    out_pid = getpid();
    snprintf(path, sizeof path, "%s/gputime.%d.bin", out_dir, (int)out_pid);
    out_fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (out_fd < 0)
        return 0;
    write_header();
    return 1;
}

/* CLOCK_MONOTONIC less CUPTI's own clock, whose records an attached recording
 * keeps (no timestamp callback there): CUPTI's clock read between two reads of
 * ours, the closest of a few tries. Where CUPTI cannot say, CLOCK_REALTIME's
 * offset, the clock CUPTI's is meant to follow. */
static int64_t cupti_to_monotonic_ns(void)
{
    int64_t best = (int64_t)(now_ns(CLOCK_MONOTONIC) - now_ns(CLOCK_REALTIME));
    uint64_t best_gap = UINT64_MAX;
    for (int i = 0; cupti.timestamp && i < 5; i++) {
        uint64_t c = 0, before = now_ns(CLOCK_MONOTONIC);
        CUptiResult res = cupti.timestamp(&c);
        uint64_t after = now_ns(CLOCK_MONOTONIC);
        if (res != CUPTI_SUCCESS || !c)
            break;
        if (after - before < best_gap) {
            best_gap = after - before;
            best = (int64_t)(before + (after - before) / 2 - c);
        }
    }
    return best;
}

/* the file's header, as the recording is set up now; under lock */
static void write_header(void)
{
    struct gputime_header h = {.version = GPUTIME_VERSION, .pid = (uint32_t)out_pid,
                               .clock = (uint32_t)clock_kind,
                               .record_size = sizeof(struct gputime_record)};
    memcpy(h.magic, GPUTIME_MAGIC, sizeof h.magic);
    h.realtime_to_monotonic_ns = clock_kind == GPUTIME_CLOCK_REALTIME ? cupti_to_monotonic_ns() : 0;
    h.system_tids = (uint32_t)system_tids;
    h.api_records = (uint32_t)api_records;
    write_all(&h, sizeof h);
}

/* a record followed by text, NUL-padded to 8 bytes; under lock */
static void write_text(struct gputime_record *r, const char *text)
{
    char buf[sizeof *r + 4096] = {0};
    size_t len = strnlen(text, 4096 - 1) + 1;
    size_t size = sizeof *r + ((len + 7) & ~(size_t)7);
    r->size = (uint16_t)size;
    memcpy(buf, r, sizeof *r);
    memcpy(buf + sizeof *r, text, len - 1);
    write_all(buf, size);
}

static void write_status(const char *why)
{
    pthread_mutex_lock(&lock);
    if (open_output()) {
        struct gputime_record r = {.type = GPUTIME_STATUS};
        write_text(&r, why);
    }
    pthread_mutex_unlock(&lock);
}

/* the slot of CUPTI's name pointer: where it is, or the empty one it would take
 * (-1: the table is full); under lock */
static long name_slot(const char *name)
{
    size_t slot = ((uintptr_t)name >> 3) % MAX_NAMES;
    for (size_t probes = 0; probes < MAX_NAMES; probes++, slot = (slot + 1) % MAX_NAMES)
        if (names[slot] == name || !names[slot])
            return (long)slot;
    return -1;
}

/* the kernel name's id, its NAME record written the first time (`pending` records
 * are written before it, so that the name comes before the kernels that use it;
 * returns how many are still pending); under lock */
static size_t name_id(const char *name, uint32_t *id, struct gputime_record *pending, size_t n)
{
    long slot = name ? name_slot(name) : -1;
    *id = 0;  /* no name, or the table full: the kernel goes unnamed */
    if (slot < 0)
        return n;
    if (!names[slot]) {
        if (n)
            write_all(pending, n * sizeof *pending);
        n = 0;
        names[slot] = name;
        name_ids[slot] = next_name_id++;
        struct gputime_record r = {.type = GPUTIME_NAME, .name_id = name_ids[slot]};
        write_text(&r, name);
    }
    *id = name_ids[slot];
    return n;
}

/* whether a call of CUPTI's name `name` queues GPU work: it launches, copies or sets memory */
static int name_is_kept(const char *name)
{
    return name && (strstr(name, "Launch") || strstr(name, "Memcpy") || strstr(name, "Memset"));
}

/* whether API records of (domain, cbid) are kept (CUPTI may record others: GPUTIME_API_ALL) */
static int api_is_kept(CUpti_ActivityKind kind, uint32_t cbid)
{
    int d = kind == CUPTI_ACTIVITY_KIND_RUNTIME;
    if (cbid >= MAX_CBID)
        return 0;
    if (!api_kept[d][cbid]) {
        const char *name = NULL;
        if (cupti.callback_name)
            cupti.callback_name(d ? CUPTI_CB_DOMAIN_RUNTIME_API : CUPTI_CB_DOMAIN_DRIVER_API,
                                cbid, &name);
        int keep = name_is_kept(name);
        api_kept[d][cbid] = keep ? 1 : 2;
        if (keep) {
            struct gputime_record r = {.type = GPUTIME_FUNCTION, .cbid = cbid,
                                       .domain = (uint8_t)kind};
            write_text(&r, name);
        }
    }
    return api_kept[d][cbid] == 1;
}

/* the tied calls' records so far into the file, each function's FUNCTION record
 * before its first; not under lock or tie_lock */
static void write_ties(void)
{
    pthread_mutex_lock(&lock);
    pthread_mutex_lock(&tie_lock);
    struct gputime_record *full = ties;
    size_t n = n_ties, dropped = ties_dropped;
    ties = full == tie_buffers[0] ? tie_buffers[1] : tie_buffers[0];
    n_ties = ties_dropped = 0;
    pthread_mutex_unlock(&tie_lock);
    if ((n || dropped) && open_output()) {
        for (size_t i = 0; i < n; i++)
            api_is_kept((CUpti_ActivityKind)full[i].domain, full[i].cbid);
        write_all(full, n * sizeof *full);
        if (dropped) {
            struct gputime_record r = {.type = GPUTIME_DROPPED, .size = sizeof r,
                                       .bytes = dropped};
            write_all(&r, sizeof r);
        }
    }
    pthread_mutex_unlock(&lock);
}

/* CUPTI's callback at the entry and exit of each launch, copy and memset call
 * (GPUTIME_API_CALLS), on the calling thread: its start kept in the call's
 * correlationData at the entry, its record made at the exit, in CUPTI's clock
 * (that of the GPU records) and with the kernel's thread id. The cost to the
 * program: two reads of CUPTI's clock and an append under a lock that nothing
 * holds longer than a swap of buffers (the thread's id is asked for once). */
static void finalize_at_exit(CUpti_CallbackDomain domain, const CUpti_CallbackData *cb);

static void CUPTIAPI on_call(void *data, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                             const void *info)
{
    const CUpti_CallbackData *cb = info;
    uint64_t now = 0;
    (void)data;
    if (__atomic_load_n(detach, __ATOMIC_ACQUIRE) != DETACH_NONE) {
        finalize_at_exit(domain, cb);
        return;
    }
    if ((domain != CUPTI_CB_DOMAIN_RUNTIME_API && domain != CUPTI_CB_DOMAIN_DRIVER_API) || !cb ||
        __atomic_load_n(&ties_paused, __ATOMIC_RELAXED))
        return;
    if (cupti.timestamp)
        cupti.timestamp(&now);
    if (cb->callbackSite == CUPTI_API_ENTER) {
        if (cb->correlationData)
            *cb->correlationData = now;
        return;
    }
    struct gputime_record r = {
        .type = GPUTIME_API, .size = sizeof r, .correlation = cb->correlationId,
        .start = cb->correlationData && *cb->correlationData ? *cb->correlationData : now,
        .end = now, .tid = tie_tid ? tie_tid : (tie_tid = (uint32_t)syscall(SYS_gettid)),
        .cbid = cbid,
        .domain = (uint8_t)(domain == CUPTI_CB_DOMAIN_RUNTIME_API ? CUPTI_ACTIVITY_KIND_RUNTIME
                                                                  : CUPTI_ACTIVITY_KIND_DRIVER)};
    pthread_mutex_lock(&tie_lock);
    if (n_ties < TIE_RECORDS)
        ties[n_ties++] = r;
    else
        ties_dropped++;
    pthread_mutex_unlock(&tie_lock);
}

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records)
{
    *buffer = aligned_alloc(8, BUFFER_BYTES);  /* NULL: CUPTI drops and counts */
    *size = *buffer ? BUFFER_BYTES : 0;
    *max_records = 0;
}

/* the fields every kernel, memcpy and memset record has, by the same names */
#define GPU_WORK(r, kind, a) do { \
        (r).type = (kind); (r).correlation = (a)->correlationId; \
        (r).start = (a)->start; (r).end = (a)->end; (r).device = (a)->deviceId; \
        (r).context = (a)->contextId; (r).stream = (a)->streamId; \
    } while (0)

/* a buffer handed back by a forced flush, left to CUPTI a while; under lock */
static void leave_to_cupti(void *buffer)
{
    if (n_left < LEFT_MAX) {
        left[n_left].buffer = buffer;
        left[n_left++].at = monotonic_ns();
    }
}

/* the buffers left to CUPTI LEFT_NS before `now` freed; under lock */
static void free_left(uint64_t now)
{
    size_t kept = 0;
    for (size_t i = 0; i < n_left; i++) {
        if (now - left[i].at >= LEFT_NS)
            free(left[i].buffer);
        else
            left[kept++] = left[i];
    }
    n_left = kept;
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream_id, uint8_t *buffer,
                                      size_t size, size_t valid)
{
    static struct gputime_record out[OUT_RECORDS];  /* under lock */
    CUpti_Activity *a = NULL;
    size_t n = 0, dropped = 0;
    pthread_mutex_lock(&lock);
    if (!open_output())
        goto done;
    while (valid && cupti.next_record(buffer, valid, &a) == CUPTI_SUCCESS) {
        struct gputime_record r = {0};
        r.size = sizeof r;
        switch (a->kind) {
        case CUPTI_ACTIVITY_KIND_KERNEL:
        case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
            CUpti_ActivityKernel10 *k = (CUpti_ActivityKernel10 *)a;
            GPU_WORK(r, GPUTIME_KERNEL, k);
            n = name_id(k->name, &r.name_id, out, n);
            break;
        }
        case CUPTI_ACTIVITY_KIND_MEMCPY: {
            CUpti_ActivityMemcpy6 *m = (CUpti_ActivityMemcpy6 *)a;
            GPU_WORK(r, GPUTIME_MEMCPY, m);
            r.bytes = m->bytes;
            r.copy_kind = m->copyKind;
            break;
        }
        case CUPTI_ACTIVITY_KIND_MEMSET: {
            CUpti_ActivityMemset4 *m = (CUpti_ActivityMemset4 *)a;
            GPU_WORK(r, GPUTIME_MEMSET, m);
            r.bytes = m->bytes;
            break;
        }
        case CUPTI_ACTIVITY_KIND_RUNTIME:
        case CUPTI_ACTIVITY_KIND_DRIVER: {
            CUpti_ActivityAPI *api = (CUpti_ActivityAPI *)a;
            if (n && !api_kept[api->kind == CUPTI_ACTIVITY_KIND_RUNTIME][api->cbid % MAX_CBID]) {
                write_all(out, n * sizeof *out);  /* its FUNCTION record may come first */
                n = 0;
            }
            if (!api_is_kept(api->kind, api->cbid))
                continue;
            r.type = GPUTIME_API;
            r.correlation = api->correlationId;
            r.start = api->start;
            r.end = api->end;
            r.tid = api->threadId;
            r.cbid = api->cbid;
            r.domain = (uint8_t)api->kind;
            break;
        }
        default:
            continue;
        }
        out[n++] = r;
        if (n == OUT_RECORDS) {
            write_all(out, sizeof out);
            n = 0;
        }
    }
    if (n)
        write_all(out, n * sizeof *out);
    if (cupti.dropped && cupti.dropped(ctx, stream_id, &dropped) == CUPTI_SUCCESS && dropped) {
        struct gputime_record r = {.type = GPUTIME_DROPPED, .size = sizeof r, .bytes = dropped};
        write_all(&r, sizeof r);
    }
done:
    if (__atomic_load_n(&keep_handed_back, __ATOMIC_ACQUIRE)) {
        leave_to_cupti(buffer);
        buffer = NULL;
    }
    pthread_mutex_unlock(&lock);
    free(buffer);
    (void)size;
}

static void at_exit(void)
{
    pthread_mutex_lock(&flush_lock);
    exiting = 1;
    __atomic_store_n(&keep_handed_back, 1, __ATOMIC_RELEASE);
    if (initialized || recording)
        cupti.flush_all(1);  /* CUPTI_ACTIVITY_FLAG_FLUSH_FORCED: incomplete records too */
    pthread_mutex_unlock(&flush_lock);
}

/* at_exit, once, launched or at the first attach: after a stop it flushes
 * nothing (a flush would bring a finalized CUPTI back) */
static void register_exit_handler(void)
{
    atexit(at_exit);
}

/* Every buffer whose records are all complete handed back now, full or not (flag
 * 0). CUPTI's own periodic flush (cuptiActivityFlushPeriod) hands back only full
 * buffers, and it keeps one per thread: a thread launching a few kernels a second
 * would have its records come minutes late, or at its exit only, where `serve`
 * counts them as they come. Called each FLUSH_PERIOD_MS from our thread (the
 * flusher at cuInit, attach.c's watcher), as PyTorch's own CUPTI monitor does. */
__attribute__((visibility("hidden")))
void gputime_flush(void)
{
    pthread_mutex_lock(&flush_lock);
    if (!exiting && (initialized || recording) && cupti.flush_all) {
        if (api_records == GPUTIME_API_CALLS)
            write_ties();  /* a call's tie before its GPU record, mostly */
        cupti.flush_all(0);
    }
    pthread_mutex_unlock(&flush_lock);
}

/* A fork while our threads hold a lock (the flusher in flush_all, CUPTI's
 * thread in buffer_completed) would leave it held for ever in the child, whose
 * exit (at_exit) would then wait on it. The child, where those threads do not
 * exist, makes both afresh. (Waiting for them in the parent instead could
 * deadlock the fork: CUPTI's thread may hold CUDA's locks in buffer_completed,
 * which CUDA's own fork handlers take after ours.) */
static void fork_child(void)
{
    pthread_mutex_init(&lock, NULL);
    pthread_mutex_init(&flush_lock, NULL);
    pthread_mutex_init(&tie_lock, NULL);
    n_ties = ties_dropped = 0;  /* the parent's calls */
    tie_tid = 0;  /* this thread, the child's only one, has a tid of its own */
    /* a detach asked of the parent's CUPTI is not the child's to do: a CUDA call
     * in a forked child (failing as CUDA does there) must not finalize a CUPTI
     * whose threads stayed in the parent */
    uint32_t asked = DETACH_ASKED;
    __atomic_compare_exchange_n(detach, &asked, DETACH_KEPT, 0, __ATOMIC_ACQ_REL,
                                __ATOMIC_ACQUIRE);
}

static void register_fork_handlers(void)
{
    pthread_atfork(NULL, NULL, fork_child);
}

static void hold_locks_over_fork(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, register_fork_handlers);
}

/* a thread of ours, taking no signal (the program's go to its own threads) */
__attribute__((visibility("hidden")))
int gputime_start_thread(void *(*run)(void *))
{
    sigset_t all, old;
    pthread_attr_t attr;
    pthread_t thread;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int err = pthread_create(&thread, &attr, run, NULL);
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return err;
}

/* launched (InitializeInjection): CUPTI's buffers handed back each FLUSH_PERIOD_MS
 * until the exit; the process's records are read as they come (`serve`) */
static void *flusher(void *arg)
{
    struct timespec period = {FLUSH_PERIOD_MS / 1000, (FLUSH_PERIOD_MS % 1000) * 1000000L};
    (void)arg;
    prctl(PR_SET_NAME, "cudaprobe-gpu");
    for (;;) {
        nanosleep(&period, NULL);
        gputime_flush();
    }
    return NULL;
}

static void *symbol(void *lib, const char *name, int *missing)
{
    void *f = dlsym(lib, name);
    if (!f)
        *missing = 1;
    return f;
}

/* `flip` (domain, cbid, on) for every call that launches, copies or sets
 * memory: every cbid CUPTI has a name for, up to MAX_CBID (a libcupti newer
 * than the headers may have more than CUPTI_*_TRACE_CBID_SIZE). 1: done; 0:
 * one was refused, or no name matched. */
static int switch_kept(CUptiResult (*flip)(CUpti_CallbackDomain, CUpti_CallbackId, uint8_t),
                       uint8_t on)
{
    static const CUpti_CallbackDomain domains[] = {CUPTI_CB_DOMAIN_RUNTIME_API,
                                                   CUPTI_CB_DOMAIN_DRIVER_API};
    int switched = 0;
    for (size_t d = 0; d < sizeof domains / sizeof *domains; d++)
        for (uint32_t cbid = 1; cbid < MAX_CBID; cbid++) {
            const char *name = NULL;
            if (cupti.callback_name(domains[d], cbid, &name) != CUPTI_SUCCESS ||
                !name_is_kept(name))
                continue;
            if (flip(domains[d], cbid, on) != CUPTI_SUCCESS)
                return 0;
            switched++;
        }
    return switched > 0;
}

static CUptiResult flip_api_records(CUpti_CallbackDomain d, CUpti_CallbackId cbid, uint8_t on)
{
    return (d == CUPTI_CB_DOMAIN_RUNTIME_API ? cupti.enable_runtime_api
                                             : cupti.enable_driver_api)(cbid, on);
}

/* API records for those calls only, through CUPTI's fine-grained switches
 * (CUPTI 12.x on): with the whole RUNTIME and DRIVER kinds CUPTI builds a
 * record for every call (PyTorch makes several cudaGetDevice,
 * cudaStreamIsCapturing, cuCtxGetCurrent... per op) that api_is_kept() then
 * throws away. 0: the switches are missing or refused one, or no name matched
 * (the caller enables the whole kinds, which override whatever was switched
 * on here). */
static int enable_kept_apis(uint8_t on)
{
    if (!cupti.enable_runtime_api || !cupti.enable_driver_api)
        return 0;
    return switch_kept(flip_api_records, on);
}

/* CUPTI's callbacks on those calls on or off, for on_call()
 * (GPUTIME_API_CALLS). 1: done; 0: the switch is missing or refused one (the
 * caller turns them off). */
static CUptiResult flip_callback(CUpti_CallbackDomain d, CUpti_CallbackId cbid, uint8_t on)
{
    return cupti.enable_callback(on, subscriber, d, cbid);
}

static int switch_call_ties(uint8_t on)
{
    if (!cupti.enable_callback || !subscriber)
        return 0;
    return switch_kept(flip_callback, on);
}

/* CUPTI's buffers ours and its records on: kernels, copies, memsets, and the API
 * records of the calls that queued them (api_records says how those were chosen).
 * Attached (CUDA already running): the switches for single API functions
 * (cuptiActivityEnableRuntimeApi) give no API record then (seen on an H100,
 * CUDA 13, driver 580), so the whole RUNTIME and DRIVER kinds, whose records
 * of functions not kept the library drops (api_kept); or, `mode`
 * GPUTIME_MODE_WORK (an attach whose records are joined to no call: serve,
 * which counts kernels), no API record at all, CUPTI's dearest part on a
 * launch-bound program; or GPUTIME_MODE_CALL_TIES (serve --duty --py-stacks),
 * no API record kind either, the calls that queue work tied to it by CUPTI's
 * callbacks on those functions alone (on_call); where CUPTI refuses those,
 * the work alone (GPUTIME_API_NONE, which the file's header says). */
static CUptiResult enable_activity(int attached, int mode)
{
    CUptiResult res = cupti.register_callbacks(buffer_requested, buffer_completed);
    for (size_t i = 0; res == CUPTI_SUCCESS && i < sizeof work_kinds / sizeof *work_kinds; i++)
        res = cupti.enable(work_kinds[i]);
    if (res == CUPTI_SUCCESS && mode == GPUTIME_MODE_WORK) {
        api_records = GPUTIME_API_NONE;
    } else if (res == CUPTI_SUCCESS && mode == GPUTIME_MODE_CALL_TIES) {
        /* where CUPTI has no such callbacks, the work alone: never every call's record */
        api_records = switch_call_ties(1) ? GPUTIME_API_CALLS : GPUTIME_API_NONE;
        if (api_records == GPUTIME_API_NONE)
            switch_call_ties(0);  /* refused part way: what went on, off again */
    } else {
        if (res == CUPTI_SUCCESS && !attached && enable_kept_apis(1))
            api_records = GPUTIME_API_SELECTED;
        else if (res == CUPTI_SUCCESS &&
                 (res = cupti.enable(CUPTI_ACTIVITY_KIND_RUNTIME)) == CUPTI_SUCCESS &&
                 (res = cupti.enable(CUPTI_ACTIVITY_KIND_DRIVER)) == CUPTI_SUCCESS)
            api_records = GPUTIME_API_ALL;  /* these kinds override what enable_kept_apis did */
    }
    if (api_records == GPUTIME_API_CALLS)
        system_tids = 1;  /* on_call's are gettid()'s, whatever CUPTI's type */
    return res;
}

/* libcupti loaded (once) and its functions found; 0, or -1 with why */
static int load_cupti(const char *cupti_path, char *why, size_t why_size)
{
    static const char *sonames[] = {"libcupti.so", "libcupti.so.13", "libcupti.so.12"};
    static void *lib;
    int missing = 0;
    if (lib)
        return 0;
    /* RTLD_LOCAL: its symbols stay out of the program's namespace (a program may
     * load a libcupti of its own later, as PyTorch's profiler does) */
    lib = cupti_path && *cupti_path ? dlopen(cupti_path, RTLD_NOW | RTLD_LOCAL) : NULL;
    for (size_t i = 0; !lib && i < sizeof sonames / sizeof *sonames; i++)
        lib = dlopen(sonames[i], RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        snprintf(why, why_size, "cannot load libcupti (CUDA's CUPTI library)");
        return -1;
    }
    cupti.enable = symbol(lib, "cuptiActivityEnable", &missing);
    cupti.register_callbacks = symbol(lib, "cuptiActivityRegisterCallbacks", &missing);
    cupti.next_record = symbol(lib, "cuptiActivityGetNextRecord", &missing);
    cupti.flush_all = symbol(lib, "cuptiActivityFlushAll", &missing);
    cupti.flush_period = dlsym(lib, "cuptiActivityFlushPeriod");
    cupti.timestamp_callback = dlsym(lib, "cuptiActivityRegisterTimestampCallback");
    cupti.dropped = dlsym(lib, "cuptiActivityGetNumDroppedRecords");
    cupti.callback_name = dlsym(lib, "cuptiGetCallbackName");
    cupti.thread_id_type = dlsym(lib, "cuptiSetThreadIdType");
    cupti.enable_runtime_api = dlsym(lib, "cuptiActivityEnableRuntimeApi");
    cupti.enable_driver_api = dlsym(lib, "cuptiActivityEnableDriverApi");
    cupti.disable = dlsym(lib, "cuptiActivityDisable");
    cupti.subscribe = dlsym(lib, "cuptiSubscribe");
    cupti.unsubscribe = dlsym(lib, "cuptiUnsubscribe");
    cupti.get_thread_id_type = dlsym(lib, "cuptiGetThreadIdType");
    cupti.timestamp = dlsym(lib, "cuptiGetTimestamp");
    cupti.enable_callback = dlsym(lib, "cuptiEnableCallback");
    cupti.enable_domain = dlsym(lib, "cuptiEnableDomain");
    cupti.finalize = dlsym(lib, "cuptiFinalize");
    cupti.version = dlsym(lib, "cuptiGetVersion");
    if (missing || !cupti.callback_name) {
        snprintf(why, why_size, "libcupti lacks the activity API cudaprobe uses");
        lib = NULL;
        return -1;
    }
    return 0;
}

static void refused(CUptiResult res, char *why, size_t why_size)
{
    snprintf(why, why_size, "CUPTI refused activity recording (CUptiResult %d%s)", (int)res,
             res == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED
                 ? ": the program has a CUPTI subscriber of its own" : "");
}

/* the kernel's thread ids, as the uprobe rows have them (CUPTI's default on Linux is
 * pthread_self(), which Kineto maps back through a table of its own) */
static void ask_system_tids(void)
{
    if (cupti.thread_id_type &&
        cupti.thread_id_type(CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM) == CUPTI_SUCCESS)
        system_tids = 1;
}

static void register_exit(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, register_exit_handler);
}

/* CUPTI loaded and recording; 0, or -1 with why in a STATUS record */
static int start_recording(const char *dir, const char *cupti_path)
{
    char why[512];
    if (initialized)
        return -1;
    initialized = 1;
    snprintf(out_dir, sizeof out_dir, "%s", dir ? dir : "");
    if (load_cupti(cupti_path, why, sizeof why) < 0) {
        write_status(why);
        return -1;
    }
    if (cupti.timestamp_callback && cupti.timestamp_callback(monotonic_ns) == CUPTI_SUCCESS)
        clock_kind = GPUTIME_CLOCK_MONOTONIC;
    ask_system_tids();
    CUptiResult res = enable_activity(0, GPUTIME_MODE_CALLS);
    if (res != CUPTI_SUCCESS) {
        refused(res, why, sizeof why);
        write_status(why);
        return -1;
    }
    if (cupti.flush_period)
        cupti.flush_period(FLUSH_PERIOD_MS);
    register_exit();
    hold_locks_over_fork();
    gputime_start_thread(flusher);  /* none: full buffers still come, and all at exit */
    return 0;
}

void gputime_stop_recording(void);

/* attach.c: where `detach` is kept, its control block's word */
__attribute__((visibility("hidden")))
void gputime_detach_word(uint32_t *word)
{
    if (word != detach) {
        __atomic_store_n(word, __atomic_load_n(detach, __ATOMIC_ACQUIRE), __ATOMIC_RELEASE);
        detach = word;
    }
}

/* CUPTI's callbacks on every runtime and driver call of our subscriber on or
 * off; how many domains were switched */
static int switch_domains(uint32_t on)
{
    static const CUpti_CallbackDomain domains[] = {CUPTI_CB_DOMAIN_RUNTIME_API,
                                                   CUPTI_CB_DOMAIN_DRIVER_API};
    int switched = 0;
    for (size_t d = 0; cupti.enable_domain && d < sizeof domains / sizeof *domains; d++)
        switched += cupti.enable_domain(on, subscriber, domains[d]) == CUPTI_SUCCESS;
    return switched;
}

/* CUPTI's callback while a detach is asked (on_call): at the exit of a CUDA
 * call, on the program's thread, the first such call finalizes CUPTI, where
 * CUPTI says it is safe to (no other CUDA call of that thread under way; its
 * buffers were flushed at the stop, and those it hands back now are left to
 * it, keep_handed_back). Every other callback does nothing. Refused, CUPTI
 * stays, its callbacks off again. */
static void finalize_at_exit(CUpti_CallbackDomain domain, const CUpti_CallbackData *cb)
{
    uint32_t asked = DETACH_ASKED;
    if ((domain != CUPTI_CB_DOMAIN_RUNTIME_API && domain != CUPTI_CB_DOMAIN_DRIVER_API) || !cb ||
        cb->callbackSite != CUPTI_API_EXIT ||
        !__atomic_compare_exchange_n(detach, &asked, DETACH_FINALIZING, 0, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE))
        return;
    if (cupti.finalize() == CUPTI_SUCCESS) {
        subscriber = NULL;  /* gone with CUPTI */
        __atomic_store_n(detach, DETACH_DONE, __ATOMIC_RELEASE);
    } else {
        switch_domains(0);
        __atomic_store_n(detach, DETACH_KEPT, __ATOMIC_RELEASE);
    }
}

/* The stop: CUPTI asked to leave the process at the exit of its next CUDA call
 * (finalize_at_exit, called for every call from now), the subscriber kept for
 * that. Turned off, CUPTI still sits in each CUDA call of the process (PyTorch's
 * profiler measured training 10-20% slower after its profiling while CUPTI
 * stayed), and it can be taken out safely only so, and with CUDA graphs only
 * from CUDA 12.6 on (DETACH_CUPTI_VERSION). 1: asked; 0: it stays (DETACH_KEPT:
 * an older CUPTI, no callbacks, or the recording asked to keep it). */
static int ask_detach(void)
{
    uint32_t version = 0;
    if (keep_cupti || !subscriber || !cupti.finalize || !cupti.enable_domain || !cupti.version ||
        cupti.version(&version) != CUPTI_SUCCESS || version < DETACH_CUPTI_VERSION) {
        __atomic_store_n(detach, DETACH_KEPT, __ATOMIC_RELEASE);
        return 0;
    }
    /* the callbacks on before the ask: once a call may have finalized CUPTI, no
     * CUPTI function is called from here (any would bring CUPTI back); till
     * the ask they tie nothing (ties_paused) */
    if (!switch_domains(1)) {
        __atomic_store_n(detach, DETACH_KEPT, __ATOMIC_RELEASE);
        return 0;
    }
    __atomic_store_n(detach, DETACH_ASKED, __ATOMIC_RELEASE);
    return 1;
}

/* A new recording after a stop: CUPTI taken back before any call finalized it
 * (DETACH_ASKED: the subscriber kept, its callbacks on every call off again),
 * or subscribed to anew (DETACH_KEPT, or DETACH_DONE once CUPTI is gone,
 * waited for while a call is finalizing it). 0, or -1 with why. */
static int take_back_detach(char *why, size_t why_size)
{
    uint32_t was = DETACH_ASKED;
    if (__atomic_compare_exchange_n(detach, &was, DETACH_NONE, 0, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE)) {
        switch_domains(0);  /* (ties_paused, from the stop on, ties nothing meanwhile) */
        return 0;
    }
    for (int ms = 0; was == DETACH_FINALIZING && ms < FINALIZE_WAIT_MS; ms++) {
        usleep(1000);
        was = __atomic_load_n(detach, __ATOMIC_ACQUIRE);
    }
    if (was == DETACH_FINALIZING) {
        snprintf(why, why_size, "CUPTI is still leaving the process after the last recording");
        return -1;
    }
    __atomic_store_n(detach, DETACH_NONE, __ATOMIC_RELEASE);
    return 0;
}

static CUpti_ActivityThreadIdType previous_tid_type;

/* the kinds in `kinds` off (`on` 0) or on (`on` 1) */
static void switch_kinds(uint8_t on, const CUpti_ActivityKind *kinds, size_t n)
{
    CUptiResult (*flip)(CUpti_ActivityKind) = on ? cupti.enable : cupti.disable;
    for (size_t i = 0; flip && i < n; i++)
        flip(kinds[i]);
}

/* the GPU work's records off or on: paused (gputime_pause), and as part of
 * switch_activity() */
static void switch_work(uint8_t on)
{
    switch_kinds(on, work_kinds, sizeof work_kinds / sizeof *work_kinds);
}

/* whatever enable_activity() turned on, off (`on` 0: the stop) or on again (`on`
 * 1: the same choice of API records) */
static void switch_activity(uint8_t on)
{
    static const CUpti_ActivityKind apis[] = {CUPTI_ACTIVITY_KIND_RUNTIME,
                                              CUPTI_ACTIVITY_KIND_DRIVER};
    if (api_records == GPUTIME_API_SELECTED)
        enable_kept_apis(on);
    if (api_records == GPUTIME_API_CALLS)
        switch_call_ties(on);
    switch_work(on);
    if (api_records == GPUTIME_API_ALL)
        switch_kinds(on, apis, sizeof apis / sizeof *apis);
}

/* Attach (attach.c): the same records as at cuInit, into `fd` (a memfd), from a
 * process already running. The program's CUPTI state is left as it was found:
 * no timestamp callback (it cannot be taken back: records keep CUPTI's
 * CLOCK_REALTIME and the header's offset), CUPTI's thread-id type restored at
 * the stop, and the subscriber slot held while recording, which is also how a
 * profiler already in the program (Kineto, Nsight Systems) is found: refused.
 * 0, or -1 with why. */
__attribute__((visibility("hidden")))
int gputime_record_to(int fd, const char *cupti_path, int mode, char *why, size_t why_size)
{
    if (recording) {
        snprintf(why, why_size, "already recording");
        return -1;
    }
    if (load_cupti(cupti_path, why, why_size) < 0 || take_back_detach(why, why_size) < 0)
        return -1;
    keep_cupti = (mode & GPUTIME_MODE_KEEP_CUPTI) != 0;
    mode &= ~GPUTIME_MODE_KEEP_CUPTI;
    /* on_call ties only the calls whose callbacks go on (GPUTIME_MODE_CALL_TIES) */
    CUptiResult res = cupti.subscribe && !subscriber
        ? cupti.subscribe(&subscriber, on_call, NULL) : CUPTI_SUCCESS;
    if (res != CUPTI_SUCCESS) {
        subscriber = NULL;  /* (what a refused cuptiSubscribe left there is no subscriber) */
        refused(res, why, why_size);
        return -1;
    }
    previous_tid_type = CUPTI_ACTIVITY_THREAD_ID_TYPE_DEFAULT;
    if (cupti.get_thread_id_type)
        cupti.get_thread_id_type(&previous_tid_type);
    system_tids = 0;
    ask_system_tids();
    pthread_mutex_lock(&lock);
    out_fd = fd;
    out_pid = getpid();
    /* a new file: the kernel names and functions written into it again */
    memset(names, 0, sizeof names);
    memset(api_kept, 0, sizeof api_kept);
    next_name_id = 1;
    clock_kind = GPUTIME_CLOCK_REALTIME;
    api_records = GPUTIME_API_UNKNOWN;
    n_ties = ties_dropped = 0;
    __atomic_store_n(&ties_paused, 0, __ATOMIC_RELEASE);
    __atomic_store_n(&keep_handed_back, 0, __ATOMIC_RELEASE);  /* CUPTI's buffers from now: ours */
    free_left(monotonic_ns());  /* those an earlier stop left to CUPTI long enough ago */
    res = enable_activity(1, mode);
    write_header();
    pthread_mutex_unlock(&lock);
    if (res != CUPTI_SUCCESS) {
        refused(res, why, why_size);
        recording = 1;  /* what was turned on goes off the same way */
        gputime_stop_recording();
        return -1;
    }
    if (cupti.flush_period)
        cupti.flush_period(FLUSH_PERIOD_MS);
    register_exit();
    hold_locks_over_fork();
    recording = 1;
    return 0;
}

/* Attach: CUPTI's recording of the GPU work off (its cost on every launch gone
 * with it) and on again; the records made so far come at the next flush. The
 * watcher's thread only (attach.c), as `paused` is written. cudaprobe never
 * writes it: switching CUPTI's recording while a job launches can kill the job
 * (CUPTI's own thread faults; H100, CUDA 13, a PyTorch transformer step: the
 * work's kinds alone, with the launch callbacks left on, or the callbacks
 * too, a few times a second, each killed it within a few thousand switches;
 * scripts/gpu/check-cupti-toggle.sh). Kept for that diagnosis and for
 * benchmarks/cupti_cost.py. Only a recording of the GPU work alone, or with
 * its calls tied by CUPTI's callbacks (GPUTIME_API_CALLS), whose callbacks
 * stay on and tie nothing while paused (ties_paused). */
__attribute__((visibility("hidden")))
void gputime_pause(int paused)
{
    pthread_mutex_lock(&flush_lock);
    if (recording && !exiting &&
        (api_records == GPUTIME_API_NONE || api_records == GPUTIME_API_CALLS)) {
        if (paused)
            __atomic_store_n(&ties_paused, 1, __ATOMIC_RELEASE);
        switch_work(!paused);
        if (!paused)
            __atomic_store_n(&ties_paused, 0, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&flush_lock);
}

/* Attach: recording off, what CUPTI holds flushed into the memfd, which is then
 * no longer written to (the caller closes it); CUPTI as it was found, and
 * then out of the process (ask_detach). */
__attribute__((visibility("hidden")))
void gputime_stop_recording(void)
{
    if (!recording)
        return;
    switch_activity(0);
    if (api_records == GPUTIME_API_CALLS)
        write_ties();
    __atomic_store_n(&keep_handed_back, 1, __ATOMIC_RELEASE);
    cupti.flush_all(1);
    pthread_mutex_lock(&lock);
    out_fd = -1;
    pthread_mutex_unlock(&lock);
    if (cupti.thread_id_type && system_tids)
        cupti.thread_id_type(previous_tid_type);
    __atomic_store_n(&ties_paused, 1, __ATOMIC_RELEASE);  /* nothing tied from here */
    if (!ask_detach()) {
        if (cupti.unsubscribe && subscriber)
            cupti.unsubscribe(subscriber);
        subscriber = NULL;
    }
    recording = 0;
}

/* called by the CUDA driver at cuInit when CUDA_INJECTION64_PATH names this library;
 * 1 whatever happened: the program goes on as without it */
int InitializeInjection(void)
{
    start_recording(getenv("CUDAPROBE_GPUTIME_DIR"), getenv("CUDAPROBE_CUPTI"));
    return 1;
}

/* The start of InitializeInjection for a debugger to call after it dlopen'ed this
 * library in a running process (scripts/gpu/check-gputime.sh tries it with gdb);
 * cudaprobe's own attach is attach.c's. 0: recording. */
int gputime_attach(const char *dir, const char *cupti_path)
{
    return start_recording(dir, cupti_path);
}
