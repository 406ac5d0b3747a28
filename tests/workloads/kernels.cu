/* Runtime launches of kernels whose names the tests check: a plain kernel, a
 * template twice, one in a namespace, and (built with -DWITH_LIBKERN) one in a
 * shared library, through <<<>>>, cudaLaunchKernelExC and
 * cudaLaunchCooperativeKernel. Without a GPU every launch fails, but the host
 * stub address each passes names the kernel all the same. On a GPU (the
 * GPU check) the kernels run, on a buffer of cudaMalloc's.
 * Prints one JSON line per launch: the event, the stub address, the name.
 * Usage: kernels [LINGER_MS]  (wait after the first call: see the tests) */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#ifdef WITH_LIBKERN
extern "C" const void *libkern_launch(int *buf);
#endif

__global__ void vecAdd(const float *a, const float *b, float *c, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		c[i] = a[i] + b[i];
}

template <typename T> __global__ void scale(T *x, T a, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		x[i] *= a;
}

namespace ops {
__global__ void fill(int *x, int v) { x[threadIdx.x] = v; }
}

static void said(const char *event, const void *stub, const char *name)
{
	printf("{\"event\":\"%s\",\"func\":\"%#lx\",\"func_name\":\"%s\"}\n", event,
	       (unsigned long)stub, name);
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	int count = 0;
	cudaGetDeviceCount(&count);
	if (argc > 1)
		usleep(atoi(argv[1]) * 1000);
	void *buf = NULL; /* 1 MiB: enough for every launch below */
	cudaMalloc(&buf, 1 << 20);
	float *f = (float *)buf;

	vecAdd<<<4, 256>>>(f, f, f, 1024);
	said("cudaLaunchKernel", (const void *)vecAdd,
	     "vecAdd(float const*, float const*, float*, int)");
	scale<float><<<2, 128>>>(f, 2.0f, 256);
	said("cudaLaunchKernel", (const void *)scale<float>, "void scale<float>(float*, float, int)");
	scale<double><<<2, 128, 512>>>((double *)buf, 2.0, 256);
	said("cudaLaunchKernel", (const void *)scale<double>,
	     "void scale<double>(double*, double, int)");

	cudaLaunchConfig_t cfg = {};
	cfg.gridDim = dim3(8, 4, 2);
	cfg.blockDim = dim3(32, 1, 1);
	cfg.dynamicSmemBytes = 4096;
	cudaLaunchKernelEx(&cfg, ops::fill, (int *)buf, 3);
	said("cudaLaunchKernelExC", (const void *)ops::fill, "ops::fill(int*, int)");

	const float *a = f;
	int n = 1024;
	void *args[] = {&a, &a, &f, &n};
	cudaLaunchCooperativeKernel((const void *)vecAdd, dim3(2), dim3(64), args, 0, 0);
	said("cudaLaunchCooperativeKernel", (const void *)vecAdd,
	     "vecAdd(float const*, float const*, float*, int)");
#ifdef WITH_LIBKERN
	said("cudaLaunchKernel", libkern_launch((int *)buf), "kern::in_library(int*, int)");
#endif
	cudaError_t r = cudaDeviceSynchronize();
	fprintf(stderr, "kernels: cudaDeviceSynchronize: %s\n", cudaGetErrorName(r));
	cudaFree(buf);
	return 0;
}
