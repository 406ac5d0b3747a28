/* A workload for integration tests: calls the CUDA driver API directly with
 * known arguments and prints one JSON line per call with what it passed, what
 * the call returned and what it wrote, so tests can compare cudaprobe's
 * decoded events against the truth.
 *
 * Built against cuda.h (so cuMemAlloc is cuMemAlloc_v2, ...) and linked to
 * libcuda.so.1: Debian's 535 driver library (no GPU: cuInit returns
 * CUDA_ERROR_NO_DEVICE, later calls CUDA_ERROR_NOT_INITIALIZED), or
 * fake_libcuda.c's through LD_LIBRARY_PATH, whose calls succeed and make
 * handles, so that kernel-handle naming can be checked without a GPU.
 * A handle whose making failed is passed on as NULL, as the 535 library
 * dereferences made-up handles before it checks that cuInit succeeded.
 * Usage: driver_calls
 */
#include <cuda.h>
#include <stdint.h>
#include <stdio.h>

/* what CUDA <= 12 headers called cuCtxCreate; CUDA 13's cuda.h maps it to _v4 */
CUresult CUDAAPI cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev);

#define HEX(p) ((unsigned long)(uintptr_t)(p))
/* what the program goes on with after a call that should have made `h` */
#define MADE(r, h) ((r) == CUDA_SUCCESS ? (h) : NULL)

