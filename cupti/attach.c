/* The GPU-time library in a process that is already running: what cudaprobe's
 * injection calls (gputime_inject_attach, through inject_stub.S), and the
 * thread that stops the recording when cudaprobe asks or is gone.
 *
 * The records go into a memfd made here, which cudaprobe opens through
 * /proc/PID/fd/N: nothing is written into a file system the process sees.
 * cudaprobe talks to this library only through `control` (inject.h), which
 * it reads and writes in the process's memory: the heartbeat it adds to at
 * least each second, and `stop`. The watcher thread, started at the attach,
 * looks at them every WATCH_PERIOD_MS; when `stop` is set or the heartbeat
 * has not moved for HEARTBEAT_TIMEOUT_MS (cudaprobe killed), it turns CUPTI's
 * recording off, flushes it into the memfd, closes the memfd and exits. Until
 * then it has CUPTI hand back its buffers each half second (gputime_flush), so
 * that cudaprobe reads the records as they come. It also turns CUPTI's
 * recording off and on as `paused` is written, which cudaprobe never does:
 * switched while a job launches, CUPTI can kill it (gputime_pause); only the
 * diagnosis that shows it (scripts/gpu/cupti_toggle.py) and the cost
 * benchmark (benchmarks/cupti_cost.py) write it.
 * At the stop, CUPTI is asked to leave the process altogether (`detached`,
 * inject.h's DETACH_*): the program's next CUDA call finalizes it as it
 * returns (gputime_stop_recording).
 * The library stays loaded: a second attach calls gputime_inject_attach
 * again (cudaprobe finds it in /proc/PID/maps), never loading it twice. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include "inject.h"

int gputime_record_to(int fd, const char *cupti_path, int mode, char *why, size_t why_size);
void gputime_stop_recording(void);
void gputime_flush(void);
void gputime_pause(int paused);
int gputime_start_thread(void *(*run)(void *));
void gputime_detach_word(uint32_t *word);

#define FLUSH_TICKS (FLUSH_PERIOD_MS / WATCH_PERIOD_MS)  /* the flush period, in watch periods */

struct gputime_control {
    char magic[8];
    uint64_t heartbeat;
    uint32_t stop;
    uint32_t state;
    int32_t fd;
    uint32_t owner;
    uint32_t generation;
    uint32_t paused;
    char why[256];
    uint32_t applied;
    uint32_t detached;
};

_Static_assert(offsetof(struct gputime_control, heartbeat) == C_HEARTBEAT, "inject.h");
_Static_assert(offsetof(struct gputime_control, stop) == C_STOP, "inject.h");
_Static_assert(offsetof(struct gputime_control, state) == C_STATE, "inject.h");
_Static_assert(offsetof(struct gputime_control, fd) == C_FD, "inject.h");
_Static_assert(offsetof(struct gputime_control, owner) == C_OWNER, "inject.h");
_Static_assert(offsetof(struct gputime_control, generation) == C_GENERATION, "inject.h");
_Static_assert(offsetof(struct gputime_control, paused) == C_PAUSED, "inject.h");
_Static_assert(offsetof(struct gputime_control, why) == C_WHY, "inject.h");
_Static_assert(offsetof(struct gputime_control, applied) == C_APPLIED, "inject.h");
_Static_assert(offsetof(struct gputime_control, detached) == C_DETACHED, "inject.h");
_Static_assert(sizeof(struct gputime_control) == CONTROL_SIZE, "inject.h");

static struct gputime_control control = {.magic = CONTROL_MAGIC, .fd = -1};

static uint64_t monotonic_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void set_state(uint32_t state)
{
    __atomic_store_n(&control.state, state, __ATOMIC_RELEASE);
}

