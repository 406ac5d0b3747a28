/* Copies and launches that succeed where there is no GPU, built into one
 * stand-in libcudart.so.13 with memstub_cudart.c (tests/integration/fleet.py):
 * the bytes a copy moves and the kernels a launch names reach the metrics as
 * on a GPU. Nothing is copied or run: the addresses are memstub's fake ones.
 */
#include <cuda_runtime_api.h>

cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind)
{
	(void)dst, (void)src, (void)count;
	return kind <= cudaMemcpyDefault ? cudaSuccess : cudaErrorInvalidMemcpyDirection;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
			    cudaStream_t stream)
{
	(void)stream;
	return cudaMemcpy(dst, src, count, kind);
}

cudaError_t cudaLaunchKernel(const void *func, dim3 gridDim, dim3 blockDim, void **args,
			     size_t sharedMem, cudaStream_t stream)
{
	(void)gridDim, (void)blockDim, (void)args, (void)sharedMem, (void)stream;
	return func ? cudaSuccess : cudaErrorInvalidDeviceFunction;
}
