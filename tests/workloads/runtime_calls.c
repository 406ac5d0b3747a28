/* A workload for integration tests: calls the CUDA runtime with known
 * arguments, ITER times, and prints one JSON line per call with what it passed
 * and what the call returned and wrote to its out-parameters, so tests can
 * compare cudaprobe's decoded events against the truth.
 * Usage: runtime_calls [ITER] [THREADS] [SLEEP_MS_BEFORE_START | -]
 * With `-` it starts once a line (or the end) comes on stdin: a test lets it
 * go when cudaprobe says it has attached. It then prints {"done":1} after its
 * calls and exits at the end of stdin: it runs while cudaprobe reads it.
 */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int iterations = 1;

void fake_kernel(float *a) { (void)a; }

static void *run(void *arg)
{
	(void)arg;
	for (int i = 0; i < iterations; i++) {
		int count = 42;
		cudaError_t r = cudaGetDeviceCount(&count);
		printf("{\"event\":\"cudaGetDeviceCount\",\"ret\":%d,\"count\":%d}\n", r, count);

		void *p = (void *)0xdead0000;
		size_t size = (size_t)1 << 20;
		r = cudaMalloc(&p, size);
		printf("{\"event\":\"cudaMalloc\",\"ret\":%d,\"devPtr\":\"%#lx\",\"size\":%zu}\n",
		       r, (unsigned long)(uintptr_t)p, size);

		r = cudaMemcpy((void *)0x1000, (void *)0x2000, 4096, cudaMemcpyHostToDevice);
		printf("{\"event\":\"cudaMemcpy\",\"ret\":%d}\n", r);

		r = cudaMemcpyAsync((void *)0x3000, (void *)0x4000, 123, cudaMemcpyDeviceToHost,
				    (cudaStream_t)0x5000);
		printf("{\"event\":\"cudaMemcpyAsync\",\"ret\":%d}\n", r);

		r = cudaMemset((void *)0x6000, 7, 256);
		printf("{\"event\":\"cudaMemset\",\"ret\":%d}\n", r);

		dim3 grid = {4, 2, 1}, block = {256, 1, 1};
		float *dev = (float *)0x9000;
		void *kargs[] = {&dev};
		r = cudaLaunchKernel((const void *)fake_kernel, grid, block, kargs, 1024,
				     (cudaStream_t)0x7000);
		printf("{\"event\":\"cudaLaunchKernel\",\"ret\":%d,\"func\":\"%#lx\","
		       "\"args\":\"%#lx\"}\n", r, (unsigned long)(uintptr_t)fake_kernel,
		       (unsigned long)(uintptr_t)kargs);

		cudaStream_t s = (cudaStream_t)0x5eed;
		r = cudaStreamCreate(&s);
		printf("{\"event\":\"cudaStreamCreate\",\"ret\":%d,\"pStream\":\"%#lx\"}\n", r,
		       (unsigned long)(uintptr_t)s);

		float ms = 1.5f;
		r = cudaEventElapsedTime(&ms, (cudaEvent_t)0xe1, (cudaEvent_t)0xe2);
		printf("{\"event\":\"cudaEventElapsedTime\",\"ret\":%d,\"ms\":%g}\n", r, ms);

		r = cudaFree((void *)0x8000);
		printf("{\"event\":\"cudaFree\",\"ret\":%d}\n", r);

		r = cudaDeviceSynchronize();
		printf("{\"event\":\"cudaDeviceSynchronize\",\"ret\":%d}\n", r);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	iterations = argc > 1 ? atoi(argv[1]) : 1;
	int threads = argc > 2 ? atoi(argv[2]) : 1;
	int held = argc > 3 && strcmp(argv[3], "-") == 0;
	char line[16];
	if (held) {
		if (!fgets(line, sizeof(line), stdin))
			line[0] = 0;
	} else if (argc > 3) {
		usleep(atoi(argv[3]) * 1000);
	}
	pthread_t t[64];
	for (int i = 0; i < threads && i < 64; i++)
		pthread_create(&t[i], NULL, run, NULL);
	for (int i = 0; i < threads && i < 64; i++)
		pthread_join(t[i], NULL);
	if (held) {
		printf("{\"done\":1}\n");
		while (fgets(line, sizeof(line), stdin))
			;
	}
	return 0;
}
