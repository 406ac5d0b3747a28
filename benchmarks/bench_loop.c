/* Benchmark workload: THREADS threads each call cudaMalloc CALLS times (it
 * fails fast without a GPU, so the loop measures the call + probe cost), at
 * full speed or paced to RATE calls/s in total. Prints one JSON object.
 * With FUNC cudaGetDeviceCount, the loop calls this executable's own
 * stand-in of it instead (probe it with --lib on this file): a call that
 * succeeds and writes its out-parameter, which a tracer then reads at exit.
 * Usage: bench_loop CALLS [THREADS] [RATE] [FUNC]
 */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

static long calls_per_thread;
static double rate_per_thread;
static int stand_in; /* FUNC cudaGetDeviceCount */

/* The stand-in: *count = 1, return cudaSuccess. It starts with a push, as
 * libcudart's cudaMalloc does, which the kernel emulates at the probe rather
 * than single-stepping it out of line (a second trap). */
__attribute__((naked, noinline)) cudaError_t cudaGetDeviceCount(int *count)
{
	(void)count;
	__asm__("push %rbp\n\t"
		"movl $1, (%rdi)\n\t"
		"xorl %eax, %eax\n\t"
		"pop %rbp\n\t"
		"ret");
}

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
		if (stand_in) {
			int count;
			if (cudaGetDeviceCount(&count) != cudaSuccess)
				(*errors)++;
		} else {
			void *p;
			if (cudaMalloc(&p, 64) != cudaSuccess)
				(*errors)++;
		}
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
	const char *func = argc > 4 ? argv[4] : "cudaMalloc";
	if (threads < 1 || threads > 64)
		return 2;
	calls_per_thread = calls / threads;
	rate_per_thread = rate / threads;
	if (strcmp(func, "cudaGetDeviceCount") == 0) {
		stand_in = 1;
		int count;
		cudaGetDeviceCount(&count); /* as below: the first call is not measured */
	} else if (strcmp(func, "cudaMalloc") != 0) {
		fprintf(stderr, "bench_loop: FUNC is cudaMalloc or cudaGetDeviceCount\n");
		return 2;
	} else {
		void *p;
		cudaMalloc(&p, 64); /* warm up: runtime initialisation is not measured */
	}
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
