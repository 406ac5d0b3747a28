// A CUDA program that launches its kernels from its first CUDA call on and
// times them with CUDA events: the oracle for --gpu-time in a process that
// joins a trace later. Kernels go in batches of 10 between two events, so
// that the GPU runs each batch back to back (a launch takes microseconds, a
// kernel ~0.1 ms or more) and the events measure kernels, not the host's
// launch gaps. Prints "kernels N event_ms X" (X: the batches' event time, ms).
//   nvcc -O2 -o event_kernels event_kernels.cu
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

__global__ void spin(long long cycles, int *out)
{
    long long start = clock64();
    while (clock64() - start < cycles)
        ;
    if (threadIdx.x == 0)
        out[blockIdx.x] = 1;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 200;
    long long cycles = argc > 2 ? atoll(argv[2]) : 200000;  // ~0.1 ms at ~2 GHz
    int *out;
    cudaEvent_t a, b;
    float total = 0, ms;
    // the first CUDA calls: a launch comes right after
    cudaMalloc(&out, 1024 * sizeof(int));
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    spin<<<8, 64>>>(cycles, out);  // the first launch, at once
    for (int i = 1; i < n; i += 10) {
        cudaEventRecord(a);
        for (int k = i; k < n && k < i + 10; k++)
            spin<<<8, 64>>>(cycles, out);
        cudaEventRecord(b);
        cudaEventSynchronize(b);
        cudaEventElapsedTime(&ms, a, b);
        total += ms;
    }
    cudaError_t err = cudaDeviceSynchronize();
    // the first kernel, outside the batches, counted at the batches' mean
    printf("kernels %d event_ms %.3f %s\n", n, n > 1 ? total * n / (n - 1) : 0.0,
           cudaGetErrorString(err));
    cudaFree(out);
    return err != cudaSuccess;
}
