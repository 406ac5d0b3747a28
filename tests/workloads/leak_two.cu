// Leaks two buffers and frees one: what `cudaprobe memory` must report, with
// sizes and call sites. Also a free that fails and an allocation that fails,
// which change nothing. Prints one JSON line per allocation it made (the
// truth the tests and the GPU check compare the leak report with).
// Usage: leak_two [LINGER_MS [DELAY_MS | -]]  (sleep LINGER_MS before exiting,
// DELAY_MS before the first call: time to attach with --pid; with `-`, until a
// line, or the end, comes on stdin: a test lets it go once cudaprobe has attached)
// Host code only: it runs on the CUDA runtime, or on tests/workloads/memstub_*
// where there is no GPU. Build: nvcc -cudart=shared -g -Xcompiler -fno-omit-frame-pointer
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void report(const char *site, const char *kind, void *p, size_t size, bool freed)
{
	printf("{\"site\":\"%s\",\"kind\":\"%s\",\"ptr\":\"%#lx\",\"size\":%zu,\"freed\":%s}\n",
	       site, kind, (unsigned long)p, size, freed ? "true" : "false");
}

static void check(cudaError_t r, const char *what)
{
	if (r != cudaSuccess) {
		fprintf(stderr, "leak_two: %s: %s\n", what, cudaGetErrorString(r));
		exit(1);
	}
}

__attribute__((noinline)) void *alloc_weights(size_t size)
{
	void *p = NULL;
	check(cudaMalloc(&p, size), "cudaMalloc (weights)");
	return p;
}

__attribute__((noinline)) void *alloc_scratch(size_t size)
{
	void *p = NULL;
	check(cudaMalloc(&p, size), "cudaMalloc (scratch)");
	return p;
}

__attribute__((noinline)) void *alloc_staging(size_t size)
{
	void *p = NULL;
	check(cudaMallocHost(&p, size), "cudaMallocHost (staging)");
	return p;
}

int main(int argc, char **argv)
{
	int linger_ms = argc > 1 ? atoi(argv[1]) : 0;
	int delay_ms = argc > 2 ? atoi(argv[2]) : 0;
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc > 2 && strcmp(argv[2], "-") == 0) {
		printf("waiting\n");
		char line[16];
		if (!fgets(line, sizeof(line), stdin))
			line[0] = 0;
	} else if (delay_ms > 0) {
		printf("waiting\n");
		usleep(delay_ms * 1000);
	}
	size_t weights_size = 3 << 20, scratch_size = 1 << 20, staging_size = 256 << 10;
	void *weights = alloc_weights(weights_size);
	void *scratch = alloc_scratch(scratch_size);
	void *staging = alloc_staging(staging_size);
	check(cudaFree(scratch), "cudaFree (scratch)");
	report("alloc_weights", "device", weights, weights_size, false);
	report("alloc_scratch", "device", scratch, scratch_size, true);
	report("alloc_staging", "host-pinned", staging, staging_size, false);
	// neither changes what is allocated
	void *too_big = NULL;
	if (cudaMalloc(&too_big, (size_t)1 << 50) == cudaSuccess)
		return 2;
	if (cudaFree((void *)0x1234) == cudaSuccess)
		return 3;
	if (linger_ms > 0)
		usleep(linger_ms * 1000);
	return 0;
}
