// GPU overhead workload: N launches of an empty kernel, timed on the host.
// Prints one JSON object. Usage: launch_loop [N]
#include <cstdio>
#include <cstdlib>
#include <chrono>
#include <cuda_runtime.h>

__global__ void empty_kernel() {}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 200000;
	empty_kernel<<<1, 1>>>();
	cudaDeviceSynchronize();
	auto t0 = std::chrono::steady_clock::now();
	for (long i = 0; i < n; i++)
		empty_kernel<<<1, 32>>>();
	cudaDeviceSynchronize();
	double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
	printf("{\"launches\": %ld, \"seconds\": %.4f, \"us_per_launch\": %.3f, \"error\": \"%s\"}\n",
	       n + 1, s, s * 1e6 / n, cudaGetErrorName(cudaGetLastError()));
	return 0;
}
