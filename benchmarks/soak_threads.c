/* The soak test's workload (benchmarks/soak.py): THREADS threads each loop
 * (cudaGetDeviceCount, cudaMalloc, cudaFree), together LOOPS_PER_S loops a
 * second (0: as fast as they can), for SECONDS or until SIGTERM/SIGINT; and
 * every MID_CALL_EVERY_S seconds (0: never) MID_CALL_THREADS threads that
 * each exit inside a call to this executable's own cudaDeviceSynchronize
 * (trace it with --lib on this file): the call never returns, its pairing
 * entry stays until cudaprobe's sweep removes it.
 * Usage: soak_threads THREADS LOOPS_PER_S SECONDS [MID_CALL_EVERY_S]
 * Prints {"calls": N, "exited_mid_call": M, "seconds": S} at the end: N is
 * every call that returned, the count the trace's rows and losses must add
 * up to.
 *
 * Paced by debt, not by sleeping a period per loop: each millisecond a thread
 * makes the loops it owes since it started, so the rate holds on average
 * whatever the sleep granularity, and a thread that falls behind catches up.
 */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define MID_CALL_THREADS 4

static volatile sig_atomic_t stop;
static double per_thread_rate, seconds;
static struct timespec start;

static void on_stop(int sig) { (void)sig; stop = 1; }

static double since_start(void)
{
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC, &now);
	return (double)(now.tv_sec - start.tv_sec) + (now.tv_nsec - start.tv_nsec) / 1e9;
}

/* libcudart's, interposed: a call that ends its thread */
__attribute__((noipa)) cudaError_t cudaDeviceSynchronize(void)
{
	pthread_exit(NULL);
}

static void *exit_mid_call(void *arg)
{
	(void)arg;
	cudaDeviceSynchronize();
	return NULL;
}

static void *run(void *arg)
{
	long *calls = arg;
	long loops = 0;
	struct timespec ms = {0, 1000000};
	double t;
	while (!stop && (t = since_start()) < seconds) {
		long owed = per_thread_rate > 0 ? (long)(t * per_thread_rate) - loops : 64;
		if (owed <= 0) {
			nanosleep(&ms, NULL);
			continue;
		}
		for (long i = 0; i < owed && !stop; i++, loops++) {
			int n;
			void *p = NULL;
			cudaGetDeviceCount(&n);
			cudaMalloc(&p, 4096);
			cudaFree(p);
		}
	}
	*calls = 3 * loops;
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc != 4 && argc != 5) {
		fprintf(stderr, "usage: soak_threads THREADS LOOPS_PER_S SECONDS "
				"[MID_CALL_EVERY_S]\n");
		return 64;
	}
	int mid_call_every = argc == 5 ? atoi(argv[4]) : 0;
	int threads = atoi(argv[1]);
	per_thread_rate = atof(argv[2]) / threads;
	seconds = atof(argv[3]);
	struct sigaction sa = {.sa_handler = on_stop};
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	pthread_t tid[threads];
	long calls[threads];
	clock_gettime(CLOCK_MONOTONIC, &start);
	for (int i = 0; i < threads; i++)
		pthread_create(&tid[i], NULL, run, &calls[i]);
	long exited = 0;
	while (mid_call_every && !stop && since_start() + mid_call_every < seconds) {
		struct timespec wait = {mid_call_every, 0};
		nanosleep(&wait, NULL);
		pthread_t mid[MID_CALL_THREADS];
		for (int i = 0; i < MID_CALL_THREADS; i++)
			pthread_create(&mid[i], NULL, exit_mid_call, NULL);
		for (int i = 0; i < MID_CALL_THREADS; i++)
			pthread_join(mid[i], NULL);
		exited += MID_CALL_THREADS;
	}
	long total = 0;
	for (int i = 0; i < threads; i++) {
		pthread_join(tid[i], NULL);
		total += calls[i];
	}
	printf("{\"calls\": %ld, \"exited_mid_call\": %ld, \"seconds\": %.3f}\n", total,
	       exited, since_start());
	return 0;
}
