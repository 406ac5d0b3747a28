/* A program that names itself with bytes a terminal acts on, then makes CUDA
 * calls: two allocations, one freed, one left (a leak for `cudaprobe memory`).
 * Its name (comm) is set with prctl(PR_SET_NAME) to NAME, given as hex
 * bytes, so that any byte but NUL can be given. Prints {"comm": "HEX"}.
 * With `-`, it says {"ready": 1} once named and waits for stdin's end
 * before its calls (a test attaches to it meanwhile); with `+`, it waits for
 * stdin's end after its calls (a test reads what was counted meanwhile).
 * Usage: hostile_name HEXNAME [-|+]
 */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>

int main(int argc, char **argv)
{
	char name[16] = {0};
	size_t n = argc > 1 ? strlen(argv[1]) / 2 : 0;
	for (size_t i = 0; i < n && i < sizeof(name) - 1; i++)
		sscanf(argv[1] + 2 * i, "%2hhx", &name[i]);
	prctl(PR_SET_NAME, name);
	if (argc > 2 && strcmp(argv[2], "-") == 0) {
		printf("{\"ready\": 1}\n");
		fflush(stdout);
		while (getchar() != EOF)
			;
	}
	void *kept, *freed;
	cudaMalloc(&freed, 1 << 20);
	cudaMalloc(&kept, 2 << 20);
	cudaFree(freed);
	printf("{\"comm\": \"%s\"}\n", argc > 1 ? argv[1] : "");
	if (argc > 2 && strcmp(argv[2], "+") == 0) {
		fflush(stdout);
		while (getchar() != EOF)
			;
	}
	return 0;
}
