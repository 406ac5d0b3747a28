/* A driver-API program for the GPU check (scripts/gpu/check-driver.sh): loads
 * PTX with cuModuleLoadData and cuLibraryLoadData, gets kernels by name, runs
 * them with cuLaunchKernel, cuLaunchKernelEx and cuLaunchCooperativeKernel,
 * and checks the result. Without a GPU every call after cuInit fails, and it
 * says so and goes on. Build with -DPRIMARY_CTX for a driver older than CUDA 13,
 * which has no cuCtxCreate_v4 (what cuda.h 13 makes of cuCtxCreate).
 * Usage: driver_vecadd KERNELS.ptx */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>

#define N 4096
#define CHECK(call)                                                              \
	do {                                                                     \
		CUresult r_ = (call);                                            \
		if (r_ != CUDA_SUCCESS) {                                        \
			const char *name_ = NULL;                                \
			cuGetErrorName(r_, &name_);                              \
			fprintf(stderr, "%s: %s\n", #call, name_ ? name_ : "?"); \
			failures++;                                              \
		}                                                                \
	} while (0)

static char *read_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	long size = ftell(f);
	rewind(f);
	char *text = calloc(1, size + 1);
	if (text && fread(text, 1, size, f) != (size_t)size) {
		free(text);
		text = NULL;
	}
	fclose(f);
	return text;
}

int main(int argc, char **argv)
{
	int failures = 0;
	char *ptx = argc > 1 ? read_file(argv[1]) : NULL;
	if (!ptx) {
		fprintf(stderr, "usage: driver_vecadd KERNELS.ptx\n");
		return 2;
	}
	CUdevice dev = 0;
	CUcontext ctx = NULL;
	CUmodule mod = NULL;
	CUlibrary lib = NULL;
	CUfunction vec_add = NULL, scale_fn = NULL;
	CUkernel scale_kernel = NULL;
	CUstream stream = NULL;
	CUdeviceptr a = 0, b = 0, c = 0;
	static float host_a[N], host_b[N], host_c[N];
	for (int i = 0; i < N; i++)
		host_a[i] = (float)i, host_b[i] = 2.0f * i;

	CHECK(cuInit(0));
	CHECK(cuDeviceGet(&dev, 0));
#ifdef PRIMARY_CTX
	CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
	CHECK(cuCtxSetCurrent(ctx));
#else
	CHECK(cuCtxCreate(&ctx, NULL, 0, dev));
#endif
	CHECK(cuModuleLoadData(&mod, ptx));
	CHECK(cuModuleGetFunction(&vec_add, mod, "vecAdd"));
	CHECK(cuLibraryLoadData(&lib, ptx, NULL, NULL, 0, NULL, NULL, 0));
	CHECK(cuLibraryGetKernel(&scale_kernel, lib, "_Z5scaleIfEvPT_S0_i"));
	CHECK(cuKernelGetFunction(&scale_fn, scale_kernel));
	CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
	CHECK(cuMemAlloc(&a, sizeof host_a));
	CHECK(cuMemAlloc(&b, sizeof host_b));
	CHECK(cuMemAlloc(&c, sizeof host_c));
	CHECK(cuMemcpyHtoD(a, host_a, sizeof host_a));
	CHECK(cuMemcpyHtoDAsync(b, host_b, sizeof host_b, stream));

	int n = N;
	void *add_args[] = {&a, &b, &c, &n};
	CHECK(cuLaunchKernel(vec_add, N / 256, 1, 1, 256, 1, 1, 0, stream, add_args, NULL));
	float two = 2.0f;
	void *scale_args[] = {&c, &two, &n};
	CUlaunchConfig cfg = {.gridDimX = N / 128, .gridDimY = 1, .gridDimZ = 1,
			      .blockDimX = 128, .blockDimY = 1, .blockDimZ = 1,
			      .sharedMemBytes = 0, .hStream = stream, .attrs = NULL, .numAttrs = 0};
	CHECK(cuLaunchKernelEx(&cfg, scale_fn, scale_args, NULL));
	/* a CUkernel where a CUfunction goes */
	CHECK(cuLaunchCooperativeKernel((CUfunction)scale_kernel, 4, 1, 1, 64, 1, 1, 0, stream,
					scale_args));
	CHECK(cuStreamSynchronize(stream));
	CHECK(cuMemcpyDtoH(host_c, c, sizeof host_c));
	int wrong = 0;
	for (int i = 0; i < N; i++) {
		/* (a + b) * 2, and * 2 again for the first 256 by the cooperative launch */
		float want = 3.0f * i * 2.0f * (i < 256 ? 2.0f : 1.0f);
		wrong += host_c[i] != want;
	}
	printf("driver_vecadd: %d wrong of %d, %d failed calls\n", wrong, N, failures);

	CHECK(cuMemFree(a));
	CHECK(cuMemFree(b));
	CHECK(cuMemFree(c));
	CHECK(cuStreamDestroy(stream));
	CHECK(cuLibraryUnload(lib));
	CHECK(cuModuleUnload(mod));
#ifdef PRIMARY_CTX
	CHECK(cuDevicePrimaryCtxRelease(dev));
#else
	CHECK(cuCtxDestroy(ctx));
#endif
	free(ptx);
	return wrong || failures ? 1 : 0;
}
