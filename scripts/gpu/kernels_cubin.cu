// Two kernels for scripts/gpu/handle_layout.cu's driver handles (cuModuleLoad, cuLibraryLoadFromFile).
extern "C" __global__ void cubin_kernel_a(int *x) { if (x) *x = 1; }
extern "C" __global__ void cubin_kernel_b(float *x, int n) { if (x && n) x[0] = 2.0f; }
