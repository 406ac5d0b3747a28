// What CUPTI's ways of tying a kernel to the call that launched it cost a
// launch-bound loop, and whether they tie every kernel, on a program already
// running CUDA (as an attach finds it):
//   work: the kernel records alone (CONCURRENT_KERNEL: no tie to any call)
//   cb:   work + callbacks on the launch functions only (their correlation ids)
//   api:  work + the whole RUNTIME and DRIVER API record kinds (every call)
// in alternating rounds, each the median ns per launch of a round of LAUNCHES;
// then each tie's correlation ids against the kernel records' (how many kernels
// are tied), and SWITCHES cycles of each way switched off and on from another
// thread while this one launches (serve --duty's slices), the kernels of the
// on-windows tied. Prints one JSON line per result. Build:
//   nvcc -O2 -o cupti_join cupti_join.cu -I$CUPTI/include -L$CUPTI/lib64 -lcupti
// Usage: cupti_join [ROUNDS [LAUNCHES [SWITCHES]]]
#include <cuda.h>
#include <cuda_runtime.h>
#include <cupti.h>
#include <pthread.h>
#include <atomic>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

using namespace std;

__global__ void empty() {}

#define MAX_IDS (1 << 24)
static uint32_t *kernel_ids, *cb_ids[2], *api_ids;  // cb: 0 runtime, 1 driver
static atomic_size_t n_kernel, n_cb[2], n_api;
static atomic_int collecting;
static CUpti_SubscriberHandle sub;

#define CHECK(x) do { CUptiResult r_ = (x); if (r_ != CUPTI_SUCCESS) { \
    const char *s_; cuptiGetResultString(r_, &s_); \
    printf("{\"error\":\"%s: %s\"}\n", #x, s_); exit(2); } } while (0)

static void CUPTIAPI requested(uint8_t **buf, size_t *size, size_t *max)
{
    *buf = (uint8_t *)aligned_alloc(8, 8 << 20);
    *size = 8 << 20;
    *max = 0;
}

static void CUPTIAPI completed(CUcontext c, uint32_t s, uint8_t *buf, size_t size, size_t valid)
{
    CUpti_Activity *a = NULL;
    while (cuptiActivityGetNextRecord(buf, valid, &a) == CUPTI_SUCCESS) {
        if (!atomic_load(&collecting))
            continue;
        if (a->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
            size_t i = atomic_fetch_add(&n_kernel, 1);
            if (i < MAX_IDS) kernel_ids[i] = ((CUpti_ActivityKernel10 *)a)->correlationId;
        } else if (a->kind == CUPTI_ACTIVITY_KIND_RUNTIME || a->kind == CUPTI_ACTIVITY_KIND_DRIVER) {
            CUpti_ActivityAPI *api = (CUpti_ActivityAPI *)a;
            size_t i = atomic_fetch_add(&n_api, 1);
            if (i < MAX_IDS) api_ids[i] = api->correlationId;
        }
    }
    free(buf);
}

static void CUPTIAPI on_call(void *u, CUpti_CallbackDomain d, CUpti_CallbackId cbid, const void *info)
{
    const CUpti_CallbackData *cb = (const CUpti_CallbackData *)info;
    if (cb->callbackSite != CUPTI_API_ENTER || !atomic_load(&collecting))
        return;
    int k = d == CUPTI_CB_DOMAIN_DRIVER_API;
    size_t i = atomic_fetch_add(&n_cb[k], 1);
    if (i < MAX_IDS) cb_ids[k][i] = cb->correlationId;
}

static const CUpti_CallbackId runtime_cbids[] = {
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_ptsz_v11060};
static const CUpti_CallbackId driver_cbids[] = {
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz};

static void callbacks(int on)
{
    for (size_t i = 0; i < sizeof runtime_cbids / sizeof *runtime_cbids; i++)
        CHECK(cuptiEnableCallback(on, sub, CUPTI_CB_DOMAIN_RUNTIME_API, runtime_cbids[i]));
    for (size_t i = 0; i < sizeof driver_cbids / sizeof *driver_cbids; i++)
        CHECK(cuptiEnableCallback(on, sub, CUPTI_CB_DOMAIN_DRIVER_API, driver_cbids[i]));
}

static void api_kinds(int on)
{
    if (on) {
        CHECK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_RUNTIME));
        CHECK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_DRIVER));
    } else {
        CHECK(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_RUNTIME));
        CHECK(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_DRIVER));
    }
}

static double now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

