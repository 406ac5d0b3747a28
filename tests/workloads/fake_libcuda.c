/* A stand-in libcuda.so.1 for driver_calls.c where there is no GPU: every call
 * succeeds and writes fixed, recognisable values and handles, so that tests
 * can follow a CUfunction from cuModuleGetFunction to cuLaunchKernel. It
 * defines only what driver_calls.c calls, under the symbols cuda.h maps the
 * names to (cuMemAlloc is cuMemAlloc_v2 ...), as the real library exports.
 */
#include <cuda.h>
#include <stdint.h>
#include <string.h>

#define OK return CUDA_SUCCESS
#define HANDLE(type, v) ((type)(uintptr_t)(v))

CUresult CUDAAPI cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev);

CUresult CUDAAPI cuInit(unsigned int Flags) { (void)Flags; OK; }
CUresult CUDAAPI cuDriverGetVersion(int *driverVersion) { *driverVersion = 13000; OK; }
CUresult CUDAAPI cuDeviceGetCount(int *count) { *count = 1; OK; }
CUresult CUDAAPI cuDeviceGet(CUdevice *device, int ordinal) { *device = ordinal; OK; }

CUresult CUDAAPI cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
	(void)flags, (void)dev;
	*pctx = HANDLE(CUcontext, 0xc0c0);
	OK;
}

CUresult CUDAAPI cuMemAlloc(CUdeviceptr *dptr, size_t bytesize)
{
	(void)bytesize;
	*dptr = 0x7f0000200000;
	OK;
}

CUresult CUDAAPI cuMemAllocPitch(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes,
				 size_t Height, unsigned int ElementSizeBytes)
{
	(void)WidthInBytes, (void)Height, (void)ElementSizeBytes;
	*dptr = 0x7f0000400000;
	*pPitch = 1024;
	OK;
}

CUresult CUDAAPI cuMemcpyHtoD(CUdeviceptr d, const void *s, size_t n) { (void)d, (void)s, (void)n; OK; }

CUresult CUDAAPI cuMemcpyDtoHAsync(void *d, CUdeviceptr s, size_t n, CUstream st)
{
	(void)d, (void)s, (void)n, (void)st;
	OK;
}

CUresult CUDAAPI cuMemsetD8(CUdeviceptr d, unsigned char uc, size_t n) { (void)d, (void)uc, (void)n; OK; }

CUresult CUDAAPI cuMemsetD32(CUdeviceptr d, unsigned int ui, size_t n) { (void)d, (void)ui, (void)n; OK; }

CUresult CUDAAPI cuModuleLoadData(CUmodule *module, const void *image)
{
	(void)image;
	*module = HANDLE(CUmodule, 0x30d0);
	OK;
}

/* reads the name, as the real one does (it looks the kernel up): the pages of
 * a name the program never touched are then in memory when the probe reads it */
static volatile size_t name_sink;

CUresult CUDAAPI cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{
	(void)hmod;
	name_sink = strlen(name);
	*hfunc = HANDLE(CUfunction, 0xf0000001);
	OK;
}

CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
				unsigned int bx, unsigned int by, unsigned int bz,
				unsigned int smem, CUstream st, void **params, void **extra)
{
	(void)f, (void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz;
	(void)smem, (void)st, (void)params, (void)extra;
	OK;
}

CUresult CUDAAPI cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **params,
				  void **extra)
{
	(void)config, (void)f, (void)params, (void)extra;
	OK;
}

CUresult CUDAAPI cuLaunchCooperativeKernel(CUfunction f, unsigned int gx, unsigned int gy,
					   unsigned int gz, unsigned int bx, unsigned int by,
					   unsigned int bz, unsigned int smem, CUstream st,
					   void **params)
{
	(void)f, (void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz;
	(void)smem, (void)st, (void)params;
	OK;
}

CUresult CUDAAPI cuLibraryLoadData(CUlibrary *library, const void *code, CUjit_option *jo,
				   void **jv, unsigned int nj, CUlibraryOption *lo, void **lv,
				   unsigned int nl)
{
	(void)code, (void)jo, (void)jv, (void)nj, (void)lo, (void)lv, (void)nl;
	*library = HANDLE(CUlibrary, 0x11b0);
	OK;
}

CUresult CUDAAPI cuLibraryGetKernel(CUkernel *pKernel, CUlibrary library, const char *name)
{
	(void)library, (void)name;
	*pKernel = HANDLE(CUkernel, 0x4e10);
	OK;
}

CUresult CUDAAPI cuKernelGetFunction(CUfunction *pFunc, CUkernel kernel)
{
	(void)kernel;
	*pFunc = HANDLE(CUfunction, 0xf0000002);
	OK;
}

CUresult CUDAAPI cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
	(void)Flags;
	*phStream = HANDLE(CUstream, 0x5e00);
	OK;
}

CUresult CUDAAPI cuEventCreate(CUevent *phEvent, unsigned int Flags)
{
	(void)Flags;
	*phEvent = HANDLE(CUevent, 0xe100);
	OK;
}

CUresult CUDAAPI cuEventRecord(CUevent e, CUstream s) { (void)e, (void)s; OK; }
CUresult CUDAAPI cuStreamWaitEvent(CUstream s, CUevent e, unsigned int f) { (void)s, (void)e, (void)f; OK; }
CUresult CUDAAPI cuStreamSynchronize(CUstream s) { (void)s; OK; }
CUresult CUDAAPI cuEventDestroy(CUevent e) { (void)e; OK; }
CUresult CUDAAPI cuStreamDestroy(CUstream s) { (void)s; OK; }
CUresult CUDAAPI cuMemFree(CUdeviceptr d) { (void)d; OK; }
CUresult CUDAAPI cuCtxSynchronize(void) { OK; }
CUresult CUDAAPI cuModuleUnload(CUmodule m) { (void)m; OK; }
