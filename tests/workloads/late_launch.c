/* Launches of kernel handles made before a tracer attaches, as PyTorch's are:
 * cuLibraryGetKernel for two kernels (one with a mangled name over 1 KiB),
 * then {"ready":1} and a wait for a line on stdin (the tracer attaches),
 * then LAUNCHES launches of each, {"launched":N}, a wait for stdin to close
 * (the tracer detaches), and exit; with `exit`, exit at once after launching,
 * freeing the handles' names first, as a process's end does.
 * Usage: late_launch LAUNCHES [exit]   (linked against tests/workloads/fake_handles.c)
 */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	int launches = argc > 1 ? atoi(argv[1]) : 10;
	static char long_name[1400];
	/* void deep::f<Box<...>>(): a template argument list long enough to pass 1 KiB */
	strcpy(long_name, "_ZN4deep1fIJ");
	for (int i = 0; i < 120; i++)
		strcat(long_name, "N3Box5InnerE");
	strcat(long_name, "EEEvv");
	CUkernel a, b;
	cuInit(0);
	cuLibraryGetKernel(&a, NULL, "_Z6vecAddPKfS0_Pfi");
	cuLibraryGetKernel(&b, NULL, long_name);
	printf("{\"pid\":%d}\n{\"ready\":1}\n", getpid());
	fflush(stdout);
	char line[16];
	if (!fgets(line, sizeof line, stdin))
		return 1;
	for (int i = 0; i < launches; i++) {
		cuLaunchKernel((CUfunction)a, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL);
		cuLaunchKernel((CUfunction)b, 2, 1, 1, 64, 1, 1, 0, NULL, NULL, NULL);
	}
	printf("{\"launched\":%d}\n", launches);
	fflush(stdout);
	if (argc > 2 && strcmp(argv[2], "exit") == 0)
		return 0;
	fgets(line, sizeof line, stdin);	/* until the test has detached */
	return 0;
}
