/* A workload whose children outlive it, and whose grandchildren outlive
 * their parents: what `trace -- COMMAND` must follow to the last exit.
 * Usage: family CHILDREN GRANDCHILDREN CALLS EXIT
 *   The parent makes one cudaMalloc (size 1), starts CHILDREN children and
 *   exits with status EXIT at once. Each child waits until the parent has
 *   exited (EOF on a pipe only the parent held open: no sleep), makes CALLS
 *   cudaMalloc calls of size 1000*C+i (C: the child's number from 1, i from
 *   1), starts GRANDCHILDREN grandchildren and exits; each grandchild waits
 *   the same way for its parent's exit, then makes CALLS calls of size
 *   1000*C+100*G+i (G: its number from 1).
 * Each process prints a JSON line on stderr: {"pid":..,"size":..,"calls":..},
 * size being its first call's.
 */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* the write ends this process holds for its children: a child closes its
 * siblings' too, or their gates would wait for it */
static int held[64], nheld;

/* fork a process that returns from here (1) once its parent has exited */
static int fork_after_exit(void)
{
	int gate[2];
	if (nheld == 64 || pipe(gate))
		exit(70);
	pid_t pid = fork();
	if (pid < 0)
		exit(71);
	if (pid > 0) {  /* the parent: keeps the write end until it exits */
		close(gate[0]);
		held[nheld++] = gate[1];
		return 0;
	}
	close(gate[1]);
	for (int i = 0; i < nheld; i++)
		close(held[i]);
	nheld = 0;
	char byte;
	while (read(gate[0], &byte, 1) > 0)
		;
	close(gate[0]);
	return 1;
}

static void calls(long first, int n)
{
	for (int i = 0; i < n; i++) {
		void *p = NULL;
		cudaMalloc(&p, (size_t)(first + i));
	}
	fprintf(stderr, "{\"pid\":%d,\"size\":%ld,\"calls\":%d}\n", (int)getpid(), first, n);
}

int main(int argc, char **argv)
{
	if (argc != 5) {
		fprintf(stderr, "usage: family CHILDREN GRANDCHILDREN CALLS EXIT\n");
		return 64;
	}
	int children = atoi(argv[1]), grandchildren = atoi(argv[2]), n = atoi(argv[3]);
	calls(1, 1);
	for (int c = 1; c <= children; c++) {
		if (!fork_after_exit())
			continue;
		calls(1000L * c + 1, n);
		for (int g = 1; g <= grandchildren; g++) {
			if (!fork_after_exit())
				continue;
			calls(1000L * c + 100L * g + 1, n);
			return 0;
		}
		return 0;
	}
	return atoi(argv[4]);
}