static const char ptx[] = ".version 7.0\n.target sm_50\n.address_size 64\n"
			  ".visible .entry _Z6vecAddPKfS0_Pfi()\n{\n\tret;\n}\n";

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	CUresult r = cuInit(0);
	printf("{\"event\":\"cuInit\",\"ret\":%d}\n", r);

	int version = -1;
	r = cuDriverGetVersion(&version);
	printf("{\"event\":\"cuDriverGetVersion\",\"ret\":%d,\"driverVersion\":%d}\n", r, version);

	int count = 42;
	r = cuDeviceGetCount(&count);
	printf("{\"event\":\"cuDeviceGetCount\",\"ret\":%d,\"count\":%d}\n", r, count);

	CUdevice dev = 7;
	r = cuDeviceGet(&dev, 0);
	printf("{\"event\":\"cuDeviceGet\",\"ret\":%d,\"device\":%d}\n", r, dev);

	CUcontext ctx = (CUcontext)0xc0;
	r = cuCtxCreate_v2(&ctx, 4, 0);
	printf("{\"event\":\"cuCtxCreate_v2\",\"ret\":%d,\"pctx\":\"%#lx\"}\n", r, HEX(ctx));

	CUdeviceptr dptr = 0xdead0000;
	r = cuMemAlloc(&dptr, (size_t)1 << 20);
	printf("{\"event\":\"cuMemAlloc_v2\",\"ret\":%d,\"dptr\":\"%#lx\"}\n", r, HEX(dptr));

	CUdeviceptr pitched = 0xdead1000;
	size_t pitch = 77;
	r = cuMemAllocPitch(&pitched, &pitch, 1000, 10, 4);
	printf("{\"event\":\"cuMemAllocPitch_v2\",\"ret\":%d,\"dptr\":\"%#lx\",\"pPitch\":%zu}\n",
	       r, HEX(pitched), pitch);

	r = cuMemcpyHtoD((CUdeviceptr)0x1000, (const void *)0x2000, 4096);
	printf("{\"event\":\"cuMemcpyHtoD_v2\",\"ret\":%d}\n", r);

	r = cuMemcpyDtoHAsync((void *)0x3000, (CUdeviceptr)0x4000, 123, (CUstream)0x5000);
	printf("{\"event\":\"cuMemcpyDtoHAsync_v2\",\"ret\":%d}\n", r);

	r = cuMemsetD8((CUdeviceptr)0x6000, 0xab, 256);
	printf("{\"event\":\"cuMemsetD8_v2\",\"ret\":%d}\n", r);

	/* (not cuMemsetD32Async: the 535 library crashes in it before cuInit succeeded) */
	r = cuMemsetD32((CUdeviceptr)0x6000, 0xfffffffe, 64);
	printf("{\"event\":\"cuMemsetD32_v2\",\"ret\":%d}\n", r);

	CUmodule mod = (CUmodule)0x30d;
	r = cuModuleLoadData(&mod, ptx);
	printf("{\"event\":\"cuModuleLoadData\",\"ret\":%d,\"module\":\"%#lx\",\"image\":\"%#lx\"}\n",
	       r, HEX(mod), HEX(ptx));
	mod = MADE(r, mod);

	CUfunction f = (CUfunction)0xf00d;
	r = cuModuleGetFunction(&f, mod, "_Z6vecAddPKfS0_Pfi");
	printf("{\"event\":\"cuModuleGetFunction\",\"ret\":%d,\"hfunc\":\"%#lx\"}\n", r, HEX(f));
	f = MADE(r, f);

	float *dev_in = (float *)0x9000;
	void *params[] = {&dev_in};
	r = cuLaunchKernel(f, 4, 2, 1, 256, 1, 1, 1024, (CUstream)0x7000, params, NULL);
	printf("{\"event\":\"cuLaunchKernel\",\"ret\":%d,\"f\":\"%#lx\",\"kernelParams\":\"%#lx\"}\n",
	       r, HEX(f), HEX(params));

	CUlaunchConfig cfg = {.gridDimX = 8, .gridDimY = 4, .gridDimZ = 2, .blockDimX = 128,
			      .blockDimY = 1, .blockDimZ = 1, .sharedMemBytes = 4096,
			      .hStream = (CUstream)0xabc, .attrs = NULL, .numAttrs = 0};
	r = cuLaunchKernelEx(&cfg, f, params, NULL);
	printf("{\"event\":\"cuLaunchKernelEx\",\"ret\":%d,\"config\":\"%#lx\"}\n", r, HEX(&cfg));

	CUlibrary lib = (CUlibrary)0x11b;
	r = cuLibraryLoadData(&lib, ptx, NULL, NULL, 0, NULL, NULL, 0);
	printf("{\"event\":\"cuLibraryLoadData\",\"ret\":%d,\"library\":\"%#lx\"}\n", r, HEX(lib));
	lib = MADE(r, lib);

	CUkernel kernel = (CUkernel)0x4e1;
	r = cuLibraryGetKernel(&kernel, lib, "_Z5scaleIfEvPT_S0_i");
	printf("{\"event\":\"cuLibraryGetKernel\",\"ret\":%d,\"pKernel\":\"%#lx\"}\n", r,
	       HEX(kernel));
	kernel = MADE(r, kernel);

	CUfunction kf = (CUfunction)0xf11;
	r = cuKernelGetFunction(&kf, kernel);
	printf("{\"event\":\"cuKernelGetFunction\",\"ret\":%d,\"pFunc\":\"%#lx\"}\n", r, HEX(kf));
	kf = MADE(r, kf);

	r = cuLaunchCooperativeKernel(kf, 16, 1, 1, 32, 2, 1, 0, (CUstream)0x7000, params);
	printf("{\"event\":\"cuLaunchCooperativeKernel\",\"ret\":%d,\"f\":\"%#lx\"}\n", r, HEX(kf));

	/* a CUkernel where a CUfunction goes: allowed, and named too */
	r = cuLaunchKernel((CUfunction)kernel, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL);
	printf("{\"event\":\"cuLaunchKernel\",\"ret\":%d,\"f\":\"%#lx\"}\n", r, HEX(kernel));

	CUstream stream = (CUstream)0x5eed;
	r = cuStreamCreate(&stream, 1);
	printf("{\"event\":\"cuStreamCreate\",\"ret\":%d,\"phStream\":\"%#lx\"}\n", r, HEX(stream));
	stream = MADE(r, stream);

	CUevent ev = (CUevent)0xe1;
	r = cuEventCreate(&ev, 2);
	printf("{\"event\":\"cuEventCreate\",\"ret\":%d,\"phEvent\":\"%#lx\"}\n", r, HEX(ev));
	ev = MADE(r, ev);

	r = cuEventRecord(ev, stream);
	printf("{\"event\":\"cuEventRecord\",\"ret\":%d}\n", r);

	r = cuStreamWaitEvent(stream, ev, 0);
	printf("{\"event\":\"cuStreamWaitEvent\",\"ret\":%d}\n", r);

	r = cuStreamSynchronize(stream);
	printf("{\"event\":\"cuStreamSynchronize\",\"ret\":%d}\n", r);

	r = cuEventDestroy(ev);
	printf("{\"event\":\"cuEventDestroy_v2\",\"ret\":%d}\n", r);

	r = cuStreamDestroy(stream);
	printf("{\"event\":\"cuStreamDestroy_v2\",\"ret\":%d}\n", r);

	r = cuMemFree((CUdeviceptr)0x8000);
	printf("{\"event\":\"cuMemFree_v2\",\"ret\":%d}\n", r);

	r = cuCtxSynchronize();
	printf("{\"event\":\"cuCtxSynchronize\",\"ret\":%d}\n", r);

	r = cuModuleUnload(mod);
	printf("{\"event\":\"cuModuleUnload\",\"ret\":%d}\n", r);
	return 0;
}
