/* api_tour: one call of each of the functions that NVIDIA's samples for graphs,
 * stream capture, stream-ordered pools, virtual memory, host registration,
 * callbacks, profiler ranges, symbol copies, 3D copies and stream priorities
 * make, through the runtime and the driver API. Each call prints
 * "CALL <api> <function> <return code>" so that a check can compare the calls
 * made with what a tracer saw: scripts/gpu/check-catalogue.sh against CUPTI
 * and `cudaprobe trace -e all` on the GPU, tests/integration/test_api_tour.py
 * on a machine without one (every call is still made; each fails).
 *
 * Build: nvcc -o api_tour benchmarks/api_tour.cu -lcuda
 * Usage: api_tour [ROUNDS]   (each round makes every call once)
 */
#include <cuda.h>
#include <cudaProfiler.h>
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RT(fn, ...) do { cudaError_t e_ = fn(__VA_ARGS__); \
	printf("CALL runtime %s %d\n", #fn, (int)e_); } while (0)
#define DRV(fn, ...) do { CUresult e_ = fn(__VA_ARGS__); \
	printf("CALL driver %s %d\n", #fn, (int)e_); } while (0)

__device__ float table[64];

__global__ void scale(float *x, float k, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		x[i] *= k * table[i % 64];
}

static void CUDART_CB on_stream(cudaStream_t, cudaError_t, void *) {}
static void CUDART_CB on_host(void *) {}

static void runtime_tour(void)
{
	int n = 1024, count = 0, value = 0, least = 0, greatest = 0;
	float host_table[64] = {0};
	float *dev = NULL, *pinned = NULL, *mapped_dev = NULL, *pooled = NULL, *async = NULL;
	void *mapped = NULL;
	static char registered[1 << 16];
	cudaStream_t stream = NULL, capture = NULL;
	cudaMemPool_t pool = NULL, own_pool = NULL;
	cudaGraph_t graph = NULL, built = NULL;
	cudaGraphExec_t exec = NULL;
	cudaGraphNode_t node = NULL;

	RT(cudaSetDeviceFlags, cudaDeviceMapHost);
	RT(cudaGetDeviceCount, &count);
	RT(cudaDeviceGetAttribute, &value, cudaDevAttrMultiProcessorCount, 0);
	RT(cudaDeviceGetStreamPriorityRange, &least, &greatest);
	RT(cudaStreamCreateWithPriority, &stream, cudaStreamNonBlocking, greatest);
	RT(cudaStreamCreateWithFlags, &capture, cudaStreamNonBlocking);
	RT(cudaMalloc, (void **)&dev, n * sizeof(float));
	RT(cudaMemcpyToSymbol, table, host_table, sizeof(host_table), 0, cudaMemcpyHostToDevice);

	/* 3D copy between two pitched allocations */
	cudaExtent extent = make_cudaExtent(64 * sizeof(float), 8, 4);
	cudaPitchedPtr a = {0}, b = {0};
	RT(cudaMalloc3D, &a, extent);
	RT(cudaMalloc3D, &b, extent);
	cudaMemcpy3DParms p;
	memset(&p, 0, sizeof(p));
	p.srcPtr = a;
	p.dstPtr = b;
	p.extent = extent;
	p.kind = cudaMemcpyDeviceToDevice;
	RT(cudaMemcpy3D, &p);

	/* zero-copy: registered and mapped host memory */
	RT(cudaHostRegister, registered, sizeof(registered), cudaHostRegisterMapped);
	RT(cudaHostGetDevicePointer, &mapped, registered, 0);
	RT(cudaHostAlloc, (void **)&pinned, n * sizeof(float), cudaHostAllocMapped);
	RT(cudaHostGetDevicePointer, (void **)&mapped_dev, pinned, 0);

	/* stream-ordered allocation: the default pool and one of our own */
	cuuint64_t threshold = ~0ULL;
	RT(cudaDeviceGetDefaultMemPool, &pool, 0);
	RT(cudaMemPoolSetAttribute, pool, cudaMemPoolAttrReleaseThreshold, &threshold);
	cudaMemPoolProps props;
	memset(&props, 0, sizeof(props));
	props.allocType = cudaMemAllocationTypePinned;
	props.location.type = cudaMemLocationTypeDevice;
	props.location.id = 0;
	RT(cudaMemPoolCreate, &own_pool, &props);
	RT(cudaMallocAsync, (void **)&async, n * sizeof(float), stream);
	RT(cudaMallocFromPoolAsync, (void **)&pooled, n * sizeof(float), own_pool, stream);
	RT(cudaFreeAsync, pooled, stream);
	RT(cudaFreeAsync, async, stream);

	/* callbacks */
	RT(cudaStreamAddCallback, stream, on_stream, NULL, 0);
	RT(cudaLaunchHostFunc, stream, on_host, NULL);

	/* a graph captured from a stream, and one built by hand */
	RT(cudaStreamBeginCapture, capture, cudaStreamCaptureModeGlobal);
	scale<<<(n + 255) / 256, 256, 0, capture>>>(dev, 2.0f, n);
	printf("CALL runtime cudaLaunchKernel -1\n");  /* the <<<>>> above: its code unread */
	RT(cudaStreamEndCapture, capture, &graph);
	RT(cudaGraphInstantiate, &exec, graph, 0);
	RT(cudaGraphLaunch, exec, stream);
	RT(cudaGraphCreate, &built, 0);
	void *args[] = {&dev, &value, &n};
	cudaKernelNodeParams kp;
	memset(&kp, 0, sizeof(kp));
	kp.func = (void *)scale;
	kp.gridDim = dim3((n + 255) / 256);
	kp.blockDim = dim3(256);
	kp.kernelParams = args;
	RT(cudaGraphAddKernelNode, &node, built, NULL, 0, &kp);

	/* profiler range, prefetch */
	RT(cudaProfilerStart);
	cudaMemLocation where = {cudaMemLocationTypeDevice, 0};
	RT(cudaMemPrefetchAsync, dev, n * sizeof(float), where, 0, stream);
	RT(cudaProfilerStop);

	RT(cudaStreamSynchronize, stream);
	RT(cudaGraphExecDestroy, exec);
	RT(cudaGraphDestroy, graph);
	RT(cudaGraphDestroy, built);
	RT(cudaMemPoolDestroy, own_pool);
	RT(cudaHostUnregister, registered);
	RT(cudaFreeHost, pinned);
	RT(cudaFree, a.ptr);
	RT(cudaFree, b.ptr);
	RT(cudaFree, dev);
	RT(cudaStreamDestroy, capture);
	RT(cudaStreamDestroy, stream);
	RT(cudaDeviceSynchronize);
}

static void driver_tour(void)
{
	CUdevice dev = 0;
	CUcontext ctx = NULL;
	CUstream stream = NULL;
	CUevent event = NULL;
	void *fn = NULL;
	CUdriverProcAddressQueryResult found;
	size_t granularity = 0;
	CUmemGenericAllocationHandle handle = 0;
	CUdeviceptr va = 0;

	DRV(cuInit, 0);
	DRV(cuDeviceGet, &dev, 0);
	DRV(cuCtxGetCurrent, &ctx);
	DRV(cuCtxSetCurrent, ctx);
	DRV(cuGetProcAddress, "cuMemAlloc", &fn, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &found);

	/* virtual memory management, as PyTorch's expandable segments use it */
	CUmemAllocationProp prop;
	memset(&prop, 0, sizeof(prop));
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = dev;
	DRV(cuMemGetAllocationGranularity, &granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
	size_t size = granularity ? granularity : (2 << 20);
	DRV(cuMemCreate, &handle, size, &prop, 0);
	DRV(cuMemAddressReserve, &va, size, 0, 0, 0);
	DRV(cuMemMap, va, size, 0, handle, 0);
	CUmemAccessDesc access;
	memset(&access, 0, sizeof(access));
	access.location = prop.location;
	access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	DRV(cuMemSetAccess, va, size, &access, 1);
	DRV(cuMemUnmap, va, size);
	DRV(cuMemAddressFree, va, size);
	DRV(cuMemRelease, handle);

	DRV(cuStreamCreateWithPriority, &stream, CU_STREAM_NON_BLOCKING, 0);
	DRV(cuEventCreate, &event, CU_EVENT_DEFAULT);
	DRV(cuEventRecord, event, stream);
	DRV(cuEventQuery, event);
	DRV(cuProfilerStart);
	DRV(cuProfilerStop);
	DRV(cuEventDestroy, event);
	DRV(cuStreamDestroy, stream);
}

int main(int argc, char **argv)
{
	int rounds = argc > 1 ? atoi(argv[1]) : 1;
	setvbuf(stdout, NULL, _IOLBF, 0);
	for (int i = 0; i < rounds; i++) {
		runtime_tour();
		driver_tour();
	}
	return 0;
}
