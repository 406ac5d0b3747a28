/* What cupti/gputime.c costs per activity record on CUPTI's side, without a
 * GPU: the library's buffer_completed() (its source included whole, CUPTI's
 * iterator faked: tests/workloads/gputime_fake_cupti.h) given BUFFERS
 * buffers of 4096 records each: per launch a kernel record, the launch API
 * record it correlates with, and OTHER API records of calls that queue no
 * GPU work (cudaGetDevice: what CUPTI hands over when it records every call,
 * the library's fallback; 0 when it records the launching calls only),
 * written to DIR. Prints ns per record and per launch, and the file's bytes
 * per launch. docs/gputime.md and BENCHMARKS.md quote it.
 *   cc -O2 -Icupti -Itests/workloads -I/usr/local/cuda/include -o /tmp/gwb \
 *      benchmarks/gputime_writer_bench.c -ldl -lpthread
 *   /tmp/gwb DIR [BUFFERS [OTHER]] */
#include "gputime.c"
#include "gputime_fake_cupti.h"

#define PER_BUFFER FAKE_MAX

static CUptiResult CUPTIAPI fake_name(CUpti_CallbackDomain domain, uint32_t cbid,
                                      const char **name)
{
    (void)domain;
    *name = cbid == 211 ? "cudaLaunchKernel_v7000" : "cudaGetDevice_v3020";
    return CUPTI_SUCCESS;
}

int main(int argc, char **argv)
{
    static CUpti_ActivityKernel10 kernels[PER_BUFFER / 2];
    static CUpti_ActivityAPI apis[PER_BUFFER / 2], other;
    static const char *names[] = {"_Z6vecAddPKfS0_Pfi", "_Z5scalePff", "_Z4gemmPKfS0_Pf"};
    int buffers = argc > 2 ? atoi(argv[2]) : 500;
    int others = argc > 3 ? atoi(argv[3]) : 0;
    int launches = PER_BUFFER / (2 + others), n = 0;
    if (argc < 2 || others < 0)
        return 2;
    fake_initialized(argv[1]);
    cupti.callback_name = fake_name;
    other = (CUpti_ActivityAPI){.kind = CUPTI_ACTIVITY_KIND_RUNTIME, .cbid = 17, .start = 1,
                                .end = 2, .threadId = 7};
    for (int i = 0; i < launches; i++) {
        apis[i] = (CUpti_ActivityAPI){.kind = CUPTI_ACTIVITY_KIND_RUNTIME, .cbid = 211,
                                      .start = 1000u * i, .end = 1000u * i + 500,
                                      .threadId = 7, .correlationId = (uint32_t)i};
        kernels[i].kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
        kernels[i].start = 1000u * i + 600, kernels[i].end = 1000u * i + 900;
        kernels[i].correlationId = (uint32_t)i, kernels[i].name = names[i % 3];
        for (int o = 0; o < others; o++)
            fake_records[n++] = (CUpti_Activity *)&other;
        fake_records[n++] = (CUpti_Activity *)&apis[i];
        fake_records[n++] = (CUpti_Activity *)&kernels[i];
    }
    fake_count = n;
    uint64_t start = now_ns(CLOCK_MONOTONIC);
    for (int b = 0; b < buffers; b++) {
        fake_next_record = 0;
        buffer_completed(NULL, 0, malloc(8), 8, 8);
    }
    uint64_t spent = now_ns(CLOCK_MONOTONIC) - start;
    off_t bytes = lseek(out_fd, 0, SEEK_END);
    printf("{\"records\": %d, \"other_per_launch\": %d, \"ns_per_record\": %.1f, "
           "\"ns_per_launch\": %.1f, \"bytes_per_launch\": %.1f}\n",
           buffers * n, others, (double)spent / ((double)buffers * n),
           (double)spent / ((double)buffers * launches),
           (double)bytes / ((double)buffers * launches));
    return 0;
}
