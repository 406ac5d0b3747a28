/* Benchmark workload: THREADS threads each call cudaMalloc CALLS times (it
 * fails fast without a GPU, so the loop measures the call + probe cost), at
 * full speed or paced to RATE calls/s in total. Prints one JSON object.
 * Usage: bench_loop CALLS [THREADS] [RATE]
 */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>

static long calls_per_thread;
static double rate_per_thread;

static long long now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void *loop(void *arg)
{
	long *errors = arg;
	long long start = now_ns();
	for (long i = 0; i < calls_per_thread; i++) {
		void *p;
		if (cudaMalloc(&p, 64) != cudaSuccess)
			(*errors)++;
		if (rate_per_thread > 0 && (i & 63) == 0) {
			long long due = start + (long long)(i / rate_per_thread * 1e9);
			while (now_ns() < due)
				;
		}
	}
	return NULL;
}

int main(int argc, char **argv)
{
	long calls = argc > 1 ? atol(argv[1]) : 1000000;
	int threads = argc > 2 ? atoi(argv[2]) : 1;
	double rate = argc > 3 ? atof(argv[3]) : 0;
	if (threads < 1 || threads > 64)
		return 2;
	calls_per_thread = calls / threads;
	rate_per_thread = rate / threads;
	void *p;
	cudaMalloc(&p, 64); /* warm up: runtime initialisation is not measured */
	pthread_t t[64];
	long errors[64] = {0};
	long long start = now_ns();
	for (int i = 0; i < threads; i++)
		pthread_create(&t[i], NULL, loop, &errors[i]);
	for (int i = 0; i < threads; i++)
		pthread_join(t[i], NULL);
	long long elapsed = now_ns() - start;
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	long total = calls_per_thread * threads;
	printf("{\"calls\": %ld, \"measured_calls\": %ld, \"threads\": %d, \"elapsed_ns\": %lld, "
	       "\"ns_per_call\": %.1f, \"cpu_s\": %.3f}\n",
	       total + 1, total, threads, elapsed, (double)elapsed * threads / total,
	       ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6);
	return 0;
}