/* the watcher: stops the recording when asked, or when the heartbeat stops */
static void *watch(void *arg)
{
    uint64_t beat = __atomic_load_n(&control.heartbeat, __ATOMIC_ACQUIRE);
    uint64_t beat_ms = monotonic_ms();
    uint32_t paused = 0;
    struct timespec period = {0, WATCH_PERIOD_MS * 1000000L};
    (void)arg;
    prctl(PR_SET_NAME, "cudaprobe-gpu");
    for (unsigned tick = 1;; tick++) {
        nanosleep(&period, NULL);
        uint64_t now = __atomic_load_n(&control.heartbeat, __ATOMIC_ACQUIRE);
        if (__atomic_load_n(&control.stop, __ATOMIC_ACQUIRE)) {
            snprintf(control.why, sizeof control.why, "stopped by cudaprobe");
            break;
        }
        if (now != beat) {
            beat = now;
            beat_ms = monotonic_ms();
        } else if (monotonic_ms() - beat_ms > HEARTBEAT_TIMEOUT_MS) {
            snprintf(control.why, sizeof control.why,
                     "cudaprobe's heartbeat stopped for %d ms", HEARTBEAT_TIMEOUT_MS);
            break;
        }
        uint32_t now_paused = __atomic_load_n(&control.paused, __ATOMIC_ACQUIRE) != 0;
        if (now_paused != paused) {
            paused = now_paused;
            gputime_pause((int)paused);
            __atomic_store_n(&control.applied, paused, __ATOMIC_RELEASE);
        }
        if (tick % FLUSH_TICKS == 0)
            gputime_flush();
    }
    set_state(ATTACH_STOPPING);
    gputime_stop_recording();
    close(control.fd);
    control.fd = -1;
    set_state(ATTACH_STOPPED);
    return NULL;
}

/* Called by cudaprobe's injected stub in one of the program's threads, stopped at
 * the entry of a CUDA call (docs/gputime.md says why that is a safe point).
 * Returns the control block; its state says what came of it: RECORDING (fd set),
 * REFUSED (why set), or still RECORDING/STOPPING under another owner (busy). */
struct gputime_control *gputime_inject_attach(const char *cupti_path, uint64_t owner,
                                              uint64_t heartbeat)
{
    uint32_t state = __atomic_load_n(&control.state, __ATOMIC_ACQUIRE);
    if (state == ATTACH_RECORDING || state == ATTACH_STOPPING)
        return &control;  /* another cudaprobe's, or a killed one's not yet timed out */
    control.owner = (uint32_t)owner;
    control.stop = 0;
    control.paused = 0;  /* recording from the start (cudaprobe never pauses it) */
    control.applied = 0;
    control.generation++;
    control.why[0] = 0;
    __atomic_store_n(&control.heartbeat, heartbeat, __ATOMIC_RELEASE);
    int fd = memfd_create("cudaprobe-gpu-records", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0) {
        snprintf(control.why, sizeof control.why, "memfd_create: %s", strerror(errno));
        set_state(ATTACH_REFUSED);
        return &control;
    }
    int mode = (owner & ATTACH_WORK_ONLY) ? GPUTIME_MODE_WORK
               : (owner & ATTACH_CALL_TIES) ? GPUTIME_MODE_CALL_TIES : GPUTIME_MODE_CALLS;
    if (owner & ATTACH_KEEP_CUPTI)
        mode |= GPUTIME_MODE_KEEP_CUPTI;
    gputime_detach_word(&control.detached);
    if (gputime_record_to(fd, cupti_path, mode, control.why, sizeof control.why) < 0) {
        close(fd);
        set_state(ATTACH_REFUSED);
        return &control;
    }
    control.fd = fd;
    set_state(ATTACH_RECORDING);  /* before the watcher, which may set STOPPING */
    int err = gputime_start_thread(watch);
    if (err) {
        gputime_stop_recording();
        close(fd);
        control.fd = -1;
        snprintf(control.why, sizeof control.why, "cannot start its thread: %s", strerror(err));
        set_state(ATTACH_REFUSED);
    }
    return &control;
}
