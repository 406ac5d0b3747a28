/* A workload to attach to while it runs: a loop of CUDA runtime calls whose
 * arguments carry the iteration number, so a test can tell which iterations a
 * trace holds and that none is missing or doubled.
 *
 * Usage: cuda_loop [PERIOD_MS] [MAX_ITER] [LIBCUDART]
 * Prints {"pid":P} first, then {"iter":I} before each iteration, and stops
 * after MAX_ITER iterations (default: very many) or as soon as stdin has
 * input or is closed: a test closes it to end the run at a known iteration.
 *
 * Built three ways by the tests: with gcc against the shared libcudart; with
 * nvcc, which links the runtime statically; and with -DLATE_DLOPEN, linking no
 * CUDA at all: it then waits for a line on stdin, dlopen()s LIBCUDART (default
 * libcudart.so.13), prints {"loaded":LIBCUDART}, waits for a second line (a
 * test lets the tracer probe the library meanwhile, however long that takes)
 * and calls through dlsym(), like `import torch` late in a Python process.
 *
 * Calls per iteration I, in order:
 *   cudaGetDeviceCount(&n)
 *   cudaMalloc(&p, 4096 + I)
 *   cudaMemset(0x6000, I, 256)
 *   cudaLaunchKernel(fake_kernel, grid (I+1,1,1), block (32,1,1), args, 0, 0)
 *   cudaFree(0x8000 + I)
 */
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

void fake_kernel(float *a) { (void)a; }

#ifdef LATE_DLOPEN
static cudaError_t (*p_cudaGetDeviceCount)(int *);
static cudaError_t (*p_cudaMalloc)(void **, size_t);
static cudaError_t (*p_cudaMemset)(void *, int, size_t);
static cudaError_t (*p_cudaLaunchKernel)(const void *, dim3, dim3, void **, size_t,
					 cudaStream_t);
static cudaError_t (*p_cudaFree)(void *);
#define CALL(fn) p_##fn
#define BIND(lib, fn) (*(void **)&p_##fn = dlsym(lib, #fn))

static void load_runtime(const char *name)
{
	char line[64];
	if (!fgets(line, sizeof(line), stdin))
		exit(0);
	void *lib = dlopen(name, RTLD_NOW);
	if (!lib) {
		fprintf(stderr, "cuda_loop: %s\n", dlerror());
		exit(1);
	}
	if (!BIND(lib, cudaGetDeviceCount) || !BIND(lib, cudaMalloc) || !BIND(lib, cudaMemset) ||
	    !BIND(lib, cudaLaunchKernel) || !BIND(lib, cudaFree)) {
		fprintf(stderr, "cuda_loop: %s lacks a runtime function\n", name);
		exit(1);
	}
	printf("{\"loaded\":\"%s\"}\n", name);
	if (!fgets(line, sizeof(line), stdin))
		exit(0);
}
#else
#define CALL(fn) fn
#endif

static int stdin_ready(void)
{
	struct pollfd p = {.fd = 0, .events = POLLIN};
	return poll(&p, 1, 0) > 0;
}

int main(int argc, char **argv)
{
	int period_ms = argc > 1 ? atoi(argv[1]) : 10;
	long max_iter = argc > 2 ? atol(argv[2]) : 1000000;
	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("{\"pid\":%d}\n", (int)getpid());
#ifdef LATE_DLOPEN
	load_runtime(argc > 3 ? argv[3] : "libcudart.so.13");
#endif
	for (long i = 0; i < max_iter && !stdin_ready(); i++) {
		printf("{\"iter\":%ld}\n", i);
		int n = 0;
		CALL(cudaGetDeviceCount)(&n);
		void *p = NULL;
		CALL(cudaMalloc)(&p, 4096 + (size_t)i);
		CALL(cudaMemset)((void *)0x6000, (int)i, 256);
		dim3 grid = {(unsigned)i + 1, 1, 1}, block = {32, 1, 1};
		float *dev = (float *)0x9000;
		void *kargs[] = {&dev};
		CALL(cudaLaunchKernel)((const void *)fake_kernel, grid, block, kargs, 0, 0);
		CALL(cudaFree)((void *)(uintptr_t)(0x8000 + i));
		usleep(period_ms * 1000);
	}
	return 0;
}
