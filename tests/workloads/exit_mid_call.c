/* Threads that exit in the middle of a traced call. This executable defines
 * its own cudaDeviceSynchronize (trace it with --lib on this file), which
 * ends the calling thread with pthread_exit: the call never returns, so its
 * entry stays in cudaprobe's pairing map until swept.
 * Usage: exit_mid_call THREADS LINGER_MS
 *   THREADS threads each make one such call; then the process lingers
 *   LINGER_MS (alive, so that only the threads are gone) and exits 0.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

__attribute__((noipa)) int cudaDeviceSynchronize(void)
{
	pthread_exit(NULL);
}

__attribute__((noipa)) int cudaGetDeviceCount(int *count)
{
	*count = 0;
	return 0;
}

static void *run(void *arg)
{
	(void)arg;
	int n;
	cudaGetDeviceCount(&n); /* one call that returns, to show tracing works */
	return (void *)(long)cudaDeviceSynchronize();
}

int main(int argc, char **argv)
{
	int threads = argc > 1 ? atoi(argv[1]) : 4;
	int linger_ms = argc > 2 ? atoi(argv[2]) : 0;
	pthread_t t[256];
	for (int i = 0; i < threads && i < 256; i++)
		pthread_create(&t[i], NULL, run, NULL);
	for (int i = 0; i < threads && i < 256; i++)
		pthread_join(t[i], NULL);
	printf("%d threads exited mid-call\n", threads);
	fflush(stdout);
	usleep(linger_ms * 1000);
	return 0;
}
