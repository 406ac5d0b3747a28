/* A workload for integration tests: memory laid out as an NCCL communicator
 * of rank 2 of 5, made before cudaprobe attaches, for reading a
 * communicator's rank from memory (decode/nccl.py) on the real libnccl.so.2,
 * without a GPU.
 *
 * Usage: nccl_comm RANK_OFFSET NRANKS_OFFSET
 * The offsets are where this libnccl keeps a communicator's rank and number of
 * ranks. The memory starts with NCCL's magic, as a communicator does, but
 * lacks the second magic word that NCCL's checks also compare, so NCCL refuses
 * it before reading further: no call touches memory the program does not own.
 * The program prints {"pid":...,"comm":...,"zeroed":...}, waits for a line on
 * stdin, then calls ncclCommCuDevice and ncclAllReduce on it and on zeroed
 * memory (no magic at all), printing a JSON line per call, then {"done":1},
 * and exits when stdin closes (its memory is read while it runs).
 */
#include <nccl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BYTES (4u << 20) /* more than NCCL 2.28's communicator */
#define MAGIC 0x0280028002800280ull

static void calls(const char *name, void *comm)
{
	int device = -1;
	ncclResult_t r = ncclCommCuDevice((ncclComm_t)comm, &device);
	printf("{\"event\":\"ncclCommCuDevice\",\"which\":\"%s\",\"ret\":%d}\n", name, r);
	r = ncclAllReduce((void *)0x1000, (void *)0x2000, 8, ncclFloat32, ncclSum,
			  (ncclComm_t)comm, NULL);
	printf("{\"event\":\"ncclAllReduce\",\"which\":\"%s\",\"ret\":%d}\n", name, r);
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc != 3)
		return 2;
	long rank_at = strtol(argv[1], NULL, 0), nranks_at = strtol(argv[2], NULL, 0);
	if (rank_at < 8 || nranks_at < 8 || rank_at > BYTES - 4 || nranks_at > BYTES - 4)
		return 2;
	unsigned char *comm = calloc(1, BYTES), *zeroed = calloc(1, BYTES);
	if (!comm || !zeroed)
		return 1;
	uint64_t magic = MAGIC;
	int rank = 2, nranks = 5;
	memcpy(comm, &magic, 8);
	memcpy(comm + rank_at, &rank, 4);
	memcpy(comm + nranks_at, &nranks, 4);
	int version = 0;
	ncclGetVersion(&version); /* libnccl is mapped, and used */
	printf("{\"pid\":%d,\"comm\":\"%#lx\",\"zeroed\":\"%#lx\",\"version\":%d}\n", (int)getpid(),
	       (unsigned long)(uintptr_t)comm, (unsigned long)(uintptr_t)zeroed, version);

	char line[16];
	if (!fgets(line, sizeof line, stdin))
		return 0;
	calls("comm", comm);
	calls("zeroed", zeroed);
	printf("{\"done\":1}\n");
	while (fgets(line, sizeof line, stdin))
		;
	return 0;
}
