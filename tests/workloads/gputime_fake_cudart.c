/* A stand-in libcudart.so.13 for gputime_fake_gpu.c: cudaLaunchKernel and
 * cudaMemcpy fail as the real runtime does without a driver
 * (cudaErrorInsufficientDriver), and each keeps the CPU interval it ran in,
 * read from CLOCK_MONOTONIC on entry and before it returns: inside the call,
 * where CUPTI's callbacks take an API record's start and end. The program
 * reads it back with gputime_fake_api_interval(). Exported under the real
 * library's version node (memstub_cudart.map).
 */
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <time.h>

static __thread uint64_t api_start, api_end;  /* each thread its own last call */

static uint64_t monotonic_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void gputime_fake_api_interval(uint64_t *start, uint64_t *end)
{
	*start = api_start;
	*end = api_end;
}

cudaError_t cudaLaunchKernel(const void *func, dim3 grid, dim3 block, void **args,
			     size_t shared, cudaStream_t stream)
{
	api_start = monotonic_ns();
	(void)func, (void)grid, (void)block, (void)args, (void)shared, (void)stream;
	api_end = monotonic_ns();
	return cudaErrorInsufficientDriver;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind)
{
	api_start = monotonic_ns();
	(void)dst, (void)src, (void)count, (void)kind;
	api_end = monotonic_ns();
	return cudaErrorInsufficientDriver;
}
