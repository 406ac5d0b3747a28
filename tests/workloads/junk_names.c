/* A tenant's flood of short processes, each under a name of its own: N
 * children, one after another, each renaming itself junkNNNN (prctl) and
 * making one CUDA call before it exits. Prints "flooded N" at the end.
 * Usage: junk_names N */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 1000;
	for (int i = 0; i < n; i++) {
		pid_t pid = fork();
		if (pid < 0)
			return perror("fork"), 1;
		if (pid == 0) {
			char name[16];
			int count;
			snprintf(name, sizeof name, "junk%04d", i);
			prctl(PR_SET_NAME, name);
			cudaGetDeviceCount(&count);
			_exit(0);
		}
		int status;
		if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status))
			return fprintf(stderr, "child %d failed\n", i), 1;
	}
	printf("flooded %d\n", n);
	return 0;
}
