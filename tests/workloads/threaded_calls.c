/* Several threads calling cudaMalloc and cudaFree as fast as they can, for
 * tests that need more calls than the ring buffer can hold.
 * Usage: threaded_calls THREADS LOOPS
 * Each thread makes LOOPS (cudaMalloc, cudaFree) pairs and counts their
 * return codes; at the end one JSON line on stdout says what was made:
 *   {"cudaMalloc":{"calls":N,"errors":{"35":N}},"cudaFree":{...}}
 */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#define MAX_THREADS 64
#define MAX_CODES 8  /* distinct return codes counted per function */

struct tally {
	long calls;
	int codes[MAX_CODES];
	long counts[MAX_CODES];
};

struct worker {
	pthread_t thread;
	long loops;
	struct tally malloc_calls, free_calls;
};

/* n more calls that returned code */
static void count(struct tally *t, int code, long n)
{
	t->calls += n;
	if (code == 0)
		return;
	for (int i = 0; i < MAX_CODES; i++) {
		if (t->codes[i] == 0)
			t->codes[i] = code;
		if (t->codes[i] == code) {
			t->counts[i] += n;
			return;
		}
	}
	fprintf(stderr, "threaded_calls: more than %d return codes\n", MAX_CODES);
	exit(70);
}

static void *work(void *arg)
{
	struct worker *w = arg;
	for (long i = 0; i < w->loops; i++) {
		void *p = NULL;
		count(&w->malloc_calls, cudaMalloc(&p, 4096), 1);
		count(&w->free_calls, cudaFree(p), 1);
	}
	return NULL;
}

/* the workers' tallies of one function, summed */
static void print_total(const char *name, struct worker *ws, int n, size_t offset, int last)
{
	struct tally sum = {0};
	for (int k = 0; k < n; k++) {
		struct tally *t = (struct tally *)((char *)&ws[k] + offset);
		long failed = 0;
		for (int i = 0; i < MAX_CODES && t->codes[i]; i++) {
			count(&sum, t->codes[i], t->counts[i]);
			failed += t->counts[i];
		}
		count(&sum, 0, t->calls - failed);
	}
	printf("\"%s\":{\"calls\":%ld,\"errors\":{", name, sum.calls);
	for (int i = 0; i < MAX_CODES && sum.codes[i]; i++)
		printf("%s\"%d\":%ld", i ? "," : "", sum.codes[i], sum.counts[i]);
	printf("}}%s", last ? "}\n" : ",");
}

int main(int argc, char **argv)
{
	if (argc != 3 || atoi(argv[1]) < 1 || atoi(argv[1]) > MAX_THREADS) {
		fprintf(stderr, "usage: threaded_calls THREADS(1-%d) LOOPS\n", MAX_THREADS);
		return 64;
	}
	int n = atoi(argv[1]);
	static struct worker ws[MAX_THREADS];
	for (int k = 0; k < n; k++) {
		ws[k].loops = atol(argv[2]);
		pthread_create(&ws[k].thread, NULL, work, &ws[k]);
	}
	for (int k = 0; k < n; k++)
		pthread_join(ws[k].thread, NULL);
	printf("{");
	print_total("cudaMalloc", ws, n, offsetof(struct worker, malloc_calls), 0);
	print_total("cudaFree", ws, n, offsetof(struct worker, free_calls), 1);
	return 0;
}
