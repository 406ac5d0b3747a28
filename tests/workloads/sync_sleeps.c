/* Calls of a known least duration, for latency histograms: on the memstub
 * libcudart, cudaStreamSynchronize(stream) sleeps as many microseconds as the
 * stream handle's value. Usage: sync_sleeps SHORT_US N_SHORT LONG_US N_LONG */
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
	if (argc < 5)
		return 64;
	for (int i = 0; i < atoi(argv[2]); i++)
		cudaStreamSynchronize((cudaStream_t)(uintptr_t)atol(argv[1]));
	for (int i = 0; i < atoi(argv[4]); i++)
		cudaStreamSynchronize((cudaStream_t)(uintptr_t)atol(argv[3]));
	return 0;
}
