/* Two NCCL ranks on a GPU where there is none, for stats --by collective
 * --gpu-time: rank 0 starts rank 1 (posix_spawn of itself); each makes a
 * communicator of 2 ranks and the same operations on it through the
 * stand-in libnccl of nccl_stub.c (traced by real uprobes), and writes for
 * each what cupti/gputime.c would have written had a GPU run it, to
 * $CUDAPROBE_GPUTIME_DIR: the API record of the launch (the CPU interval the
 * stub read inside the call: ncclGroupEnd's for a group) and the NCCL
 * kernel's record, on a GPU timeline both ranks compute alike from T0:
 *
 *   operation n runs from slot n on: its kernel starts at the slot's start
 *   on both ranks, but for the first of each of the ITERS iterations, where
 *   rank 1's starts LATE_US later; on both it ends TRANSFER (the operation
 *   kind's) after the later start; slot n+1 begins 10 us after that end.
 *
 * So rank 0 waits LATE_US in each iteration on the GPU. Its host, though,
 * comes late: it sleeps 2 ms before each call, rank 1 not at all; the
 * ranks' entry times would name rank 0. Operations: ITERS iterations of an
 * all-reduce of 4 KiB, 4 MiB and 64 MiB, a broadcast of 64 MiB, an
 * all-gather of 8 MiB a rank; then 3 each of an all-to-all (ncclAlltoAll,
 * 4 MiB a peer), a reduce-scatter (8 MiB a rank), a group of a send and a
 * receive (4 MiB), a group of a send and a receive with each rank (2 MiB a
 * peer), and a group of three all-reduces (1, 2 and 4 MiB).
 *
 * Rank 0 prints one JSON line per operation kind: what it is as nccl-tests
 * names it, its calls, the bytes they passed, its size as nccl-tests counts
 * it, its type, its kernels' TRANSFER, how many times it ran; then the
 * lateness. Each rank prints its pid. Both sleep until the timeline's end
 * before exiting, so that every kernel lies within the run.
 * Usage: nccl_fake_gpu ITERS LATE_US   (rank 1: ... 1 T0) */
#define _GNU_SOURCE
#include <fcntl.h>
#include <nccl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "gputime.h"

extern char **environ;
void nccl_stub_api_interval(uint64_t *start, uint64_t *end);

#define MIB (1u << 20)
#define GAP_NS 10000u
#define HOST_LATE_NS 2000000L
#define REPS 3
#define LATE_RANK 1

enum kind { AR, BC, AG, RS, A2A, SEND, RECV };
static const char *const EVENTS[] = {"ncclAllReduce", "ncclBroadcast", "ncclAllGather",
				     "ncclReduceScatter", "ncclAlltoAll", "ncclSend", "ncclRecv"};
struct member {
	enum kind kind;
	size_t count; /* as the call takes it */
	ncclDataType_t type;
	int peer; /* -1: the other rank */
};
struct op {
	const char *test; /* nccl-tests' name of it */
	size_t size;      /* nccl-tests' size: bytes */
	const char *type;
	uint64_t transfer_ns;
	int members;
	struct member m[4];
};

