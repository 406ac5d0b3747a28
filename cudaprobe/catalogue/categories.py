"""Each function's category, and whether it is in the default set: by name.

The rules are tried in order; the first whose words the name contains
gives the category. overrides.CATEGORIES holds the names the rules get wrong.
docs/events.md lists the categories and the default set.
"""

from __future__ import annotations

# (category, words any of which in the name selects it), first match wins
RULES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("profiler", ("Profiler",)),
    ("callback", ("Callback", "HostFunc")),
    ("capture", ("Capture",)),
    ("kernel", ("GraphLaunch", "Launch")),
    ("graph", ("Graph", "UserObject")),
    ("ipc", ("Ipc",)),
    ("pool", ("MemPool", "FromPool")),
    ("vmm", ("cuMemCreate", "cuMemRelease", "cuMemMap", "cuMemUnmap", "cuMemAddress",
             "cuMemSetAccess", "cuMemGetAccess", "ShareableHandle", "AllocationGranularity",
             "AllocationPropertiesFromHandle", "RetainAllocationHandle", "Multicast")),
    ("occupancy", ("Occupancy",)),
    ("interop", ("External", "Graphics", "GL", "EGL", "VDPAU", "NvSci")),
    ("transfer", ("Memcpy",)),
    ("texture", ("Texture", "Surface", "TexRef", "SurfRef", "TexObject", "SurfObject",
                 "ChannelDesc", "Mipmapped", "Array")),
    ("peer", ("Peer", "P2P")),
    ("attribute", ("Attribute",)),
    ("sync", ("Synchronize",)),
    ("memory", ("Mem", "Malloc", "Free", "HostAlloc", "HostRegister", "HostUnregister",
                "HostGetDevicePointer", "HostGetFlags")),
    ("stream", ("Stream",)),
    ("event", ("Event",)),
    ("module", ("Module", "Library", "Kernel", "Link", "ProcAddress", "DriverEntryPoint",
                "ExportTable", "FuncGet", "FuncSet", "Func")),
    ("context", ("Ctx", "Context")),
    ("device", ("Device", "Driver", "Init", "Error", "Runtime", "Thread", "Version")),
)

# Hot getters: frameworks call them hundreds of times a step (PyTorch's
# launch-bound MLP step: ~700 cudaGetDevice; a 3 s matmul/softmax loop: 285,846
# cudaGetDevice of 355,213 calls, docs/gpu-results/), each paying the uprobe
# trap pair for a call that says nothing new. Left out of the default set;
# `-e all`, their category or their name selects them (docs/events.md).
HOT = frozenset({"cudaGetDevice", "cudaGetLastError", "cudaPeekAtLastError",
                 "cudaStreamIsCapturing", "cuCtxGetCurrent"})

# The default set before the catalogue was generated : kept whole.
CURATED = frozenset("""
cudaMalloc cudaFree cudaMallocHost cudaFreeHost cudaHostAlloc cudaMallocManaged cudaMallocAsync
cudaFreeAsync cudaMallocPitch cudaMemset cudaMemsetAsync cudaMemGetInfo cudaMemcpy
cudaMemcpyAsync cudaMemcpy2D cudaMemcpy2DAsync cudaMemcpyPeer cudaMemcpyPeerAsync
cudaLaunchKernel cudaLaunchKernelExC cudaLaunchCooperativeKernel cudaGraphLaunch
cudaStreamCreate cudaStreamCreateWithFlags cudaStreamCreateWithPriority cudaStreamDestroy
cudaStreamWaitEvent cudaStreamQuery cudaEventCreate cudaEventCreateWithFlags cudaEventRecord
cudaEventQuery cudaEventElapsedTime cudaEventDestroy cudaSetDevice cudaGetDeviceCount
cudaGetDeviceProperties cudaDeviceReset cudaStreamSynchronize cudaEventSynchronize
cudaDeviceSynchronize
cuInit cuDriverGetVersion cuDeviceGet cuDeviceGetCount cuCtxCreate cuCtxDestroy cuCtxSetCurrent
cuDevicePrimaryCtxRetain cuDevicePrimaryCtxRelease cuMemAlloc cuMemFree cuMemAllocHost
cuMemFreeHost cuMemHostAlloc cuMemAllocManaged cuMemAllocPitch cuMemAllocAsync cuMemFreeAsync
cuMemsetD8 cuMemsetD16 cuMemsetD32 cuMemsetD8Async cuMemsetD16Async cuMemsetD32Async cuMemcpy
cuMemcpyAsync cuMemcpyHtoD cuMemcpyDtoH cuMemcpyDtoD cuMemcpyHtoDAsync cuMemcpyDtoHAsync
cuMemcpyDtoDAsync cuLaunchKernel cuLaunchKernelEx cuLaunchCooperativeKernel cuGraphLaunch
cuModuleLoad cuModuleLoadData cuModuleLoadDataEx cuModuleUnload cuModuleGetFunction
cuLibraryLoadData cuLibraryGetKernel cuKernelGetFunction cuStreamCreate cuStreamDestroy
cuStreamWaitEvent cuEventCreate cuEventRecord cuEventDestroy cuCtxSynchronize
cuStreamSynchronize cuEventSynchronize
""".split())

# Categories whose calls are few and each says something (a graph built, memory
# mapped, a pool made, a callback queued): in the default set, but for getters.
DEFAULT_CATEGORIES = frozenset({"memory", "transfer", "kernel", "stream", "event", "sync",
                                "context", "module", "graph", "capture", "vmm", "pool", "ipc",
                                "peer", "callback", "profiler", "collective", "p2p", "group",
                                "comm"})
# Getters and queries: per launch in some frameworks (cudaStreamGetCaptureInfo,
# cudaFuncGetAttributes, cuPointerGetAttribute), and saying nothing new
GETTER_WORDS = ("Get", "Query", "Is")


# NCCL's functions (nccl*): its own categories, tried before RULES
NCCL_RULES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("group", ("Group",)),
    ("p2p", ("Send", "Recv")),
    ("collective", ("Reduce", "Bcast", "Broadcast", "Gather", "Scatter", "AlltoAll")),
)
NCCL_OTHER = "comm"  # communicators, and what is neither a collective nor a transfer


def category_of(name: str) -> str:
    if name.startswith("nccl"):
        return next((c for c, words in NCCL_RULES if any(w in name for w in words)),
                    NCCL_OTHER)
    for category, words in RULES:
        if any(w in name for w in words):
            return category
    return "other"


def is_getter(name: str) -> bool:
    return any(w in name for w in GETTER_WORDS)


def is_default(name: str, category: str) -> bool:
    """Whether trace, stats and serve probe the function without -e."""
    if name in HOT:
        return False
    return name in CURATED or (category in DEFAULT_CATEGORIES and not is_getter(name))
