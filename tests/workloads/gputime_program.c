/* A program for the --gpu-time integration tests: initialises the driver
 * (where the CUDA driver loads CUDA_INJECTION64_PATH), asks for a device,
 * prints what it got and the injection library its environment names, and
 * exits 7, so that tests can check that output and status are those of an
 * untraced run. Without a GPU cuInit returns 100 and cuDeviceGet 3.
 * With HOLD, it then waits until the file HOLD exists (a program still running).
 * Usage: gputime_program [HOLD] */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    const char *injection = getenv("CUDA_INJECTION64_PATH");
    CUdevice device = -1;
    CUresult init = cuInit(0);
    CUresult get = cuDeviceGet(&device, 0);
    printf("cuInit %d cuDeviceGet %d\n", (int)init, (int)get);
    /* the test's own library when it set one; cudaprobe's is not named here */
    printf("injection %s\n", injection && !getenv("CUDAPROBE_GPUTIME_DIR") ? injection : "-");
    fflush(stdout);
    while (argc > 1 && access(argv[1], F_OK) != 0)
        usleep(20000);
    return 7;
}
