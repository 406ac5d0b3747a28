/* One allocation, then its free, each on a line from stdin: a test holds
 * cudaprobe's ring reader between the two, so that the free's record comes
 * after the process is seen gone.
 * Usage: alloc_gate  (prints "ready", then "allocated" after its cudaMalloc of
 * 1 MiB; frees it on the second line and exits 0; 2: stdin ended early) */
#include <cuda_runtime_api.h>
#include <stdio.h>

int main(void)
{
	char line[16];
	void *p = NULL;
	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("ready\n");
	if (!fgets(line, sizeof line, stdin))
		return 2;
	if (cudaMalloc(&p, 1 << 20) != cudaSuccess)
		return 3;
	printf("allocated\n");
	if (!fgets(line, sizeof line, stdin))
		return 2;
	return cudaFree(p) == cudaSuccess ? 0 : 4;
}
