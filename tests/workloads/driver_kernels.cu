/* Kernels for driver_vecadd.c, compiled to PTX (nvcc --ptx) and loaded with
 * cuModuleLoadData and cuLibraryLoadData: one extern "C", one template whose
 * mangled name the program asks for. */
extern "C" __global__ void vecAdd(const float *a, const float *b, float *c, int n)
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
template __global__ void scale<float>(float *, float, int);