static const struct op OPS[] = {
	/* the iterations: the first is where rank 1 comes late */
	{"all_reduce", 4096, "float", 20000, 1, {{AR, 1024, ncclFloat32, 0}}},
	{"all_reduce", 4 * MIB, "float", 40000, 1, {{AR, MIB, ncclFloat32, 0}}},
	{"all_reduce", 64 * MIB, "float", 300000, 1, {{AR, 16 * MIB, ncclFloat32, 0}}},
	{"broadcast", 64 * MIB, "float", 250000, 1, {{BC, 16 * MIB, ncclFloat32, 0}}},
	{"all_gather", 16 * MIB, "bfloat16", 90000, 1, {{AG, 4 * MIB, ncclBfloat16, 0}}},
	/* then REPS of each */
	{"alltoall", 8 * MIB, "float", 60000, 1, {{A2A, MIB, ncclFloat32, 0}}},
	{"reduce_scatter", 16 * MIB, "float", 80000, 1, {{RS, 2 * MIB, ncclFloat32, 0}}},
	{"sendrecv", 4 * MIB, "float", 35000, 2,
	 {{SEND, MIB, ncclFloat32, -1}, {RECV, MIB, ncclFloat32, -1}}},
	{"alltoall", 4 * MIB, "float", 45000, 4,
	 {{SEND, MIB / 2, ncclFloat32, 0}, {RECV, MIB / 2, ncclFloat32, 0},
	  {SEND, MIB / 2, ncclFloat32, 1}, {RECV, MIB / 2, ncclFloat32, 1}}},
	{"all_reduce", 7 * MIB, "float", 70000, 3,
	 {{AR, MIB / 4, ncclFloat32, 0}, {AR, MIB / 2, ncclFloat32, 0}, {AR, MIB, ncclFloat32, 0}}},
};
#define ITER_OPS 5
#define N_OPS (sizeof OPS / sizeof OPS[0])

static int fd;
static uint32_t corr;

static uint64_t monotonic_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void record(struct gputime_record r, const char *text)
{
	char buf[sizeof r + 256] = {0};
	size_t len = text ? strlen(text) + 1 : 0;
	r.size = (uint16_t)(sizeof r + ((len + 7) & ~(size_t)7));
	memcpy(buf, &r, sizeof r);
	if (text)
		memcpy(buf + sizeof r, text, len);
	if (write(fd, buf, r.size) != r.size)
		exit(4);
}

static void *buffer(void)
{
	static char b[64];
	return b;
}

static ncclResult_t call(const struct member *m, int rank, ncclComm_t comm)
{
	int peer = m->peer < 0 ? 1 - rank : m->peer;
	cudaStream_t s = (cudaStream_t)0x7000;
	switch (m->kind) {
	case AR: return ncclAllReduce(buffer(), buffer(), m->count, m->type, ncclSum, comm, s);
	case BC: return ncclBroadcast(buffer(), buffer(), m->count, m->type, 0, comm, s);
	case AG: return ncclAllGather(buffer(), buffer(), m->count, m->type, comm, s);
	case RS: return ncclReduceScatter(buffer(), buffer(), m->count, m->type, ncclSum, comm, s);
	case A2A: return ncclAlltoAll(buffer(), buffer(), m->count, m->type, comm, s);
	case SEND: return ncclSend(buffer(), m->count, m->type, peer, comm, s);
	case RECV: return ncclRecv(buffer(), m->count, m->type, peer, comm, s);
	}
	return ncclInternalError;
}

/* one operation: its calls (a group where several), its records */
static void run(const struct op *op, int rank, ncclComm_t comm, uint64_t start, uint64_t late,
		uint32_t tid)
{
	if (rank != LATE_RANK) {
		struct timespec host_late = {0, HOST_LATE_NS};
		nanosleep(&host_late, NULL);
	}
	if (op->members > 1 && ncclGroupStart() != ncclSuccess)
		exit(5);
	for (int i = 0; i < op->members; i++)
		if (call(&op->m[i], rank, comm) != ncclSuccess)
			exit(5);
	if (op->members > 1 && ncclGroupEnd() != ncclSuccess)
		exit(5);
	uint64_t api_start, api_end;
	nccl_stub_api_interval(&api_start, &api_end);
	corr++;
	record((struct gputime_record){.type = GPUTIME_API, .correlation = corr,
				       .start = api_start, .end = api_end, .tid = tid, .cbid = 1,
				       .domain = 4}, NULL);
	uint64_t mine = start + (rank == LATE_RANK ? late : 0);
	record((struct gputime_record){.type = GPUTIME_KERNEL, .correlation = corr, .start = mine,
				       .end = start + late + op->transfer_ns, .device = (uint32_t)rank,
				       .context = 1, .stream = 7, .name_id = 1}, NULL);
}

