/* A stand-in libcudart.so.13 for gputime_fake_gpu.c: cudaLaunchKernel and
 * cudaMemcpy fail as the real runtime does without a driver
 * (cudaErrorInsufficientDriver), and each keeps the CPU interval it ran in,
 * read from CLOCK_MONOTONIC on entry and before it returns: inside the call,
 * where CUPTI's callbacks take an API record's start and end. The program
 * reads it back with gputime_fake_api_interval(). Exported under the real
 * library's version node (memstub_cudart.map). Where the stand-in libcupti
 * (fake_libcupti.c, at $FAKE_CUPTI_PATH) is loaded in the process (the
 * GPU-time library put in), a launch calls its fake_cupti_launch() at its
 * entry and exit, as the real runtime has CUPTI's callbacks called, its
 * kernel to take `shared` ns on the GPU.
 */
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

static __thread uint64_t api_start, api_end;  /* each thread its own last call */

static uint64_t monotonic_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

typedef void (*launch_hook)(int site, uint64_t ns);

/* the stand-in libcupti's hook, once it is loaded (looked for at each launch till then) */
static launch_hook cupti_hook(void)
{
	static launch_hook found;
	const char *path = getenv("FAKE_CUPTI_PATH");
	if (!found && path) {
		void *lib = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
		if (lib)
			found = (launch_hook)dlsym(lib, "fake_cupti_launch");
	}
	return found;
}

void gputime_fake_api_interval(uint64_t *start, uint64_t *end)
{
	*start = api_start;
	*end = api_end;
}

cudaError_t cudaLaunchKernel(const void *func, dim3 grid, dim3 block, void **args,
			     size_t shared, cudaStream_t stream)
{
	launch_hook hook = cupti_hook();
	api_start = monotonic_ns();
	if (hook)
		hook(0, shared);  /* CUPTI_API_ENTER */
	(void)func, (void)grid, (void)block, (void)args, (void)stream;
	if (hook)
		hook(1, shared);  /* CUPTI_API_EXIT */
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
