// Kernels on several streams at once, each timed with CUDA events on its own
// stream: the independent source that scripts/gpu/check-gputime.sh checks
// cudaprobe's --gpu-time against (benchmarks/gputime_compare.py), and the
// 60-second clock-drift run.
//
//   multistream streams STREAMS ITERS SPIN_US
//       ITERS rounds; in each, on every stream: event, spin(SPIN_US), event.
//       Prints one {"op": "spin/sS", "ms": elapsed} line per region, in the
//       order the regions were issued (the order of their cudaEventRecord
//       calls), after a final synchronize.
//   multistream drift SECONDS
//       Every second a marker: synchronize, CLOCK_MONOTONIC before, launch
//       marker_kernel, synchronize, CLOCK_MONOTONIC after; printed as
//       {"marker": i, "before_ns": .., "after_ns": ..}. Between markers the GPU
//       is kept busy with 1 ms spins on two streams, as a real program.
//
//   nvcc -O2 -o multistream benchmarks/multistream.cu
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHECK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
    fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_)); exit(1); } } while (0)

__global__ void spin(long long cycles)
{
    long long start = clock64();
    while (clock64() - start < cycles) {
    }
}

__global__ void marker_kernel(int *flag) { *flag += 1; }

static long long cycles_per_us(void)
{
    int khz = 0;
    CHECK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0));
    return khz / 1000;
}

static long long monotonic_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int run_streams(int nstreams, int iters, int spin_us)
{
    long long cycles = cycles_per_us() * spin_us;
    cudaStream_t *streams = (cudaStream_t *)calloc(nstreams, sizeof *streams);
    int regions = nstreams * iters;
    cudaEvent_t *ev = (cudaEvent_t *)calloc(2 * regions, sizeof *ev);
    for (int s = 0; s < nstreams; s++)
        CHECK(cudaStreamCreateWithFlags(&streams[s], cudaStreamNonBlocking));
    for (int i = 0; i < 2 * regions; i++)
        CHECK(cudaEventCreate(&ev[i]));
    spin<<<1, 1>>>(cycles);  // warm-up: the module loaded before anything is timed
    CHECK(cudaDeviceSynchronize());
    for (int it = 0; it < iters; it++)
        for (int s = 0; s < nstreams; s++) {
            int r = it * nstreams + s;
            CHECK(cudaEventRecord(ev[2 * r], streams[s]));
            spin<<<1, 1, 0, streams[s]>>>(cycles);
            CHECK(cudaEventRecord(ev[2 * r + 1], streams[s]));
        }
    CHECK(cudaDeviceSynchronize());
    for (int r = 0; r < regions; r++) {
        float ms = 0;
        CHECK(cudaEventElapsedTime(&ms, ev[2 * r], ev[2 * r + 1]));
        printf("{\"op\": \"spin/s%d\", \"ms\": %.6f}\n", r % nstreams, ms);
    }
    return 0;
}

static int run_drift(int seconds)
{
    long long cycles = cycles_per_us() * 1000;
    cudaStream_t busy[2];
    int *flag;
    CHECK(cudaMalloc(&flag, sizeof *flag));
    for (int s = 0; s < 2; s++)
        CHECK(cudaStreamCreateWithFlags(&busy[s], cudaStreamNonBlocking));
    marker_kernel<<<1, 1>>>(flag);
    CHECK(cudaDeviceSynchronize());
    long long end = monotonic_ns() + seconds * 1000000000LL;
    for (int i = 0; i <= seconds; i++) {
        CHECK(cudaDeviceSynchronize());
        long long before = monotonic_ns();
        marker_kernel<<<1, 1>>>(flag);
        CHECK(cudaDeviceSynchronize());
        long long after = monotonic_ns();
        printf("{\"marker\": %d, \"before_ns\": %lld, \"after_ns\": %lld}\n", i, before, after);
        fflush(stdout);
        if (i == seconds)
            break;
        // a second of work: spins on two streams, the host waiting now and then
        long long next = before + 1000000000LL;
        while (monotonic_ns() < next && monotonic_ns() < end) {
            for (int k = 0; k < 20; k++)
                spin<<<1, 1, 0, busy[k & 1]>>>(cycles);
            CHECK(cudaStreamSynchronize(busy[0]));
        }
    }
    CHECK(cudaDeviceSynchronize());
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 5 && !strcmp(argv[1], "streams"))
        return run_streams(atoi(argv[2]), atoi(argv[3]), atoi(argv[4]));
    if (argc == 3 && !strcmp(argv[1], "drift"))
        return run_drift(atoi(argv[2]));
    fprintf(stderr, "usage: multistream streams STREAMS ITERS SPIN_US | drift SECONDS\n");
    return 2;
}
