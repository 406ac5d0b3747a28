/* Threads that change names between CUDA calls, for the PROCESS column:
 * each call is printed with the name its thread had (PR_GET_NAME) as
 * {"tid": T, "comm": "..."}.
 *   1. the main thread calls;  2. it renames itself (prctl) and calls;
 *   3. a second thread calls (its name inherited);  4. the main thread renames
 *   it (pthread_setname_np: a write to /proc/self/task/TID/comm) and it calls;
 *   5. the main thread execs this file again (its name back to the file's),
 *   which calls once more.
 * Usage: renames [--after-exec]
 */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

static pthread_barrier_t step;

static void call(void)
{
	char name[16] = {0};
	int n;
	prctl(PR_GET_NAME, name);
	cudaGetDeviceCount(&n);
	printf("{\"tid\": %ld, \"comm\": \"%s\"}\n", (long)syscall(SYS_gettid), name);
	fflush(stdout);
}

static void *second(void *arg)
{
	(void)arg;
	call();
	pthread_barrier_wait(&step); /* renamed by the main thread in between */
	pthread_barrier_wait(&step);
	call();
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc > 1 && strcmp(argv[1], "--after-exec") == 0) {
		call();
		return 0;
	}
	call();
	prctl(PR_SET_NAME, "renamed");
	call();
	pthread_t t;
	pthread_barrier_init(&step, NULL, 2);
	pthread_create(&t, NULL, second, NULL);
	pthread_barrier_wait(&step);
	pthread_setname_np(t, "other");
	pthread_barrier_wait(&step);
	pthread_join(t, NULL);
	execl(argv[0], argv[0], "--after-exec", (char *)NULL); /* run by its path */
	return 1;
}
