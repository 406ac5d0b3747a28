/* A kernel in a shared library, launched from it: kernels.cu -DWITH_LIBKERN
 * links this as libkern.so, so the host stub lies in a second mapped object. */
#include <cuda_runtime.h>

namespace kern {
__global__ void in_library(int *x, int n)
{
	if (threadIdx.x < n)
		x[threadIdx.x] = n;
}
}

/* launches the kernel; returns its host stub address for the test's truth */
extern "C" const void *libkern_launch(int *buf)
{
	kern::in_library<<<1, 32>>>(buf, 32);
	return (const void *)kern::in_library;
}
