/* Calls on cue, for the pairing of calls across serve --duty's slices: each
 * line read on standard input is a number N; the program says "enter N",
 * calls cudaStreamSynchronize with N as its stream (on the memstub libcudart
 * it sleeps N microseconds), then says "left N". Ends at end of input. */
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int main(void)
{
	char line[64];
	setvbuf(stdout, NULL, _IOLBF, 0);
	while (fgets(line, sizeof line, stdin)) {
		long n = atol(line);
		printf("enter %ld\n", n);
		cudaStreamSynchronize((cudaStream_t)(uintptr_t)n);
		printf("left %ld\n", n);
	}
	return 0;
}
