/* A process whose main thread exits (pthread_exit) while a worker runs on: its
 * leader is a zombie, /proc/PID/maps is empty, the process lives. The worker
 * prints {"ready":1}, waits for a line on stdin, then calls
 * cudaGetDeviceCount N times (a JSON line each, as runtime_calls does) and
 * exits with the end of stdin.
 * Usage: leader_exit N */
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static int n;

static void *work(void *arg)
{
	char line[64];
	(void)arg;
	printf("{\"ready\":1}\n");
	fflush(stdout);
	if (!fgets(line, sizeof line, stdin))
		exit(1);
	for (int i = 0; i < n; i++) {
		int count = 42;
		cudaError_t r = cudaGetDeviceCount(&count);
		printf("{\"event\":\"cudaGetDeviceCount\",\"ret\":%d,\"count\":%d}\n", r, count);
	}
	printf("{\"done\":1}\n");
	fflush(stdout);
	while (fgets(line, sizeof line, stdin))
		;
	exit(0);
}

int main(int argc, char **argv)
{
	pthread_t t;
	n = argc > 1 ? atoi(argv[1]) : 10;
	setvbuf(stdout, NULL, _IOLBF, 0);
	pthread_create(&t, NULL, work, NULL);
	pthread_exit(NULL);
}
