/* A stand-in libcuda.so.1 for memory tests where there is no GPU: the memory
 * functions cudaprobe tracks, over a toy allocator that hands out fake,
 * recognisable addresses (device 0x7e10..., pinned 0x7e20..., managed
 * 0x7e30..., async 0x7e40...) and checks frees, so that allocations succeed
 * and frees of unknown pointers fail, as on a GPU; also pools, registered
 * host memory and virtual memory (handles checked, mappings not kept).
 * memstub_cudart.c serves the runtime's allocations with these, as the real
 * runtime does. Not a model of CUDA: enough for uprobes on real symbols and
 * real call nesting.
 */
#include <cuda.h>
#include <stdint.h>

#define MAX_LIVE 4096

struct block {
	CUdeviceptr ptr;
	size_t size;
};
static struct block live[MAX_LIVE];
static CUdeviceptr next_ptr[4] = {0x7e1000000000, 0x7e2000000000, 0x7e3000000000,
				  0x7e4000000000};

static CUresult take(CUdeviceptr *out, size_t size, int kind)
{
	if (size > ((size_t)1 << 40))
		return CUDA_ERROR_OUT_OF_MEMORY;
	for (int i = 0; i < MAX_LIVE; i++) {
		if (!live[i].ptr) {
			live[i].ptr = next_ptr[kind];
			live[i].size = size;
			next_ptr[kind] += (size + 0xfffff) & ~(CUdeviceptr)0xfffff;
			next_ptr[kind] += 0x100000;
			*out = live[i].ptr;
			return CUDA_SUCCESS;
		}
	}
	return CUDA_ERROR_OUT_OF_MEMORY;
}

static CUresult give_back(CUdeviceptr ptr)
{
	for (int i = 0; i < MAX_LIVE; i++) {
		if (ptr && live[i].ptr == ptr) {
			live[i].ptr = 0;
			return CUDA_SUCCESS;
		}
	}
	return CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuMemAlloc(CUdeviceptr *dptr, size_t bytesize) { return take(dptr, bytesize, 0); }
CUresult CUDAAPI cuMemFree(CUdeviceptr dptr) { return give_back(dptr); }

CUresult CUDAAPI cuMemAllocPitch(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes,
				 size_t Height, unsigned int ElementSizeBytes)
{
	(void)ElementSizeBytes;
	*pPitch = (WidthInBytes + 511) & ~(size_t)511;
	return take(dptr, *pPitch * Height, 0);
}

CUresult CUDAAPI cuMemAllocHost(void **pp, size_t bytesize)
{
	return take((CUdeviceptr *)pp, bytesize, 1);
}

CUresult CUDAAPI cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
	(void)Flags;
	return take((CUdeviceptr *)pp, bytesize, 1);
}

CUresult CUDAAPI cuMemFreeHost(void *p) { return give_back((CUdeviceptr)p); }

CUresult CUDAAPI cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
	(void)flags;
	return take(dptr, bytesize, 2);
}

CUresult CUDAAPI cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
	(void)hStream;
	return take(dptr, bytesize, 3);
}

CUresult CUDAAPI cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
	(void)hStream;
	return give_back(dptr);
}

CUresult CUDAAPI cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
					 CUstream hStream)
{
	(void)pool;
	(void)hStream;
	return take(dptr, bytesize, 3);
}

/* host memory registered in place: the caller's pointer is kept, as if taken */
CUresult CUDAAPI cuMemHostRegister(void *p, size_t bytesize, unsigned int Flags)
{
	(void)Flags;
	for (int i = 0; p && i < MAX_LIVE; i++) {
		if (!live[i].ptr) {
			live[i].ptr = (CUdeviceptr)p;
			live[i].size = bytesize;
			return CUDA_SUCCESS;
		}
	}
	return CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuMemHostUnregister(void *p) { return give_back((CUdeviceptr)p); }

/* virtual memory: handles from 0x5500..., reserved addresses from 0x7e50...;
 * a handle can be mapped until it is released (a real driver keeps released
 * memory while it is mapped; the stub keeps no mappings) */
static CUdeviceptr next_va = 0x7e5000000000;
static CUmemGenericAllocationHandle handles[MAX_LIVE];
static CUmemGenericAllocationHandle next_handle = 0x550000001000;

CUresult CUDAAPI cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment,
				     CUdeviceptr addr, unsigned long long flags)
{
	(void)alignment, (void)addr, (void)flags;
	*ptr = next_va;
	next_va += (size + 0xfffff) & ~(CUdeviceptr)0xfffff;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
	(void)ptr, (void)size;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
			     const CUmemAllocationProp *prop, unsigned long long flags)
{
	(void)prop, (void)flags;
	if (size > ((size_t)1 << 40))
		return CUDA_ERROR_OUT_OF_MEMORY;
	for (int i = 0; i < MAX_LIVE; i++) {
		if (!handles[i]) {
			*handle = handles[i] = next_handle;
			next_handle += 0x1000;
			return CUDA_SUCCESS;
		}
	}
	return CUDA_ERROR_OUT_OF_MEMORY;
}

static int known_handle(CUmemGenericAllocationHandle h)
{
	for (int i = 0; h && i < MAX_LIVE; i++)
		if (handles[i] == h)
			return i;
	return -1;
}

CUresult CUDAAPI cuMemRelease(CUmemGenericAllocationHandle handle)
{
	int i = known_handle(handle);
	if (i < 0)
		return CUDA_ERROR_INVALID_VALUE;
	handles[i] = 0;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
			  CUmemGenericAllocationHandle handle, unsigned long long flags)
{
	(void)ptr, (void)size, (void)offset, (void)flags;
	return known_handle(handle) < 0 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemUnmap(CUdeviceptr ptr, size_t size)
{
	return ptr && size ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc,
				size_t count)
{
	(void)ptr, (void)size, (void)desc, (void)count;
	return CUDA_SUCCESS;
}

/* what a program calls before the memory functions on a real driver */
CUresult CUDAAPI cuInit(unsigned int Flags)
{
	(void)Flags;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
	*pctx = (CUcontext)(uintptr_t)(0xc0c0 + dev);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx)
{
	(void)ctx;
	return CUDA_SUCCESS;
}

/* everything the context held goes with it */
CUresult CUDAAPI cuCtxDestroy(CUcontext ctx)
{
	(void)ctx;
	for (int i = 0; i < MAX_LIVE; i++)
		live[i].ptr = 0;
	return CUDA_SUCCESS;
}
