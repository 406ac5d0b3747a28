/* Processes that --pid --gpu-time injects into, each with something that
 * once went wrong (tests/integration/test_gputime_attach_hostile.py). One
 * thread makes CUDA runtime and driver calls (failing fast without a GPU,
 * the safe-point probes firing), checking its own arithmetic as it goes;
 * the main thread prints "ready" once it runs, waits until stdin is closed,
 * prints "cuda ok" (or BAD) and exits 0.
 *
 *   idle                no CUDA call at all (CUDA mapped): no safe point comes
 *   plain               the CUDA thread alone
 *   seccomp             the CUDA thread first puts a seccomp filter on itself
 *                       alone (memfd_create kills the process); the main
 *                       thread has none
 *   forge NAME VADDR PATH
 *   refuse NAME VADDR   a memfd named NAME mapped at offset 0, as cudaprobe's
 *                       library is once loaded, with a jump at VADDR (where the
 *                       real library's gputime_inject_attach lies) to a
 *                       function of this program that answers with a control
 *                       block inside that mapping: "recording" into an O_PATH
 *                       descriptor of PATH (a file this user cannot open), or
 *                       "refused" with a why full of terminal escapes.
 *
 * Usage: inject_hostile MODE [ARGS] */
#define _GNU_SOURCE
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "../../cupti/inject.h"

static atomic_int stop, running;
static int bad_cuda, filter_failed;
static int own_filter;

/* memfd_create kills the process; everything else is allowed */
static int filter_self(void)
{
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_memfd_create, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {.len = sizeof f / sizeof *f, .filter = f};
    /* both on this thread only (no TSYNC) */
    return prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) ||
           syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog);
}

static void *cuda_calls(void *arg)
{
    double x = 1.0, y = 0.0;  /* kept across the calls: the stub must give them back */
    unsigned long i;
    (void)arg;
    if (own_filter && filter_self())
        filter_failed = 1;
    atomic_fetch_add(&running, 1);
    for (i = 0; !atomic_load(&stop); i++) {
        int n = -1;
        usleep(200);
        cudaError_t a = cudaGetDeviceCount(&n);
        CUresult c = cuDeviceGetCount(&n);
        y += x * 2.0;
        x += 1.0;
        bad_cuda |= a == cudaSuccess || c == CUDA_SUCCESS;
    }
    bad_cuda |= y != (double)i * (double)(i + 1) || x != (double)i + 1.0;
    return NULL;
}

struct control {  /* inject.h's control block, as the library lays it out */
    char magic[8];
    uint64_t heartbeat;
    uint32_t stop, state;
    int32_t fd;
    uint32_t owner, generation, paused;
    char why[256];
    uint32_t applied;
};
_Static_assert(offsetof(struct control, why) == C_WHY, "inject.h");
_Static_assert(sizeof(struct control) == CONTROL_SIZE, "inject.h");

static struct control *forged;
static int forged_fd = -1;
static const char escapes[] = "\x1b[2J\x1b]0;pwned\x07 the screen was cleared\x1b[31m";

/* called by cudaprobe's stub, as gputime_inject_attach would be */
static struct control *fake_attach(const char *cupti, uint64_t owner, uint64_t heartbeat)
{
    (void)cupti, (void)heartbeat;
    memcpy(forged->magic, CONTROL_MAGIC, sizeof CONTROL_MAGIC);
    forged->owner = (uint32_t)owner;
    if (forged_fd >= 0) {
        forged->fd = forged_fd;
        forged->state = ATTACH_RECORDING;
    } else {
        memcpy(forged->why, escapes, sizeof escapes);
        forged->state = ATTACH_REFUSED;
    }
    return forged;
}

static int forge(const char *name, unsigned long vaddr, const char *victim)
{
    size_t size = (vaddr + 64 + sizeof(struct control) + 4095) & ~4095ul;
    int fd = memfd_create(name, MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, (off_t)size))
        return -1;
    unsigned char *m = mmap(NULL, size, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED)
        return -1;
    uint64_t target = (uint64_t)(uintptr_t)fake_attach;
    m[vaddr] = 0x48, m[vaddr + 1] = 0xb8;  /* movabs $fake_attach, %rax */
    memcpy(m + vaddr + 2, &target, 8);
    m[vaddr + 10] = 0xff, m[vaddr + 11] = 0xe0;  /* jmp *%rax */
    forged = (struct control *)(m + ((vaddr + 64) & ~63ul));
    if (victim && (forged_fd = open(victim, O_PATH | O_CLOEXEC)) < 0)
        return -1;
    return 0;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "plain";
    pthread_t t;
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (!strcmp(mode, "forge") || !strcmp(mode, "refuse")) {
        if (argc < (mode[0] == 'f' ? 5 : 4) ||
            forge(argv[2], strtoul(argv[3], NULL, 0), mode[0] == 'f' ? argv[4] : NULL))
            return 70;
    }
    own_filter = !strcmp(mode, "seccomp");
    int calls = strcmp(mode, "idle") != 0;
    if (calls) {
        pthread_create(&t, NULL, cuda_calls, NULL);
        while (!atomic_load(&running))
            usleep(1000);
    }
    printf("ready %d\n", (int)getpid());
    char buf[64];
    while (read(0, buf, sizeof buf) > 0)
        ;
    atomic_store(&stop, 1);
    if (calls)
        pthread_join(t, NULL);
    printf("cuda %s\n", bad_cuda || filter_failed ? "BAD" : "ok");
    return 0;
}
