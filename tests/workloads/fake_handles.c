/* A stand-in libcuda.so.1 whose kernel handles are laid out as driver 580's
 * (scripts/gpu/handle_layout.cu): the object a CUkernel addresses holds, at
 * byte 8, a pointer to the kernel's mangled name. For naming launches of
 * handles made before cudaprobe attached (tests/integration/test_late_names.py).
 */
#include <cuda.h>
#include <stdlib.h>
#include <string.h>

struct fake_kernel {
	unsigned long long magic;	/* byte 0: not the name */
	const char *name;		/* byte 8 */
};

CUresult CUDAAPI cuInit(unsigned int Flags) { (void)Flags; return CUDA_SUCCESS; }

CUresult CUDAAPI cuLibraryGetKernel(CUkernel *pKernel, CUlibrary library, const char *name)
{
	(void)library;
	struct fake_kernel *k = calloc(1, sizeof(*k));
	k->magic = 0x6b65726e656c;
	k->name = strdup(name);
	*pKernel = (CUkernel)k;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
				unsigned int bx, unsigned int by, unsigned int bz,
				unsigned int smem, CUstream st, void **params, void **extra)
{
	(void)f, (void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz;
	(void)smem, (void)st, (void)params, (void)extra;
	return CUDA_SUCCESS;
}
