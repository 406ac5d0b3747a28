/* A stand-in libcudart.so.13 for memory and stats tests where there is no
 * GPU: the runtime's memory functions served by libcuda's (memstub_cuda.c),
 * on the same thread and inside the runtime call, as the real runtime serves
 * cudaMalloc with cuMemAlloc_v2. Exported under the real library's version
 * node (memstub_cudart.map), so that programs nvcc linked against the real
 * libcudart.so.13 run on it with LD_LIBRARY_PATH. cudaStreamSynchronize
 * sleeps for as many microseconds as its stream handle's value: calls of a
 * known least duration for latency histograms.
 */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <unistd.h>

static cudaError_t rt(CUresult r)
{
	switch (r) {
	case CUDA_SUCCESS:
		return cudaSuccess;
	case CUDA_ERROR_OUT_OF_MEMORY:
		return cudaErrorMemoryAllocation;
	default:
		return cudaErrorInvalidValue;
	}
}

cudaError_t cudaMalloc(void **devPtr, size_t size)
{
	return rt(cuMemAlloc((CUdeviceptr *)devPtr, size));
}

cudaError_t cudaFree(void *devPtr)
{
	return devPtr ? rt(cuMemFree((CUdeviceptr)devPtr)) : cudaSuccess;
}

cudaError_t cudaMallocPitch(void **devPtr, size_t *pitch, size_t width, size_t height)
{
	return rt(cuMemAllocPitch((CUdeviceptr *)devPtr, pitch, width, height, 4));
}

cudaError_t cudaMallocHost(void **ptr, size_t size) { return rt(cuMemAllocHost(ptr, size)); }

cudaError_t cudaHostAlloc(void **pHost, size_t size, unsigned int flags)
{
	return rt(cuMemHostAlloc(pHost, size, flags));
}

cudaError_t cudaFreeHost(void *ptr) { return rt(cuMemFreeHost(ptr)); }

cudaError_t cudaMallocManaged(void **devPtr, size_t size, unsigned int flags)
{
	return rt(cuMemAllocManaged((CUdeviceptr *)devPtr, size, flags));
}

cudaError_t cudaMallocAsync(void **devPtr, size_t size, cudaStream_t hStream)
{
	return rt(cuMemAllocAsync((CUdeviceptr *)devPtr, size, (CUstream)hStream));
}

cudaError_t cudaFreeAsync(void *devPtr, cudaStream_t hStream)
{
	return rt(cuMemFreeAsync((CUdeviceptr)devPtr, (CUstream)hStream));
}

cudaError_t cudaMallocFromPoolAsync(void **ptr, size_t size, cudaMemPool_t memPool,
				    cudaStream_t stream)
{
	return rt(cuMemAllocFromPoolAsync((CUdeviceptr *)ptr, size, (CUmemoryPool)memPool,
					  (CUstream)stream));
}

cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *memPool, int device)
{
	(void)device;
	*memPool = (cudaMemPool_t)0x900d; /* the stub's pools take any handle */
	return cudaSuccess;
}

cudaError_t cudaHostRegister(void *ptr, size_t size, unsigned int flags)
{
	return rt(cuMemHostRegister(ptr, size, flags));
}

cudaError_t cudaHostUnregister(void *ptr) { return rt(cuMemHostUnregister(ptr)); }

cudaError_t cudaDeviceReset(void) { return rt(cuCtxDestroy(NULL)); }

cudaError_t cudaGetDeviceCount(int *count)
{
	*count = 1;
	return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
	usleep((useconds_t)(uintptr_t)stream);
	return cudaSuccess;
}

const char *cudaGetErrorString(cudaError_t error)
{
	return error ? "memstub error" : "no error";
}

/* what nvcc's generated host code calls around main */
void **__cudaRegisterFatBinary(void *fatCubin)
{
	static void *handle;
	(void)fatCubin;
	return &handle;
}

void __cudaRegisterFatBinaryEnd(void **fatCubinHandle) { (void)fatCubinHandle; }

void __cudaUnregisterFatBinary(void **fatCubinHandle) { (void)fatCubinHandle; }

char __cudaInitModule(void **fatCubinHandle)
{
	(void)fatCubinHandle;
	return 0;
}
