/* A stand-in libcudart.so.13 for racing_launches.c: cudaLaunchKernel fails as
 * the real runtime does without a driver, and a launch on stream 1 stays in
 * the call until racing_release(), so that a launch on another thread can
 * begin and return while it is in: two first launches of one kernel, the
 * later one done first. racing_wait_inside() returns once it is in.
 */
#include <cuda_runtime_api.h>
#include <pthread.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t changed = PTHREAD_COND_INITIALIZER;
static int inside, released;

cudaError_t cudaLaunchKernel(const void *func, dim3 grid, dim3 block, void **args,
			     size_t shared, cudaStream_t stream)
{
	(void)func, (void)grid, (void)block, (void)args, (void)shared;
	if (stream == (cudaStream_t)1) {
		pthread_mutex_lock(&lock);
		inside = 1;
		pthread_cond_broadcast(&changed);
		while (!released)
			pthread_cond_wait(&changed, &lock);
		pthread_mutex_unlock(&lock);
	}
	return cudaErrorInsufficientDriver;
}

void racing_wait_inside(void)
{
	pthread_mutex_lock(&lock);
	while (!inside)
		pthread_cond_wait(&changed, &lock);
	pthread_mutex_unlock(&lock);
}

void racing_release(void)
{
	pthread_mutex_lock(&lock);
	released = 1;
	pthread_cond_broadcast(&changed);
	pthread_mutex_unlock(&lock);
}
