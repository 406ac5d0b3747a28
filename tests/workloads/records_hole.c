/* A process that --pid --gpu-time injects into and that then makes the
 * GPU-time library's records memfd (which it holds: the library writes it)
 * 1 TiB long, a hole after what was written: free for it, a sparse file.
 * One thread makes driver calls (the safe point: failing fast without a
 * GPU); the main thread prints "ready", then answers lines on stdin:
 *   grow      ftruncate the records memfd to 1 TiB; prints "grown N" (N: the
 *             memfds found, 1 when recording)
 *   calls N   makes N cudaMalloc calls (each fails); prints "called N"
 * and at the end of stdin stops its thread, prints "done" and exits 0.
 *
 * Usage: records_hole */
#define _GNU_SOURCE
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dirent.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static atomic_int stop;

static void *driver_calls(void *arg)
{
    (void)arg;
    while (!atomic_load(&stop)) {
        int n = -1;
        cuDeviceGetCount(&n);
        usleep(200);
    }
    return NULL;
}

static int grow(void)
{
    char link[64], target[256];
    int found = 0;
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    while (d && (e = readdir(d))) {
        snprintf(link, sizeof link, "/proc/self/fd/%s", e->d_name);
        ssize_t n = readlink(link, target, sizeof target - 1);
        if (n <= 0)
            continue;
        target[n] = 0;
        if (strstr(target, "memfd:cudaprobe-gpu-records") &&
            ftruncate(atoi(e->d_name), 1LL << 40) == 0)
            found++;
    }
    if (d)
        closedir(d);
    return found;
}

int main(void)
{
    char line[64];
    pthread_t t;
    setvbuf(stdout, NULL, _IOLBF, 0);
    pthread_create(&t, NULL, driver_calls, NULL);
    printf("ready\n");
    while (fgets(line, sizeof line, stdin)) {
        if (!strncmp(line, "grow", 4)) {
            printf("grown %d\n", grow());
        } else if (!strncmp(line, "calls ", 6)) {
            int n = atoi(line + 6);
            for (int i = 0; i < n; i++) {
                void *p = NULL;
                cudaMalloc(&p, 4096);
            }
            printf("called %d\n", n);
        }
    }
    atomic_store(&stop, 1);
    pthread_join(t, NULL);
    printf("done\n");
    return 0;
}
