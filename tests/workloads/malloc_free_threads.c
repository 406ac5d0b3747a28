/* The reader's load test: THREADS threads each call cudaMalloc then cudaFree
 * PAIRS times, unpaced, all started together (without a GPU both fail fast
 * with cudaErrorInsufficientDriver, so the probes fire as fast as the CPU
 * allows). Prints {"calls": N, "threads": T, "elapsed_ns": E} on stdout.
 * Usage: malloc_free_threads PAIRS THREADS [MARK]
 * With MARK, it prints {"pid": P} first, and {"made": MARK} as soon as every
 * thread has made MARK pairs, then goes on, resting 1 ms after every 100
 * pairs: a test that cuts a trace with the loop running cuts it there,
 * whatever the machine's speed, and the calls made until the cut lands are
 * tens of thousands a second, not hundreds of thousands, to decode.
 */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static long pairs, mark;
static int threads, marked;
static pthread_barrier_t start;

static long long now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void *loop(void *arg)
{
	(void)arg;
	pthread_barrier_wait(&start);
	for (long i = 0; i < pairs; i++) {
		void *p = NULL;
		cudaMalloc(&p, 4096);
		cudaFree(p);
		if (i + 1 == mark && __atomic_add_fetch(&marked, 1, __ATOMIC_SEQ_CST) == threads) {
			printf("{\"made\": %ld}\n", mark);
			fflush(stdout);
		}
		if (mark && i >= mark && (i - mark) % 100 == 99)
			usleep(1000);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: malloc_free_threads PAIRS THREADS [MARK]\n");
		return 64;
	}
	pairs = atol(argv[1]);
	threads = atoi(argv[2]);
	mark = argc > 3 ? atol(argv[3]) : 0;
	if (pairs < 0 || threads < 1 || threads > 64 || mark < 0)
		return 64;
	if (mark) {
		printf("{\"pid\": %d}\n", (int)getpid());
		fflush(stdout);
	}
	pthread_t t[64];
	pthread_barrier_init(&start, NULL, threads + 1);
	for (int i = 0; i < threads; i++)
		pthread_create(&t[i], NULL, loop, NULL);
	long long t0 = now_ns();
	pthread_barrier_wait(&start);
	for (int i = 0; i < threads; i++)
		pthread_join(t[i], NULL);
	printf("{\"calls\": %ld, \"threads\": %d, \"elapsed_ns\": %lld}\n", 2 * pairs * threads,
	       threads, now_ns() - t0);
	return 0;
}
