/* Memory calls of every kind at both layers, with known results, for
 * `cudaprobe memory` tests on the memstub libraries (LD_LIBRARY_PATH=
 * tests/workloads/bin/memstub): a runtime allocation that is freed, a direct
 * driver allocation, managed, async-pool, pitched and host-pinned memory, a
 * failed free and a failed allocation, cudaDeviceReset with memory still
 * allocated, then one allocation that is never freed. Prints one JSON line
 * per allocation with the pointer and size it got.
 * Usage: memory_mix [LINGER_MS]  (LINGER_MS: sleep before exiting)
 */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static void *got(const char *what, const char *kind, cudaError_t r, void *p, size_t size)
{
	if (r != cudaSuccess) {
		fprintf(stderr, "memory_mix: %s failed (%d)\n", what, r);
		exit(1);
	}
	printf("{\"call\":\"%s\",\"kind\":\"%s\",\"ptr\":\"%#lx\",\"size\":%zu}\n", what, kind,
	       (unsigned long)p, size);
	return p;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	void *a, *m, *s, *p, *h, *z;
	CUdeviceptr d;
	size_t pitch;
	/* each call before its got(): arguments are evaluated in no set order */
	cudaError_t r = cudaMalloc(&a, 1 << 20);
	got("cudaMalloc", "device", r, a, 1 << 20);
	r = cuMemAlloc(&d, 2 << 20) == CUDA_SUCCESS ? cudaSuccess : cudaErrorMemoryAllocation;
	got("cuMemAlloc_v2", "device", r, (void *)d, 2 << 20);
	r = cudaMallocManaged(&m, 4 << 20, cudaMemAttachGlobal);
	got("cudaMallocManaged", "managed", r, m, 4 << 20);
	r = cudaMallocAsync(&s, 512 << 10, 0);
	got("cudaMallocAsync", "async-pool", r, s, 512 << 10);
	if (cudaFreeAsync(s, 0) != cudaSuccess)
		return 2;
	r = cudaMallocPitch(&p, &pitch, 1000, 10);
	got("cudaMallocPitch", "device", r, p, pitch * 10);
	r = cudaHostAlloc(&h, 8 << 10, 0);
	got("cudaHostAlloc", "host-pinned", r, h, 8 << 10);
	if (cudaFreeHost(h) != cudaSuccess || cudaFree(a) != cudaSuccess)
		return 3;
	/* fail: change nothing */
	void *none;
	if (cudaFree((void *)0x1234) == cudaSuccess || cudaMalloc(&none, (size_t)1 << 50) == 0)
		return 4;
	/* d, m and p go with the context */
	if (cudaDeviceReset() != cudaSuccess)
		return 5;
	r = cudaMalloc(&z, 64 << 10);
	got("cudaMalloc", "device", r, z, 64 << 10);
	if (argc > 1)
		usleep(atoi(argv[1]) * 1000);
	return 0;
}