static double round_ns(long launches)
{
    double t0 = now_ns();
    for (long i = 0; i < launches; i++)
        empty<<<1, 1>>>();
    cudaDeviceSynchronize();
    return (now_ns() - t0) / launches;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

// kernels whose correlation id is among `ids` (sorted here)
static size_t tied(uint32_t *ids, size_t n)
{
    size_t k = atomic_load(&n_kernel), hit = 0;
    if (n > MAX_IDS) n = MAX_IDS;
    if (k > MAX_IDS) k = MAX_IDS;
    qsort(ids, n, sizeof *ids, cmp_u32);
    for (size_t i = 0; i < k; i++)
        hit += bsearch(&kernel_ids[i], ids, n, sizeof *ids, cmp_u32) != NULL;
    return hit;
}

static void reset(void)
{
    cuptiActivityFlushAll(1);
    atomic_store(&n_kernel, 0);
    atomic_store(&n_cb[0], 0);
    atomic_store(&n_cb[1], 0);
    atomic_store(&n_api, 0);
}

static atomic_int launching;
static void *launcher(void *arg)
{
    long n = 0;
    while (atomic_load(&launching)) {
        empty<<<1, 1>>>();
        if (++n % 1000 == 0)
            cudaStreamSynchronize(0);
    }
    cudaDeviceSynchronize();
    *(long *)arg = n;
    return NULL;
}

// SWITCHES cycles of `way` (1 callbacks, 2 API kinds) off and on from this
// thread while another launches; then how many kernels each tie tied
static void switched(const char *name, int way, int switches)
{
    reset();
    atomic_store(&collecting, 1);
    atomic_store(&launching, 1);
    long launched = 0;
    pthread_t t;
    pthread_create(&t, NULL, launcher, &launched);
    for (int i = 0; i < switches; i++) {
        usleep(2000);
        if (way == 1) callbacks(1); else api_kinds(1);
        usleep(2000);
        if (way == 1) callbacks(0); else api_kinds(0);
    }
    atomic_store(&launching, 0);
    pthread_join(t, NULL);
    cuptiActivityFlushAll(1);
    size_t k = atomic_load(&n_kernel);
    size_t hit = way == 1 ? tied(cb_ids[0], atomic_load(&n_cb[0]))
                          : tied(api_ids, atomic_load(&n_api));
    size_t ties = way == 1 ? atomic_load(&n_cb[0]) : atomic_load(&n_api);
    printf("{\"switched\":\"%s\",\"cycles\":%d,\"launched\":%ld,\"kernels\":%zu,\"ties\":%zu,"
           "\"kernels_tied\":%zu}\n", name, switches, launched, k, ties, hit);
    fflush(stdout);
    atomic_store(&collecting, 0);
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 5;
    long launches = argc > 2 ? atol(argv[2]) : 100000;
    int switches = argc > 3 ? atoi(argv[3]) : 200;
    kernel_ids = (uint32_t *)malloc(MAX_IDS * 4);
    cb_ids[0] = (uint32_t *)malloc(MAX_IDS * 4);
    cb_ids[1] = (uint32_t *)malloc(MAX_IDS * 4);
    api_ids = (uint32_t *)malloc(MAX_IDS * 4);
    cudaFree(0);  // CUDA running before CUPTI comes, as an attach finds it
    double bare = round_ns(launches);
    bare = round_ns(launches);
    CHECK(cuptiActivityRegisterCallbacks(requested, completed));
    CHECK(cuptiSubscribe(&sub, on_call, NULL));
    CHECK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
    round_ns(launches / 10);
    // the ties first: every kernel of a round tied, by each way alone
    reset();
    atomic_store(&collecting, 1);
    callbacks(1);
    round_ns(launches);
    callbacks(0);
    cuptiActivityFlushAll(1);
    printf("{\"tie\":\"cb\",\"kernels\":%zu,\"runtime_ids\":%zu,\"tied_by_runtime\":%zu,"
           "\"driver_ids\":%zu,\"tied_by_driver\":%zu}\n", atomic_load(&n_kernel),
           atomic_load(&n_cb[0]), tied(cb_ids[0], atomic_load(&n_cb[0])),
           atomic_load(&n_cb[1]), tied(cb_ids[1], atomic_load(&n_cb[1])));
    reset();
    api_kinds(1);
    round_ns(launches);
    api_kinds(0);
    cuptiActivityFlushAll(1);
    printf("{\"tie\":\"api\",\"kernels\":%zu,\"api_records\":%zu,\"tied\":%zu}\n",
           atomic_load(&n_kernel), atomic_load(&n_api), tied(api_ids, atomic_load(&n_api)));
    atomic_store(&collecting, 0);
    fflush(stdout);
    // the cost: alternating rounds
    double *w = (double *)calloc(rounds, sizeof(double)), *c = (double *)calloc(rounds, sizeof(double)),
           *a = (double *)calloc(rounds, sizeof(double));
    for (int r = 0; r < rounds; r++) {
        w[r] = round_ns(launches);
        callbacks(1);
        c[r] = round_ns(launches);
        callbacks(0);
        api_kinds(1);
        a[r] = round_ns(launches);
        api_kinds(0);
        cuptiActivityFlushAll(1);
    }
    qsort(w, rounds, sizeof *w, cmp_d);
    qsort(c, rounds, sizeof *c, cmp_d);
    qsort(a, rounds, sizeof *a, cmp_d);
    printf("{\"cost\":\"ns per launch, median of %d rounds of %ld\",\"bare\":%.1f,\"work\":%.1f,"
           "\"cb\":%.1f,\"api\":%.1f}\n", rounds, launches, bare, w[rounds / 2], c[rounds / 2],
           a[rounds / 2]);
    fflush(stdout);
    switched("cb", 1, switches);
    switched("api", 2, switches);
    printf("{\"done\":true}\n");
    return 0;
}
