/* A workload for integration tests: calls NCCL (the real libnccl.so.2 of the
 * nvidia-nccl-cu13 wheel, no GPU) with known arguments and prints one JSON
 * line per call with what it passed, what the call returned and what it
 * wrote, so tests can compare cudaprobe's decoded events against the truth.
 *
 * Without a GPU ncclGetVersion succeeds and the calls that need a device or a
 * communicator fail. The collectives get a communicator that NCCL refuses at
 * its magic check: zeroed memory, larger than NCCL's communicator (2.28 reads
 * a field a megabyte in for its NVTX ranges before it checks), so no call
 * touches memory the program does not own.
 * Usage: nccl_calls
 */
#include <nccl.h>
#include <stdint.h>
#include <stdio.h>

#define HEX(p) ((unsigned long)(uintptr_t)(p))

static uint64_t not_a_comm[(4 << 20) / 8]; /* zeroed: NCCL's magic check fails */

static void coll(const char *event, ncclResult_t r, const void *send, const void *recv,
		 const char *count_name, size_t count, int datatype, const char *extra,
		 ncclComm_t comm, cudaStream_t stream)
{
	/* ncclBcast has one buffer, `buff` (send NULL) */
	char sendbuff[64] = "";
	if (send)
		snprintf(sendbuff, sizeof sendbuff, "\"sendbuff\":\"%#lx\",", HEX(send));
	printf("{\"event\":\"%s\",\"ret\":%d,%s\"%s\":\"%#lx\","
	       "\"%s\":%zu,\"datatype\":%d%s,\"comm\":\"%#lx\",\"stream\":\"%#lx\"}\n",
	       event, r, sendbuff, send ? "recvbuff" : "buff", HEX(recv), count_name, count,
	       datatype, extra, HEX(comm), HEX(stream));
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	int version = -1;
	ncclResult_t r = ncclGetVersion(&version);
	printf("{\"event\":\"ncclGetVersion\",\"ret\":%d,\"version\":%d}\n", r, version);

	ncclUniqueId id = {{0}};
	ncclComm_t comm = NULL;
	r = ncclCommInitRank(&comm, 4, id, 3);
	printf("{\"event\":\"ncclCommInitRank\",\"ret\":%d,\"nranks\":4,\"rank\":3}\n", r);

	ncclComm_t bad = (ncclComm_t)not_a_comm;
	cudaStream_t stream = (cudaStream_t)0x5000;
	const void *send = (const void *)0x7f0000001000;
	void *recv = (void *)0x7f0000101000;

	r = ncclGroupStart();
	printf("{\"event\":\"ncclGroupStart\",\"ret\":%d}\n", r);
	r = ncclAllReduce(send, recv, 262144, ncclFloat32, ncclSum, bad, stream);
	coll("ncclAllReduce", r, send, recv, "count", 262144, ncclFloat32, ",\"op\":0", bad, stream);
	r = ncclGroupEnd();
	printf("{\"event\":\"ncclGroupEnd\",\"ret\":%d}\n", r);

	r = ncclAllGather(send, recv, 1000, ncclBfloat16, bad, stream);
	coll("ncclAllGather", r, send, recv, "sendcount", 1000, ncclBfloat16, "", bad, stream);
	r = ncclReduceScatter(send, recv, 333, ncclInt64, ncclMax, bad, stream);
	coll("ncclReduceScatter", r, send, recv, "recvcount", 333, ncclInt64, ",\"op\":2", bad,
	     stream);
	r = ncclBroadcast(send, recv, 77, ncclUint8, 1, bad, stream);
	coll("ncclBroadcast", r, send, recv, "count", 77, ncclUint8, ",\"root\":1", bad, stream);
	r = ncclReduce(send, recv, 5, ncclFloat64, ncclMin, 2, bad, stream);
	coll("ncclReduce", r, send, recv, "count", 5, ncclFloat64, ",\"op\":3,\"root\":2", bad,
	     stream);

	r = ncclBcast(recv, 99, ncclInt32, 3, bad, stream);
	coll("ncclBcast", r, NULL, recv, "count", 99, ncclInt32, ",\"root\":3", bad, stream);
	r = ncclAlltoAll(send, recv, 64, ncclFloat8e4m3, bad, stream);
	coll("ncclAlltoAll", r, send, recv, "count", 64, ncclFloat8e4m3, "", bad, stream);
	r = ncclGather(send, recv, 12, ncclUint32, 0, bad, stream);
	coll("ncclGather", r, send, recv, "count", 12, ncclUint32, ",\"root\":0", bad, stream);
	r = ncclScatter(send, recv, 13, ncclUint64, 1, bad, stream);
	coll("ncclScatter", r, send, recv, "count", 13, ncclUint64, ",\"root\":1", bad, stream);

	ncclComm_t split = NULL;
	r = ncclCommSplit(bad, 7, 2, &split, NULL);
	printf("{\"event\":\"ncclCommSplit\",\"ret\":%d,\"comm\":\"%#lx\",\"color\":7,"
	       "\"key\":2}\n", r, HEX(bad));
	int count = -1;
	r = ncclCommCount(bad, &count);
	printf("{\"event\":\"ncclCommCount\",\"ret\":%d,\"comm\":\"%#lx\"}\n", r, HEX(bad));

	r = ncclSend(send, 4096, ncclFloat16, 1, bad, stream);
	printf("{\"event\":\"ncclSend\",\"ret\":%d,\"sendbuff\":\"%#lx\",\"count\":4096,"
	       "\"datatype\":%d,\"peer\":1,\"comm\":\"%#lx\",\"stream\":\"%#lx\"}\n",
	       r, HEX(send), ncclFloat16, HEX(bad), HEX(stream));
	r = ncclRecv(recv, 4096, ncclFloat16, 0, bad, stream);
	printf("{\"event\":\"ncclRecv\",\"ret\":%d,\"recvbuff\":\"%#lx\",\"count\":4096,"
	       "\"datatype\":%d,\"peer\":0,\"comm\":\"%#lx\",\"stream\":\"%#lx\"}\n",
	       r, HEX(recv), ncclFloat16, HEX(bad), HEX(stream));
	return 0;
}
