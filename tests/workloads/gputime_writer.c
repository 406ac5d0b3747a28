/* cupti/gputime.c's own writer run without a GPU: the library's source is
 * included whole, CUPTI's record iterator and callback names replaced by
 * fakes, and buffer_completed() given one buffer of activity records made
 * here, as CUPTI would hand them over. tests/unit/test_gputime.py reads the
 * file it writes with cudaprobe.decode.gputime and checks every field. Before
 * that, enable_activity() with CUPTI's switches faked: it prints the kinds and
 * the cbids it switched on ("kind 10", "runtime 211", "driver 307"), with
 * `all` as if libcupti lacked the fine-grained switches, with `attached` as an
 * attach into a running process asks, with `work-only` as serve's attach asks.
 * Usage: gputime_writer DIR [all|attached|work-only]   (writes DIR/gputime.<pid>.bin) */
#include "gputime.c"
#include "gputime_fake_cupti.h"

static CUptiResult CUPTIAPI fake_name(CUpti_CallbackDomain domain, uint32_t cbid,
                                      const char **name)
{
    if (domain == CUPTI_CB_DOMAIN_RUNTIME_API)
        *name = cbid == 211 ? "cudaLaunchKernel_v7000" : cbid == 31 ? "cudaMemcpy_v3020"
                                                                   : "cudaGetDevice_v3020";
    else
        *name = cbid == 307 ? "cuLaunchKernel" : cbid == 279 ? "cuMemsetD8_v2"
                                                            : "cuCtxGetCurrent";
    return CUPTI_SUCCESS;
}

static CUptiResult CUPTIAPI fake_register(CUpti_BuffersCallbackRequestFunc requested,
                                          CUpti_BuffersCallbackCompleteFunc completed)
{
    (void)requested, (void)completed;
    return CUPTI_SUCCESS;
}

static CUptiResult CUPTIAPI fake_enable(CUpti_ActivityKind kind)
{
    printf("kind %d\n", (int)kind);
    return CUPTI_SUCCESS;
}

static CUptiResult CUPTIAPI fake_enable_runtime(CUpti_CallbackId cbid, uint8_t enable)
{
    printf("runtime %u %d\n", cbid, enable);
    return CUPTI_SUCCESS;
}

static CUptiResult CUPTIAPI fake_enable_driver(CUpti_CallbackId cbid, uint8_t enable)
{
    printf("driver %u %d\n", cbid, enable);
    return CUPTI_SUCCESS;
}

static CUptiResult CUPTIAPI fake_dropped(CUcontext ctx, uint32_t stream, size_t *dropped)
{
    (void)ctx, (void)stream;
    *dropped = 5;
    return CUPTI_SUCCESS;
}

int main(int argc, char **argv)
{
    static const char kernel_name[] = "_Z6vecAddPKfS0_Pfi";
    static CUpti_ActivityKernel10 k1, k2;
    static CUpti_ActivityMemcpy6 copy;
    static CUpti_ActivityMemset4 set;
    static CUpti_ActivityAPI launch, memcpy_call, other, driver_launch;
    if (argc < 2)
        return 2;
    fake_initialized(argv[1]);
    cupti.callback_name = fake_name;
    cupti.dropped = fake_dropped;
    cupti.register_callbacks = fake_register;
    cupti.enable = fake_enable;
    if (argc < 3 || strcmp(argv[2], "all")) {
        cupti.enable_runtime_api = fake_enable_runtime;
        cupti.enable_driver_api = fake_enable_driver;
    }
    int work_only = argc > 2 && !strcmp(argv[2], "work-only");
    if (enable_activity(work_only || (argc > 2 && !strcmp(argv[2], "attached")), work_only) !=
        CUPTI_SUCCESS)
        return 1;

    launch = (CUpti_ActivityAPI){.kind = CUPTI_ACTIVITY_KIND_RUNTIME, .cbid = 211, .start = 1000,
                                 .end = 1900, .processId = 1, .threadId = 4242,
                                 .correlationId = 7};
    driver_launch = (CUpti_ActivityAPI){.kind = CUPTI_ACTIVITY_KIND_DRIVER, .cbid = 307,
                                        .start = 1200, .end = 1800, .threadId = 4242,
                                        .correlationId = 8};
    other = (CUpti_ActivityAPI){.kind = CUPTI_ACTIVITY_KIND_RUNTIME, .cbid = 17, .start = 10,
                                .end = 20, .threadId = 4242, .correlationId = 6};
    memcpy_call = (CUpti_ActivityAPI){.kind = CUPTI_ACTIVITY_KIND_RUNTIME, .cbid = 31,
                                      .start = 5000, .end = 9000, .threadId = 4243,
                                      .correlationId = 9};
    k1.kind = k2.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
    k1.start = 2000, k1.end = 4500, k1.deviceId = 1, k1.contextId = 3, k1.streamId = 13;
    k1.correlationId = 7, k1.name = kernel_name;
    k2 = k1;  /* the same kernel again: its name is written once */
    k2.start = 4600, k2.end = 4700, k2.correlationId = 10;
    copy.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
    copy.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_HTOD, copy.bytes = 1 << 20;
    copy.start = 6000, copy.end = 8000, copy.deviceId = 1, copy.contextId = 3;
    copy.streamId = 14, copy.correlationId = 9;
    set.kind = CUPTI_ACTIVITY_KIND_MEMSET;
    set.bytes = 4096, set.start = 8100, set.end = 8200, set.deviceId = 0, set.streamId = 7;
    set.correlationId = 11;
    CUpti_Activity *records[] = {(CUpti_Activity *)&launch, (CUpti_Activity *)&other,
                                 (CUpti_Activity *)&driver_launch, (CUpti_Activity *)&k1,
                                 (CUpti_Activity *)&k2, (CUpti_Activity *)&memcpy_call,
                                 (CUpti_Activity *)&copy, (CUpti_Activity *)&set};
    fake_count = (int)(sizeof records / sizeof *records);
    memcpy(fake_records, records, sizeof records);
    buffer_completed(NULL, 0, malloc(8), 8, 8);
    return 0;
}
