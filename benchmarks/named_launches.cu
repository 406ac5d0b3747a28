// Write-speed workload: PyTorch-like launches of templated kernels with long
// names, round-robin, as fast as the runtime takes them (without a GPU each
// fails at once: the probes still see them). Usage: named_launches [N]
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>
namespace at { namespace native { namespace {
template <int vec, typename T, typename F> __global__ void vectorized_elementwise_kernel(int n, F f, T *a) {}
template <typename T> struct FillFunctor { T v; };
template <typename T> struct AddFunctor { T v; };
}}}
int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 200000;
  float *p = nullptr;
  for (long i = 0; i < n; i++) {
    switch (i % 4) {
    case 0: at::native::vectorized_elementwise_kernel<4, float, at::native::FillFunctor<float>><<<64, 128>>>(1, {1.f}, p); break;
    case 1: at::native::vectorized_elementwise_kernel<2, double, at::native::AddFunctor<double>><<<32, 256>>>(1, {1.0}, (double*)p); break;
    case 2: at::native::vectorized_elementwise_kernel<4, int, at::native::AddFunctor<int>><<<16, 512>>>(1, {1}, (int*)p); break;
    default: at::native::vectorized_elementwise_kernel<8, char, at::native::FillFunctor<char>><<<8, 1024>>>(1, {1}, (char*)p); break;
    }
  }
  printf("%ld launches, last %s\n", n, cudaGetErrorName(cudaGetLastError()));
}
