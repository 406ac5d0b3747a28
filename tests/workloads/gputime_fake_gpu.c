/* A GPU for --gpu-time where there is none: calls cudaLaunchKernel and
 * cudaMemcpy of the stand-in runtime gputime_fake_cudart.c (which fail as
 * without a driver, and are traced all the same), and for each writes what
 * cupti/gputime.c would have written had a GPU run it: the API record of the
 * call (the thread's tid, the CPU interval the runtime function read inside
 * the call, as CUPTI's callbacks do) and a kernel or memcpy record after it,
 * in the layout of cupti/gputime.h, to $CUDAPROBE_GPUTIME_DIR. The
 * integration test then checks the join against the real uprobe rows: the
 * clock they share, the thread, and every output.
 * Launch i's kernel runs 1000 + i ns, from 2 µs after the call returned;
 * copy i moves 4096 * (i + 1) bytes in 500 + i ns.
 * With HOLE, the file is then made HOLE bytes long (sparse: a hole after the
 * records, as a hostile program may make it for nothing).
 * Usage: gputime_fake_gpu LAUNCHES COPIES [HOLE] */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gputime.h"

void gputime_fake_api_interval(uint64_t *start, uint64_t *end);

static int fd;

static uint64_t monotonic_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void record(struct gputime_record r, const char *text)
{
    char buf[sizeof r + 256] = {0};
    size_t len = text ? strlen(text) + 1 : 0;
    r.size = (uint16_t)(sizeof r + ((len + 7) & ~(size_t)7));
    memcpy(buf, &r, sizeof r);
    if (text)
        memcpy(buf + sizeof r, text, len);
    if (write(fd, buf, r.size) != r.size)
        exit(4);
}

void fake_kernel(void) {}

int main(int argc, char **argv)
{
    const char *dir = getenv("CUDAPROBE_GPUTIME_DIR");
    char path[4096];
    int launches = argc > 1 ? atoi(argv[1]) : 100, copies = argc > 2 ? atoi(argv[2]) : 10;
    if (!dir)
        return 3;
    snprintf(path, sizeof path, "%s/gputime.fake-%d.bin", dir, (int)getpid());
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0)
        return 3;
    struct gputime_header h = {.version = GPUTIME_VERSION, .pid = (uint32_t)getpid(),
                               .clock = GPUTIME_CLOCK_MONOTONIC,
                               .record_size = sizeof(struct gputime_record), .system_tids = 1};
    memcpy(h.magic, GPUTIME_MAGIC, sizeof h.magic);
    if (write(fd, &h, sizeof h) != sizeof h)
        return 4;
    record((struct gputime_record){.type = GPUTIME_FUNCTION, .cbid = 211, .domain = 5},
           "cudaLaunchKernel_v7000");
    record((struct gputime_record){.type = GPUTIME_FUNCTION, .cbid = 31, .domain = 5},
           "cudaMemcpy_v3020");
    record((struct gputime_record){.type = GPUTIME_NAME, .name_id = 1}, "_Z11fake_vecaddv");
    uint32_t tid = (uint32_t)gettid(), corr = 0;
    static char host[4096 * 64];
    void *device = NULL;
    for (int i = 0; i < launches + copies; i++) {
        int launch = i < launches;
        cudaError_t ret = launch
            ? cudaLaunchKernel((const void *)fake_kernel, (dim3){1, 1, 1}, (dim3){32, 1, 1},
                               NULL, 0, 0)
            : cudaMemcpy(device, host, 4096 * (size_t)(i - launches + 1),
                         cudaMemcpyHostToDevice);
        uint64_t after = monotonic_ns(), start, end;
        gputime_fake_api_interval(&start, &end);
        (void)ret;
        corr++;
        record((struct gputime_record){.type = GPUTIME_API, .correlation = corr, .start = start,
                                       .end = end, .tid = tid, .cbid = launch ? 211 : 31,
                                       .domain = 5}, NULL);
        if (launch)
            record((struct gputime_record){.type = GPUTIME_KERNEL, .correlation = corr,
                                           .start = after + 2000,
                                           .end = after + 2000 + 1000 + (uint64_t)i,
                                           .device = 0, .context = 1, .stream = 7,
                                           .name_id = 1}, NULL);
        else
            record((struct gputime_record){.type = GPUTIME_MEMCPY, .correlation = corr,
                                           .start = after + 2000,
                                           .end = after + 2000 + 500 + (uint64_t)(i - launches),
                                           .bytes = 4096 * (uint64_t)(i - launches + 1),
                                           .device = 0, .context = 1, .stream = 14,
                                           .copy_kind = 1}, NULL);
    }
    if (argc > 3 && ftruncate(fd, (off_t)strtoull(argv[3], NULL, 0)) != 0)
        return 5;
    close(fd);
    printf("%d launches %d copies\n", launches, copies);
    return 0;
}
