/* A workload for integration tests: the real libnccl.so.2 of the
 * nvidia-nccl-cu13 wheel, no GPU, called with collectives of several sizes
 * and datatypes, alone and in groups, on memory laid out as a communicator
 * of rank 1 of 4 (as nccl_comm.c: NCCL's magic, and the rank and number of
 * ranks at the offsets this libnccl keeps them, which cudaprobe reads; NCCL
 * refuses it at its second magic word, so that every call fails before it
 * reads further). For stats --by collective's table per operation and size.
 *
 * Usage: nccl_sizes RANK_OFFSET NRANKS_OFFSET
 * Prints {"pid":...}, waits for a line on stdin, makes the calls, printing
 * one JSON line per operation kind (its calls: event, count, datatype and
 * peer of each; how many times it was made), then {"done":1}, and exits when
 * stdin closes (its memory is read while it runs).
 */
#include <nccl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BYTES (4u << 20) /* more than NCCL 2.28's communicator */
#define MAGIC 0x0280028002800280ull
#define NRANKS 4

static ncclComm_t comm;
static char buf[64];
static const cudaStream_t stream = (cudaStream_t)0x5000;

enum kind { AR, AG, RS, A2A, GATHER, BCAST, SEND, RECV };
static const char *const EVENTS[] = {"ncclAllReduce", "ncclAllGather", "ncclReduceScatter",
				     "ncclAlltoAll", "ncclGather", "ncclBcast", "ncclSend",
				     "ncclRecv"};
struct member {
	enum kind kind;
	size_t count;
	ncclDataType_t type;
	int peer;
};

static void call(const struct member *m)
{
	switch (m->kind) {
	case AR: ncclAllReduce(buf, buf, m->count, m->type, ncclSum, comm, stream); break;
	case AG: ncclAllGather(buf, buf, m->count, m->type, comm, stream); break;
	case RS: ncclReduceScatter(buf, buf, m->count, m->type, ncclSum, comm, stream); break;
	case A2A: ncclAlltoAll(buf, buf, m->count, m->type, comm, stream); break;
	case GATHER: ncclGather(buf, buf, m->count, m->type, 0, comm, stream); break;
	case BCAST: ncclBcast(buf, m->count, m->type, 0, comm, stream); break;
	case SEND: ncclSend(buf, m->count, m->type, m->peer, comm, stream); break;
	case RECV: ncclRecv(buf, m->count, m->type, m->peer, comm, stream); break;
	}
}

/* `times` times: the call, or the group of the `n` calls */
static void operation(int times, int n, const struct member *m)
{
	for (int t = 0; t < times; t++) {
		if (n > 1)
			ncclGroupStart();
		for (int i = 0; i < n; i++)
			call(&m[i]);
		if (n > 1)
			ncclGroupEnd();
	}
	printf("{\"times\":%d,\"calls\":[", times);
	for (int i = 0; i < n; i++)
		printf("%s{\"event\":\"%s\",\"count\":%zu,\"datatype\":%d,\"peer\":%d}", i ? "," : "",
		       EVENTS[m[i].kind], m[i].count, (int)m[i].type, m[i].peer);
	printf("]}\n");
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc != 3)
		return 2;
	long rank_at = strtol(argv[1], NULL, 0), nranks_at = strtol(argv[2], NULL, 0);
	if (rank_at < 8 || nranks_at < 8 || rank_at > BYTES - 4 || nranks_at > BYTES - 4)
		return 2;
	unsigned char *memory = calloc(1, BYTES);
	if (!memory)
		return 1;
	uint64_t magic = MAGIC;
	int rank = 1, nranks = NRANKS;
	memcpy(memory, &magic, 8);
	memcpy(memory + rank_at, &rank, 4);
	memcpy(memory + nranks_at, &nranks, 4);
	comm = (ncclComm_t)memory;
	int version = 0;
	ncclGetVersion(&version); /* libnccl is mapped, and used */
	printf("{\"pid\":%d,\"rank\":%d,\"nranks\":%d}\n", (int)getpid(), rank, nranks);

	char line[16];
	if (!fgets(line, sizeof line, stdin))
		return 0;
	operation(3, 1, (struct member[]){{AR, 1024, ncclFloat32, -1}});
	operation(2, 1, (struct member[]){{AR, 1 << 20, ncclFloat32, -1}});
	operation(2, 1, (struct member[]){{AR, 1 << 20, ncclBfloat16, -1}});
	operation(1, 1, (struct member[]){{AG, 1000, ncclBfloat16, -1}});
	operation(2, 1, (struct member[]){{RS, 333, ncclInt64, -1}});
	operation(1, 1, (struct member[]){{A2A, 64, ncclInt8, -1}});
	operation(1, 1, (struct member[]){{GATHER, 12, ncclFloat64, -1}});
	operation(2, 1, (struct member[]){{BCAST, 99, ncclInt32, -1}});
	operation(2, 2, (struct member[]){{SEND, 4096, ncclFloat16, 2}, {RECV, 4096, ncclFloat16, 0}});
	operation(1, 8, (struct member[]){{SEND, 256, ncclFloat32, 0}, {RECV, 256, ncclFloat32, 0},
					   {SEND, 256, ncclFloat32, 1}, {RECV, 256, ncclFloat32, 1},
					   {SEND, 256, ncclFloat32, 2}, {RECV, 256, ncclFloat32, 2},
					   {SEND, 256, ncclFloat32, 3}, {RECV, 256, ncclFloat32, 3}});
	operation(1, 3, (struct member[]){{AR, 10, ncclFloat32, -1}, {AR, 20, ncclFloat32, -1},
					   {AR, 30, ncclFloat32, -1}});
	printf("{\"done\":1}\n");
	while (fgets(line, sizeof line, stdin))
		;
	return 0;
}
