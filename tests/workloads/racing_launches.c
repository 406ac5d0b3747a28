/* Two first launches of one kernel, on two threads, the one that began second
 * returning first: on racing_cudart.c (LD_LIBRARY_PATH), whose launch on
 * stream 1 waits in the call. Prints {"ready":1}, starts at a line on stdin,
 * then one JSON line per launch, and exits at once: a tracer that reads the
 * records later finds the process gone, its maps with it.
 */
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

void racing_kernel(float *a) { (void)a; }

static cudaError_t launch(cudaStream_t stream)
{
	dim3 one = {1, 1, 1};
	return cudaLaunchKernel((const void *)racing_kernel, one, one, NULL, 0, stream);
}

static void *first(void *arg)
{
	*(cudaError_t *)arg = launch((cudaStream_t)1);
	return NULL;
}

int main(void)
{
	void (*wait_inside)(void) = (void (*)(void))dlsym(RTLD_DEFAULT, "racing_wait_inside");
	void (*release)(void) = (void (*)(void))dlsym(RTLD_DEFAULT, "racing_release");
	if (!wait_inside || !release) {
		fprintf(stderr, "racing_launches: run it on racing_cudart.c's libcudart.so.13\n");
		return 2;
	}
	printf("{\"ready\":1}\n");
	fflush(stdout);
	char line[8];
	if (!fgets(line, sizeof(line), stdin))
		return 1;
	pthread_t thread;
	cudaError_t held = cudaSuccess;
	pthread_create(&thread, NULL, first, &held);
	wait_inside();
	cudaError_t r = launch((cudaStream_t)2);	/* begins second, returns first */
	release();
	pthread_join(thread, NULL);
	printf("{\"event\":\"cudaLaunchKernel\",\"ret\":%d,\"stream\":2}\n", r);
	printf("{\"event\":\"cudaLaunchKernel\",\"ret\":%d,\"stream\":1}\n", held);
	return 0;
}
