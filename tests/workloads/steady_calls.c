/* A workload for teardown, lost-event and soak tests: a steady stream of CUDA
 * runtime calls, and output that must be the same with and without tracing.
 * Usage: steady_calls LOOPS INTERVAL_US EXIT [ARG...]
 *   LOOPS        loops of (cudaGetDeviceCount, cudaMalloc, cudaFree); 0 = forever
 *   INTERVAL_US  sleep between loops (0 = as fast as it can)
 *   EXIT         exit status at the end, or sigN to die by signal N
 * Prints its arguments and the number of loops on stdout, one line on stderr.
 * On SIGINT/SIGTERM/SIGHUP it finishes the loop it is in, says so and exits;
 * on SIGUSR1 it prints the loops done so far ("so far=N") after the one it is in.
 */
#include <cuda_runtime_api.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t stop_signal;

static volatile sig_atomic_t progress_asked;

static void on_stop(int sig) { stop_signal = sig; }

static void on_progress(int sig) { (void)sig; progress_asked = 1; }

int main(int argc, char **argv)
{
	if (argc < 4) {
		fprintf(stderr, "usage: steady_calls LOOPS INTERVAL_US EXIT [ARG...]\n");
		return 64;
	}
	long loops = atol(argv[1]);
	long interval_us = atol(argv[2]);
	setvbuf(stdout, NULL, _IOLBF, 0);
	struct sigaction sa = {.sa_handler = on_stop};
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	struct sigaction progress = {.sa_handler = on_progress};
	sigaction(SIGUSR1, &progress, NULL);
	for (int i = 0; i < argc; i++)
		printf("argv[%d]=%s\n", i, argv[i]);
	long done = 0;
	while ((loops == 0 || done < loops) && !stop_signal) {
		int count = 0;
		void *p = NULL;
		cudaGetDeviceCount(&count);
		cudaMalloc(&p, 4096);
		cudaFree(p);
		done++;
		if (progress_asked) {
			progress_asked = 0;
			printf("so far=%ld\n", done);
		}
		if (interval_us)
			usleep(interval_us);
	}
	if (stop_signal)
		printf("stopped by signal %d\n", (int)stop_signal);
	printf("loops=%ld\n", done);
	fprintf(stderr, "steady_calls: finished\n");
	if (strncmp(argv[3], "sig", 3) == 0) {
		fflush(NULL);
		signal(atoi(argv[3] + 3), SIG_DFL);
		raise(atoi(argv[3] + 3));
	}
	return atoi(argv[3]);
}
