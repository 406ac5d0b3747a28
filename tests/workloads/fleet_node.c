/* A GPU node's day, in rounds: what every panel of the fleet dashboard shows,
 * made through the stand-in libraries (tests/integration/fleet.py). Each line
 * read from standard input is one round: allocations that stay (device and
 * pinned), one freed, one refused for lack of memory, copies both ways,
 * launches of two named kernels, synchronizes of a known least duration; then
 * it prints "round N". It exits at the end of its input, holding its memory
 * until then: the test reads the metrics between rounds, while the process is
 * there, whatever the machine's speed (a rate needs two scrapes that differ).
 * Usage: fleet_node < rounds */
#include <cuda_runtime_api.h>
#include <stdio.h>

#define COPIES 8

void fleet_gemm(void) {}
void fleet_reduce(void) {}

static int check(cudaError_t got, cudaError_t want, const char *what)
{
	if (got != want)
		fprintf(stderr, "%s returned %d, not %d\n", what, (int)got, (int)want);
	return got != want;
}

static int round_of_calls(void)
{
	void *dev[3], *pinned, *huge;
	static char host[1 << 16];
	int bad = 0;
	dim3 grid = {1, 1, 1}, block = {32, 1, 1};

	for (int i = 0; i < 3; i++)
		bad |= check(cudaMalloc(&dev[i], 1 << 20), cudaSuccess, "cudaMalloc");
	bad |= check(cudaFree(dev[2]), cudaSuccess, "cudaFree");  /* 2 MiB stay */
	bad |= check(cudaMallocHost(&pinned, 1 << 16), cudaSuccess, "cudaMallocHost");
	bad |= check(cudaMalloc(&huge, (size_t)1 << 41), cudaErrorMemoryAllocation, "cudaMalloc 2 TiB");
	for (int i = 0; i < COPIES; i++) {
		bad |= check(cudaMemcpy(dev[0], host, 4096, cudaMemcpyHostToDevice), cudaSuccess,
			     "cudaMemcpy HtoD");
		bad |= check(cudaMemcpy(host, dev[1], 1024, cudaMemcpyDeviceToHost), cudaSuccess,
			     "cudaMemcpy DtoH");
	}
	for (int i = 0; i < 5; i++)
		bad |= check(cudaLaunchKernel((const void *)fleet_gemm, grid, block, NULL, 0, 0),
			     cudaSuccess, "cudaLaunchKernel");
	for (int i = 0; i < 3; i++)
		bad |= check(cudaLaunchKernel((const void *)fleet_reduce, grid, block, NULL, 0, 0),
			     cudaSuccess, "cudaLaunchKernel");
	/* memstub's synchronize sleeps as many microseconds as the stream's value */
	for (int i = 0; i < 4; i++)
		bad |= check(cudaStreamSynchronize((cudaStream_t)(size_t)200), cudaSuccess,
			     "cudaStreamSynchronize");
	return bad;
}

int main(void)
{
	char line[64];
	for (int n = 1; fgets(line, sizeof line, stdin); n++) {
		if (round_of_calls())
			return 1;
		printf("round %d\n", n);
		fflush(stdout);
	}
	return 0;
}
