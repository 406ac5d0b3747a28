/* A kernel handle named by a name over 1 KiB: cuModuleGetFunction given the
 * mangled name of a template over 24 long type names (as two_kernels.cu's
 * long_named), then cuLaunchKernel and cuLaunchKernelEx with the handle.
 * For fake_libcuda.c (through LD_LIBRARY_PATH), whose calls succeed. Prints
 * the name it asked for as JSON, then one line per launch.
 * Usage: driver_long_name */
#include <cuda.h>
#include <stdint.h>
#include <stdio.h>

#define T(n) "45a_type_whose_name_is_long_enough_to_matter_" #n
static const char name[] = "_Z10long_namedIJ"
	T(01) T(02) T(03) T(04) T(05) T(06) T(07) T(08) T(09) T(10) T(11) T(12)
	T(13) T(14) T(15) T(16) T(17) T(18) T(19) T(20) T(21) T(22) T(23) T(24) "EEvPi";

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	CUmodule mod = NULL;
	CUfunction f = NULL;
	cuModuleLoadData(&mod, "");
	CUresult r = cuModuleGetFunction(&f, mod, name);
	printf("{\"event\":\"cuModuleGetFunction\",\"ret\":%d,\"name\":\"%s\"}\n", r, name);
	r = cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL);
	printf("{\"event\":\"cuLaunchKernel\",\"ret\":%d,\"f\":\"%#lx\"}\n", r,
	       (unsigned long)(uintptr_t)f);
	CUlaunchConfig cfg = {0};
	cfg.gridDimX = cfg.gridDimY = cfg.gridDimZ = 1;
	cfg.blockDimX = 64, cfg.blockDimY = cfg.blockDimZ = 1;
	r = cuLaunchKernelEx(&cfg, f, NULL, NULL);
	printf("{\"event\":\"cuLaunchKernelEx\",\"ret\":%d,\"f\":\"%#lx\"}\n", r,
	       (unsigned long)(uintptr_t)f);
	return 0;
}
