/* A cudaMalloc that calls itself on the same thread (recursion). This
 * executable defines its own cudaMalloc (trace it with --lib on this file):
 * cudaMalloc(p, SIZE) calls cudaMalloc(p, SIZE - 1), DEPTH levels deep, so
 * that each call of the program makes DEPTH + 1 calls nested in each other.
 * The innermost returns 0, except in the program's third call, where it
 * returns cudaErrorMemoryAllocation (2), which every level returns too; a
 * level that returns 0 sets *p to 0x10000000 + its SIZE.
 * Usage: recursive_calls CALLS DEPTH THREADS
 *   THREADS threads, one after the other, each make CALLS calls, the i-th
 *   with SIZE 4096 * (i + 1). Each level prints, as it returns,
 *   {"size": SIZE, "depth": D, "ret": R, "ptr": P, "tid": T}.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static int max_depth, calls;
static __thread int depth, failing;

__attribute__((noipa)) int cudaMalloc(void **p, size_t size)
{
	int ret, d = depth;
	if (d < max_depth) {
		depth = d + 1;
		ret = cudaMalloc(p, size - 1);
		depth = d;
	} else {
		ret = failing ? 2 : 0;
	}
	if (ret == 0)
		*p = (void *)(0x10000000UL + size);
	printf("{\"size\": %zu, \"depth\": %d, \"ret\": %d, \"ptr\": %lu, \"tid\": %d}\n", size, d,
	       ret, ret ? 0UL : (unsigned long)*p, gettid());
	return ret;
}

static void *run(void *arg)
{
	(void)arg;
	for (int i = 0; i < calls; i++) {
		void *p = NULL;
		failing = i == 2;
		cudaMalloc(&p, 4096 * (size_t)(i + 1));
	}
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc < 4) {
		fprintf(stderr, "usage: recursive_calls CALLS DEPTH THREADS\n");
		return 64;
	}
	calls = atoi(argv[1]);
	max_depth = atoi(argv[2]);
	int threads = atoi(argv[3]);
	for (int i = 0; i < threads; i++) {
		pthread_t t;
		pthread_create(&t, NULL, run, NULL);
		pthread_join(t, NULL);
	}
	return 0;
}
