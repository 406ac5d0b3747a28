/* A process to inject the GPU-time library into while it works: one thread
 * mallocs and frees, one dlopens and dlcloses libm, THREADS threads make
 * CUDA runtime and driver calls (without a GPU they fail fast, and the
 * uprobes fire), each checking its own arithmetic as it goes (registers
 * or memory changed under it would show). Prints "ready" once every thread
 * runs; runs until stdin is closed; then prints what each thread found
 * (the same lines whatever the speed) and exits with EXIT. With "seccomp"
 * it first puts itself under a seccomp filter (one that allows everything).
 * The malloc and dlopen threads work 1 ms, then sleep 3 ms (pace()): busy
 * in their calls a quarter of the time, so that the process does not take a
 * 2-core machine from the tests running beside it; a CUDA thread sleeps
 * 100 us after each round of calls (thousands a second, not hundreds of
 * thousands for a trace of it to decode).
 * Usage: inject_target THREADS EXIT [seccomp] */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

static atomic_int stop, running;
static int bad_malloc, bad_dlopen, bad_cuda;

#define WORK_NS 1000000L
#define REST_US 3000

/* after WORK_NS of work since the last rest, a rest of REST_US */
static void pace(struct timespec *since)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if ((now.tv_sec - since->tv_sec) * 1000000000L + (now.tv_nsec - since->tv_nsec) < WORK_NS)
        return;
    usleep(REST_US);
    clock_gettime(CLOCK_MONOTONIC, since);
}

static void *mallocs(void *arg)
{
    struct timespec since;
    (void)arg;
    clock_gettime(CLOCK_MONOTONIC, &since);
    atomic_fetch_add(&running, 1);
    for (unsigned long i = 0; !atomic_load(&stop); i++) {
        size_t n = 16 + i % 4000;
        pace(&since);
        unsigned char *p = malloc(n);
        memset(p, (int)(i & 0xff), n);
        for (size_t k = 0; k < n; k += 97)
            bad_malloc |= p[k] != (unsigned char)(i & 0xff);
        free(p);
    }
    return NULL;
}

static void *dlopens(void *arg)
{
    struct timespec since;
    (void)arg;
    clock_gettime(CLOCK_MONOTONIC, &since);
    atomic_fetch_add(&running, 1);
    while (!atomic_load(&stop)) {
        pace(&since);
        void *h = dlopen("libm.so.6", RTLD_NOW | RTLD_LOCAL);
        double (*cosine)(double) = h ? (double (*)(double))dlsym(h, "cos") : NULL;
        bad_dlopen |= !cosine || cosine(0.0) != 1.0;
        if (h)
            dlclose(h);
    }
    return NULL;
}

static void *cuda_calls(void *arg)
{
    (void)arg;
    double x = 1.0, y = 0.0;  /* kept across the calls: the stub must give them back */
    unsigned long i;
    atomic_fetch_add(&running, 1);
    for (i = 0; !atomic_load(&stop); i++) {
        int n = -1;
        usleep(100);
        void *p = NULL;
        cudaError_t a = cudaGetDeviceCount(&n);
        cudaError_t b = cudaMalloc(&p, 4096);
        cudaFree(p);
        CUresult c = cuDeviceGetCount(&n);  /* fails at once: cuInit was not called */
        y += x * 2.0;
        x += 1.0;
        bad_cuda |= a == cudaSuccess || b == cudaSuccess || c == CUDA_SUCCESS;
    }
    /* y = sum of 2k for k = 1..i = i(i+1) */
    bad_cuda |= y != (double)i * (double)(i + 1) || x != (double)i + 1.0;
    return NULL;
}

int main(int argc, char **argv)
{
    int threads = argc > 1 ? atoi(argv[1]) : 2, status = argc > 2 ? atoi(argv[2]) : 0;
    pthread_t t[64];
    int n = 0;
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc > 3 && !strcmp(argv[3], "seccomp")) {
        struct sock_filter allow = BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
        struct sock_fprog prog = {.len = 1, .filter = &allow};
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog))
            return 70;
    }
    pthread_create(&t[n++], NULL, mallocs, NULL);
    pthread_create(&t[n++], NULL, dlopens, NULL);
    for (int k = 0; k < threads && n < 64; k++)
        pthread_create(&t[n++], NULL, cuda_calls, NULL);
    while (atomic_load(&running) < n)
        usleep(1000);
    printf("ready %d\n", (int)getpid());
    char buf[64];
    while (read(0, buf, sizeof buf) > 0)
        ;
    atomic_store(&stop, 1);
    for (int k = 0; k < n; k++)
        pthread_join(t[k], NULL);
    printf("malloc %s\ndlopen %s\ncuda %s\n", bad_malloc ? "BAD" : "ok",
           bad_dlopen ? "BAD" : "ok", bad_cuda ? "BAD" : "ok");
    return status;
}
