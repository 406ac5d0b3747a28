// demo.cu: a small but complete CUDA runtime program for `scripts/demo` to trace.
//
// It walks the usual life of a GPU job: pick a device, make a stream and two
// events, allocate three buffers, copy two inputs in, launch vecAdd on the
// stream, time it with the events, copy the result out and free everything.
// Every call is checked, but a failure is only reported, never fatal: on a
// machine without a GPU or driver each call prints its error string and the
// program still runs to the end and exits 0, so the tracer has the whole call
// sequence to show either way.
//
// Build: nvcc -cudart=shared -o build/demo examples/demo.cu
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

static int failures = 0;

// Reports a failed call with its name and error string, and lets the program go on.
static bool check(cudaError_t err, const char *call) {
    if (err == cudaSuccess) {
        printf("  ok    %s\n", call);
        return true;
    }
    printf("  FAIL  %s: %s (%s)\n", call, cudaGetErrorString(err), cudaGetErrorName(err));
    failures++;
    return false;
}
#define CHECK(call) check((call), #call)

__global__ void vecAdd(const float *a, const float *b, float *c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}

int main() {
    const int n = 1 << 20;
    const size_t bytes = n * sizeof(float);

    float *h_a = (float *)malloc(bytes), *h_b = (float *)malloc(bytes), *h_c = (float *)malloc(bytes);
    for (int i = 0; i < n; i++) {
        h_a[i] = (float)i;
        h_b[i] = 2.0f * i;
        h_c[i] = 0.0f;
    }

    int devices = 0;
    CHECK(cudaGetDeviceCount(&devices));
    printf("devices: %d\n", devices);
    CHECK(cudaSetDevice(0));

    cudaStream_t stream = nullptr;
    cudaEvent_t start = nullptr, stop = nullptr;
    CHECK(cudaStreamCreate(&stream));
    CHECK(cudaEventCreate(&start));
    CHECK(cudaEventCreate(&stop));

    float *d_a = nullptr, *d_b = nullptr, *d_c = nullptr;
    CHECK(cudaMalloc((void **)&d_a, bytes));
    CHECK(cudaMalloc((void **)&d_b, bytes));
    CHECK(cudaMalloc((void **)&d_c, bytes));

    CHECK(cudaMemcpy(d_a, h_a, bytes, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(d_b, h_b, bytes, cudaMemcpyHostToDevice));

    const dim3 block(256);
    const dim3 grid((n + block.x - 1) / block.x);
    // The first launch also loads the module (CUDA loads kernels lazily), so the time
    // measured here is mostly that, not the addition.
    CHECK(cudaEventRecord(start, stream));
    vecAdd<<<grid, block, 0, stream>>>(d_a, d_b, d_c, n);
    CHECK(cudaGetLastError());  // a launch reports its error here, not through a return value
    CHECK(cudaEventRecord(stop, stream));
    CHECK(cudaStreamSynchronize(stream));

    CHECK(cudaMemcpy(h_c, d_c, bytes, cudaMemcpyDeviceToHost));

    float ms = 0.0f;
    if (CHECK(cudaEventElapsedTime(&ms, start, stop))) printf("vecAdd: %d elements in %.3f ms\n", n, ms);

    if (failures == 0) {
        int wrong = 0;
        for (int i = 0; i < n; i++) wrong += h_c[i] != 3.0f * i;
        printf("result: %s (%d of %d wrong)\n", wrong ? "WRONG" : "correct", wrong, n);
    }

    CHECK(cudaFree(d_a));
    CHECK(cudaFree(d_b));
    CHECK(cudaFree(d_c));
    CHECK(cudaEventDestroy(start));
    CHECK(cudaEventDestroy(stop));
    CHECK(cudaStreamDestroy(stream));

    free(h_a);
    free(h_b);
    free(h_c);
    printf("%d call(s) failed\n", failures);
    return 0;  // the demo is there to be traced; failed calls are its output, not its exit status
}
