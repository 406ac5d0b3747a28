/* A stand-in libcuda.so.1 for memory tests where there is no GPU: the memory
 * functions cudaprobe tracks, over a toy allocator that hands out fake,
 * recognisable addresses (device 0x7e10..., pinned 0x7e20..., managed
 * 0x7e30..., async 0x7e40...) and checks frees, so that allocations succeed
 * and frees of unknown pointers fail, as on a GPU. memstub_cudart.c serves
 * the runtime's allocations with these, as the real runtime does. Not a
 * model of CUDA: enough for uprobes on real symbols and real call nesting.
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

/* everything the context held goes with it */
CUresult CUDAAPI cuCtxDestroy(CUcontext ctx)
{
	(void)ctx;
	for (int i = 0; i < MAX_LIVE; i++)
		live[i].ptr = 0;
	return CUDA_SUCCESS;
}