static void describe(const struct op *op, int times, uint64_t late)
{
	size_t bytes = 0; /* what its calls passed: count x element size */
	for (int i = 0; i < op->members; i++)
		bytes += op->m[i].count * (op->m[i].type == ncclBfloat16 ? 2 : 4);
	printf("{\"nccl_tests\":\"%s\",\"bytes\":%zu,\"size\":%zu,\"type\":\"%s\","
	       "\"transfer_ns\":%llu,\"times\":%d,\"late_ns\":%llu,\"events\":[", op->test, bytes,
	       op->size, op->type, (unsigned long long)op->transfer_ns, times,
	       (unsigned long long)late);
	for (int i = 0; i < op->members; i++)
		printf("%s\"%s\"", i ? "," : "", EVENTS[op->m[i].kind]);
	printf("]}\n");
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	const char *dir = getenv("CUDAPROBE_GPUTIME_DIR");
	if (argc < 3 || !dir)
		return 3;
	int iters = atoi(argv[1]);
	uint64_t late = strtoull(argv[2], NULL, 0) * 1000u;
	int rank = argc > 4 ? atoi(argv[3]) : 0;
	uint64_t t0 = argc > 4 ? strtoull(argv[4], NULL, 0) : monotonic_ns();
	pid_t other = 0;
	if (rank == 0) {
		char t0s[32], *args[] = {argv[0], argv[1], argv[2], "1", t0s, NULL};
		snprintf(t0s, sizeof t0s, "%llu", (unsigned long long)t0);
		if (posix_spawn(&other, "/proc/self/exe", NULL, NULL, args, environ) != 0)
			return 3;
	}
	char path[4096];
	snprintf(path, sizeof path, "%s/gputime.fake-%d.bin", dir, (int)getpid());
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	if (fd < 0)
		return 3;
	struct gputime_header h = {.version = GPUTIME_VERSION, .pid = (uint32_t)getpid(),
				   .clock = GPUTIME_CLOCK_MONOTONIC,
				   .record_size = sizeof(struct gputime_record), .system_tids = 1};
	memcpy(h.magic, GPUTIME_MAGIC, sizeof h.magic);
	if (write(fd, &h, sizeof h) != sizeof h)
		return 4;
	record((struct gputime_record){.type = GPUTIME_FUNCTION, .cbid = 1, .domain = 4},
	       "cuLaunchKernelEx");
	record((struct gputime_record){.type = GPUTIME_NAME, .name_id = 1},
	       "ncclDevKernel_Generic");
	ncclUniqueId id;
	memset(&id, 0, sizeof id);
	ncclComm_t comm;
	if (ncclCommInitRank(&comm, 2, id, rank) != ncclSuccess)
		return 5;
	printf("{\"rank\":%d,\"pid\":%d,\"nranks\":2}\n", rank, (int)getpid());
	uint32_t tid = (uint32_t)gettid();
	uint64_t slot = t0;
	for (int it = 0; it < iters; it++)
		for (int k = 0; k < ITER_OPS; k++) {
			uint64_t l = k == 0 ? late : 0;
			run(&OPS[k], rank, comm, slot, l, tid);
			slot += l + OPS[k].transfer_ns + GAP_NS;
		}
	for (size_t k = ITER_OPS; k < N_OPS; k++)
		for (int r = 0; r < REPS; r++) {
			run(&OPS[k], rank, comm, slot, 0, tid);
			slot += OPS[k].transfer_ns + GAP_NS;
		}
	close(fd);
	if (rank == 0) {
		for (size_t k = 0; k < N_OPS; k++)
			describe(&OPS[k], k < ITER_OPS ? iters : REPS, k == 0 ? late : 0);
		printf("{\"late_rank\":%d,\"late_ns\":%llu,\"late_ops\":%d,\"host_late_rank\":0}\n",
		       LATE_RANK, (unsigned long long)late, iters);
	}
	struct timespec until = {(time_t)(slot / 1000000000u), (long)(slot % 1000000000u)};
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, NULL) != 0)
		;
	int status = 0;
	if (other && (waitpid(other, &status, 0) != other || status != 0))
		return 6;
	return 0;
}
