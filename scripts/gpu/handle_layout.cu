// Where does the driver keep a kernel handle's name? For each kind of handle a
// program can launch (CUfunction from cuModuleGetFunction, CUkernel from
// cuLibraryGetKernel and from the runtime's cudaGetKernel, the CUfunction of a
// CUkernel), ask the driver for the name (cuFuncGetName, cuKernelGetName), then
// search the handle's memory for that pointer: directly (depth 1) and through
// one pointer (depth 2). Prints one line per handle and path found:
//   <handle kind> <name> path=<off1>[,<off2>] ...
// cudaprobe reads names of handles made before it attached along such a path.
// Build: nvcc -O2 -cudart=shared -o handle_layout handle_layout.cu -lcuda
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

template <typename T, int N> struct Box { T v[N]; };
namespace deep { namespace inner {
template <typename A, typename B, int K>
__global__ void long_template_kernel(Box<A, K> *a, Box<B, K> *b) { if (a) a->v[0] = (A)b->v[0]; }
} }
__global__ void plain_kernel(int *x) { if (x) *x = 1; }

static int readable(const void *p, size_t n) {
  // process_vm_readv on ourselves fails with EFAULT where a plain read would fault
  static char buf[4096];
  if ((uintptr_t)p < 4096 || (uintptr_t)p > 0x7fffffffffffULL || n > sizeof buf) return 0;
  struct iovec local = {buf, n}, remote = {(void *)p, n};
  return process_vm_readv(getpid(), &local, 1, &remote, 1, 0) == (ssize_t)n;
}

static void search(const char *kind, const void *handle, const char *name) {
  int found = 0;
  for (int o1 = 0; o1 < 1024; o1 += 8) {
    if (!readable((const char *)handle + o1, 8)) break;
    uintptr_t w = *(const uintptr_t *)((const char *)handle + o1);
    if (w == (uintptr_t)name) { printf("%s %s path=%d\n", kind, name, o1); found = 1; }
  }
  for (int o1 = 0; o1 < 1024; o1 += 8) {
    if (!readable((const char *)handle + o1, 8)) break;
    uintptr_t w = *(const uintptr_t *)((const char *)handle + o1);
    if (!readable((const void *)w, 8)) continue;
    for (int o2 = 0; o2 < 512; o2 += 8) {
      if (!readable((const char *)w + o2, 8)) break;
      if (*(const uintptr_t *)((const char *)w + o2) == (uintptr_t)name) {
        printf("%s %s path=%d,%d\n", kind, name, o1, o2); found = 1;
      }
    }
  }
  // also: a copy of the string (not the same pointer) reachable at depth 1
  for (int o1 = 0; o1 < 1024; o1 += 8) {
    if (!readable((const char *)handle + o1, 8)) break;
    uintptr_t w = *(const uintptr_t *)((const char *)handle + o1);
    if (w != (uintptr_t)name && readable((const void *)w, strlen(name) + 1) &&
        strcmp((const char *)w, name) == 0) {
      printf("%s %s copy-path=%d\n", kind, name, o1); found = 1;
    }
  }
  if (!found) printf("%s %s path=none handle=%p name=%p\n", kind, name, handle, name);
}

#define CK(x) do { CUresult r = (x); if (r) { printf("FAIL %s = %d\n", #x, r); return 1; } } while (0)

int main(int argc, char **argv) {
  int drv = 0; cuDriverGetVersion(&drv);
  printf("driver_version %d\n", drv);
  cudaFree(0);  // the runtime makes its primary context
  // runtime handles of kernels compiled into this program
  void *stubs[] = {(void *)plain_kernel,
                   (void *)deep::inner::long_template_kernel<float, double, 7>};
  for (void *stub : stubs) {
    cudaKernel_t k;
    if (cudaGetKernel(&k, stub) != cudaSuccess) { printf("FAIL cudaGetKernel\n"); return 1; }
    const char *name = nullptr;
    CK(cuKernelGetName(&name, (CUkernel)k));
    printf("stub %p kernel %p\n", stub, (void *)k);
    search("cudaGetKernel", (void *)k, name);
    CUfunction f; CUcontext ctx; CK(cuCtxGetCurrent(&ctx));
    CK(cuKernelGetFunction(&f, (CUkernel)k));
    const char *fname = nullptr; CK(cuFuncGetName(&fname, f));
    search("cuKernelGetFunction", (void *)f, fname);
    plain_kernel<<<1, 1>>>(nullptr);
  }
  // driver handles from a cubin/fatbin file given on the command line
  if (argc > 2) {
    CUmodule mod; CK(cuModuleLoad(&mod, argv[1]));
    CUlibrary lib; CK(cuLibraryLoadFromFile(&lib, argv[1], 0, 0, 0, 0, 0, 0));
    for (int i = 2; i < argc; i++) {
      CUfunction f; CK(cuModuleGetFunction(&f, mod, argv[i]));
      const char *n1 = nullptr; CK(cuFuncGetName(&n1, f));
      search("cuModuleGetFunction", (void *)f, n1);
      CUkernel k; CK(cuLibraryGetKernel(&k, lib, argv[i]));
      const char *n2 = nullptr; CK(cuKernelGetName(&n2, k));
      search("cuLibraryGetKernel", (void *)k, n2);
      CUfunction kf; CK(cuKernelGetFunction(&kf, k));
      const char *n3 = nullptr; CK(cuFuncGetName(&n3, kf));
      search("cuLibraryGetKernel+GetFunction", (void *)kf, n3);
    }
  }
  cudaDeviceSynchronize();
  return 0;
}
