/* Virtual memory, pools and registered host memory, for `cudaprobe memory`
 * tests: on the memstub libraries (LD_LIBRARY_PATH=tests/workloads/bin/memstub),
 * where every call succeeds, on the real libraries, where every call fails
 * without a GPU, and on a GPU (scripts/gpu/check-memory-vmm.sh), where all but
 * the 1 PiB allocation succeed. Sizes are multiples of 2 MiB, the usual VMM
 * granularity. What it does:
 * - an expandable segment as PyTorch grows one: one reservation, 2 MiB chunks
 *   made, mapped after the last one and given access; then shrunk by one
 *   cuMemUnmap and a release of each of the last two chunks;
 * - as NVIDIA's samples do: a 4 MiB chunk released right after it is mapped,
 *   freed by its unmap later;
 * - left at exit: chunk 0 (not released, mapped), chunk 1 (released, still
 *   mapped), a 2 MiB chunk never mapped nor released;
 * - a cuMemCreate that fails (1 PiB);
 * - pool allocations at both layers, the runtime's freed, the driver's left;
 * - host memory registered at both layers, the runtime's unregistered.
 * Prints a JSON line per call ({"call", "ret"}, and for allocations "ptr",
 * "size", "kind"), then one per allocation it leaves at exit ({"leak": kind,
 * ...}: what is left where every call but the 1 PiB one succeeds).
 * Usage: memory_vmm [LINGER_MS]
 */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define CHUNK ((size_t)2 << 20)

static int done(const char *call, int ret)
{
	printf("{\"call\":\"%s\",\"ret\":%d}\n", call, ret);
	return ret;
}

static int made(const char *call, int ret, const char *kind, unsigned long long ptr, size_t size)
{
	printf("{\"call\":\"%s\",\"ret\":%d,\"kind\":\"%s\",\"ptr\":\"%#llx\",\"size\":%zu}\n",
	       call, ret, kind, ptr, size);
	return ret;
}

static void leak(const char *kind, unsigned long long ptr, size_t size, const char *outstanding)
{
	printf("{\"leak\":\"%s\",\"ptr\":\"%#llx\",\"size\":%zu,\"outstanding\":\"%s\"}\n", kind,
	       ptr, size, outstanding);
}

static CUmemGenericAllocationHandle create(size_t size)
{
	CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
				    .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
	CUmemGenericAllocationHandle h = 0;
	int r = cuMemCreate(&h, size, &prop, 0);
	made("cuMemCreate", r, "vmm", h, size);
	return h;
}

static void map(CUdeviceptr va, size_t size, CUmemGenericAllocationHandle h)
{
	CUmemAccessDesc access = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0},
				  .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
	done("cuMemMap", cuMemMap(va, size, 0, h, 0));
	done("cuMemSetAccess", cuMemSetAccess(va, size, &access, 1));
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	CUdeviceptr va = 0;
	CUmemGenericAllocationHandle chunk[4], sample, lone;
	CUcontext ctx = NULL;
	cudaMemPool_t pool = NULL;
	/* the primary context, as the runtime uses it; the device's default pool */
	done("cuInit", cuInit(0));
	done("cuDevicePrimaryCtxRetain", cuDevicePrimaryCtxRetain(&ctx, 0));
	done("cuCtxSetCurrent", cuCtxSetCurrent(ctx));
	done("cudaDeviceGetDefaultMemPool", cudaDeviceGetDefaultMemPool(&pool, 0));
	done("cuMemAddressReserve", cuMemAddressReserve(&va, 8 * CHUNK, 0, 0, 0));
	for (int i = 0; i < 4; i++) {
		chunk[i] = create(CHUNK);
		map(va + i * CHUNK, CHUNK, chunk[i]);
	}
	for (int i = 3; i >= 2; i--) {
		done("cuMemUnmap", cuMemUnmap(va + i * CHUNK, CHUNK));
		done("cuMemRelease", cuMemRelease(chunk[i]));
	}
	sample = create(2 * CHUNK);
	map(va + 4 * CHUNK, 2 * CHUNK, sample);
	done("cuMemRelease", cuMemRelease(sample));
	done("cuMemRelease", cuMemRelease(chunk[1]));
	lone = create(CHUNK);
	create((size_t)1 << 50);
	done("cuMemUnmap", cuMemUnmap(va + 4 * CHUNK, 2 * CHUNK));

	void *p = NULL;
	CUdeviceptr d = 0;
	/* each call before its made(): arguments are evaluated in no set order */
	int r = cudaMallocFromPoolAsync(&p, 64 << 10, pool, 0);
	made("cudaMallocFromPoolAsync", r, "async-pool", (unsigned long long)p, 64 << 10);
	done("cudaFreeAsync", cudaFreeAsync(p, 0));
	r = cuMemAllocFromPoolAsync(&d, 128 << 10, (CUmemoryPool)pool, 0);
	made("cuMemAllocFromPoolAsync", r, "async-pool", d, 128 << 10);

	static char pages[2][1 << 20] __attribute__((aligned(4096)));
	r = cudaHostRegister(pages[0], sizeof(pages[0]), 0);
	made("cudaHostRegister", r, "host-registered", (unsigned long long)pages[0],
	     sizeof(pages[0]));
	done("cudaHostUnregister", cudaHostUnregister(pages[0]));
	r = cuMemHostRegister(pages[1], 256 << 10, 0);
	made("cuMemHostRegister_v2", r, "host-registered", (unsigned long long)pages[1], 256 << 10);

	leak("vmm", chunk[0], CHUNK, "not released, mapped at 1 address");
	leak("vmm", chunk[1], CHUNK, "mapped at 1 address");
	leak("vmm", lone, CHUNK, "not released");
	leak("async-pool", d, 128 << 10, "");
	leak("host-registered", (unsigned long long)pages[1], 256 << 10, "");
	if (argc > 1)
		usleep(atoi(argv[1]) * 1000);
	return 0;
}
