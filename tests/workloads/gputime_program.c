/* A program for the --gpu-time integration tests: initialises the driver
 * (where the CUDA driver loads CUDA_INJECTION64_PATH), asks for a device,
 * prints what it got and the injection library its environment names, and
 * exits 7, so that tests can check that output and status are those of an
 * untraced run. Without a GPU cuInit returns 100 and cuDeviceGet 3.
 * With HOLD, it then waits until the file HOLD exists (a program still running).
 * With `fork N`, it then forks N children 50 ms apart, each of which exits at
 * once through exit() (its atexit handlers, the library's among them), waits
 * for each and prints "forks N ok".
 * Usage: gputime_program [HOLD | fork N] */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
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
    if (argc > 2 && !strcmp(argv[1], "fork")) {
        int n = atoi(argv[2]), ok = 0;
        for (int i = 0; i < n; i++) {
            usleep(50000);
            pid_t child = fork();
            if (child == 0)
                exit(0);
            int status;
            ok += child > 0 && waitpid(child, &status, 0) == child && WIFEXITED(status) &&
                  WEXITSTATUS(status) == 0;
        }
        printf("forks %d ok\n", ok);
        return 7;
    }
    while (argc > 1 && access(argv[1], F_OK) != 0)
        usleep(20000);
    return 7;
}
