/* Many return codes from one function, for cudaprobe stats: this executable
 * defines its own cudaGetDeviceCount (trace it with --lib on this file), and
 * its k-th call returns k % CODES (0 is success). More codes than a probe's
 * own per-CPU record holds (CP_ERR_SLOTS, 4) go to the `error_codes` hash.
 * Usage: error_codes CALLS CODES; prints {"code": N, "calls": M} per code.
 */
#include <stdio.h>
#include <stdlib.h>

static int codes = 6;

__attribute__((noipa)) int cudaGetDeviceCount(int *count)
{
	static int k;
	*count = 0;
	return k++ % codes;
}

int main(int argc, char **argv)
{
	int calls = argc > 1 ? atoi(argv[1]) : 60;
	codes = argc > 2 ? atoi(argv[2]) : 6;
	if (codes < 1 || codes > 64)
		return 2;
	int made[64] = {0};
	for (int i = 0; i < calls; i++) {
		int n;
		made[cudaGetDeviceCount(&n)]++;
	}
	for (int c = 0; c < codes; c++)
		printf("{\"code\": %d, \"calls\": %d}\n", c, made[c]);
	return 0;
}
