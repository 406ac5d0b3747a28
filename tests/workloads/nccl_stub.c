/* A stand-in libnccl.so.2 for nccl_fake_gpu.c: NCCL's calls as on a GPU,
 * where they succeed. Without a GPU the real library refuses every
 * communicator, so that none of its collectives ever queues work to time.
 * Each call here keeps the CPU interval it ran in, read from CLOCK_MONOTONIC
 * on entry and before it returns: inside the call, where CUPTI's callbacks
 * take the interval of the launch an NCCL call makes (ncclGroupEnd's, in a
 * group). The program reads it back with nccl_stub_api_interval().
 * ncclCommInitRank gives a communicator of its own: rank and ranks as asked.
 */
#include <nccl.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

static uint64_t api_start, api_end;

static uint64_t monotonic_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void nccl_stub_api_interval(uint64_t *start, uint64_t *end)
{
	*start = api_start;
	*end = api_end;
}

/* the call's interval around what it does (the arguments it ignores, cast to void) */
#define CALL(...)                           \
	do {                                \
		api_start = monotonic_ns(); \
		__VA_ARGS__;                \
		api_end = monotonic_ns();   \
		return ncclSuccess;         \
	} while (0)

struct ncclComm {
	int rank, nranks;
};

ncclResult_t ncclGetVersion(int *version) { CALL(*version = 22809); }

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank)
{
	(void)id;
	struct ncclComm *c = malloc(sizeof *c);
	if (!c)
		return ncclSystemError;
	c->rank = rank;
	c->nranks = nranks;
	CALL(*comm = c);
}

ncclResult_t ncclAllReduce(const void *s, void *r, size_t n, ncclDataType_t t, ncclRedOp_t op,
			   ncclComm_t c, cudaStream_t st)
{
	CALL((void)s, (void)r, (void)n, (void)t, (void)op, (void)c, (void)st);
}

ncclResult_t ncclBroadcast(const void *s, void *r, size_t n, ncclDataType_t t, int root,
			   ncclComm_t c, cudaStream_t st)
{
	CALL((void)s, (void)r, (void)n, (void)t, (void)root, (void)c, (void)st);
}

ncclResult_t ncclAllGather(const void *s, void *r, size_t n, ncclDataType_t t, ncclComm_t c,
			   cudaStream_t st)
{
	CALL((void)s, (void)r, (void)n, (void)t, (void)c, (void)st);
}

ncclResult_t ncclReduceScatter(const void *s, void *r, size_t n, ncclDataType_t t,
			       ncclRedOp_t op, ncclComm_t c, cudaStream_t st)
{
	CALL((void)s, (void)r, (void)n, (void)t, (void)op, (void)c, (void)st);
}

ncclResult_t ncclAlltoAll(const void *s, void *r, size_t n, ncclDataType_t t, ncclComm_t c,
			  cudaStream_t st)
{
	CALL((void)s, (void)r, (void)n, (void)t, (void)c, (void)st);
}

ncclResult_t ncclSend(const void *s, size_t n, ncclDataType_t t, int peer, ncclComm_t c,
		      cudaStream_t st)
{
	CALL((void)s, (void)n, (void)t, (void)peer, (void)c, (void)st);
}

ncclResult_t ncclRecv(void *r, size_t n, ncclDataType_t t, int peer, ncclComm_t c,
		      cudaStream_t st)
{
	CALL((void)r, (void)n, (void)t, (void)peer, (void)c, (void)st);
}

ncclResult_t ncclGroupStart(void) { CALL((void)0); }
ncclResult_t ncclGroupEnd(void) { CALL((void)0); }
