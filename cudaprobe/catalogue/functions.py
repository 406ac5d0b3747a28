"""The catalogue: every traced CUDA function, as data.

This is the single source of truth. The BPF probe table, the decoders, the
bpftrace exporter, `cudaprobe list` and the docs are all derived from it.

A function is reported under the symbol it is probed at: the versioned symbol
that the headers' #define selects (cuMemAlloc -> cuMemAlloc_v2), or a
per-thread-stream variant of it (cuMemcpyHtoD_v2_ptds).

Each argument has a *kind* that says how it is captured and decoded. Argument
*slots* are the x86-64 System V integer argument words: slots 0-5 are the
registers rdi, rsi, rdx, rcx, r8, r9; slot 6 onwards are read from the stack
at entry. A `dim3` passed by value takes two slots (x|y packed in one, z in
the next). Out-parameters are pointers whose target is read at function exit.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

REGISTER_SLOTS = 6
MAX_SLOTS = 12
MAX_OUTS = 4

RUNTIME = "runtime"
DRIVER = "driver"

CATEGORIES = ("memory", "transfer", "kernel", "stream", "event", "device", "sync", "context",
              "module")


class ArgKind(enum.Enum):
    """How an argument is captured (entry/exit) and decoded."""

    PTR = "ptr"  # any pointer, shown in hex
    SIZE = "size"  # size_t byte count
    COUNT = "count"  # size_t element count / dimension
    INT = "int"  # int
    UINT = "uint"  # unsigned int
    UINT8 = "uint8"  # unsigned char (cuMemsetD8's value)
    UINT16 = "uint16"  # unsigned short (cuMemsetD16's value)
    SIZE32 = "size32"  # unsigned int byte count (the driver's sharedMemBytes)
    FLAGS = "flags"  # unsigned int bit flags, shown in hex
    MEMCPY_KIND = "memcpy_kind"  # enum cudaMemcpyKind
    DIM3 = "dim3"  # dim3 by value: two slots
    # one unsigned int of a grid/block shape (driver launches pass x, y, z
    # separately); `<stem>X`, `<stem>Y`, `<stem>Z` are decoded together as `<stem>`
    DIM = "dim"
    STREAM = "stream"  # cudaStream_t / CUstream handle
    EVENT = "event"  # cudaEvent_t / CUevent handle
    HANDLE = "handle"  # other opaque handle (graph exec, ...)
    FUNC = "func"  # kernel host stub address
    CU_FUNCTION = "cu_function"  # CUfunction / CUkernel handle, named where its making was seen
    CSTRING = "cstring"  # const char *, copied at entry (a kernel or file name)
    LAUNCH_CONFIG = "launch_config"  # const cudaLaunchConfig_t *, read at entry
    CU_LAUNCH_CONFIG = "cu_launch_config"  # const CUlaunchConfig *, read at entry
    OUT_PTR = "out_ptr"  # void ** or CUdeviceptr * (8 bytes) written by the call
    OUT_HANDLE = "out_handle"  # cudaStream_t * / cudaEvent_t * written by the call
    # CUfunction * / CUkernel * written by the call, named by the call's CSTRING
    # or CU_FUNCTION argument (see handles.py)
    OUT_FUNCTION = "out_function"
    OUT_SIZE = "out_size"  # size_t * written by the call
    OUT_INT = "out_int"  # int * written by the call
    OUT_FLOAT = "out_float"  # float * written by the call


OUT_KINDS = {
    ArgKind.OUT_PTR,
    ArgKind.OUT_HANDLE,
    ArgKind.OUT_FUNCTION,
    ArgKind.OUT_SIZE,
    ArgKind.OUT_INT,
    ArgKind.OUT_FLOAT,
}
# out-parameters whose target is 4 bytes wide (the rest are 8)
OUT4_KINDS = {ArgKind.OUT_INT, ArgKind.OUT_FLOAT}
# pointers to a launch configuration struct, copied (CFG_WORDS words) at entry
CONFIG_KINDS = {ArgKind.LAUNCH_CONFIG, ArgKind.CU_LAUNCH_CONFIG}


@dataclass(frozen=True)
class Arg:
    name: str  # parameter name as in the CUDA headers
    kind: ArgKind

    @property
    def words(self) -> int:
        return 2 if self.kind is ArgKind.DIM3 else 1

    @property
    def is_out(self) -> bool:
        return self.kind in OUT_KINDS


@dataclass(frozen=True)
class Function:
    name: str  # base symbol, as declared in the headers
    api: str  # RUNTIME or DRIVER
    category: str
    args: tuple[Arg, ...]
    # Per-thread-stream variants (suffixes of `symbol`), probed where the
    # library exports them and skipped quietly where it does not.
    variants: tuple[str, ...] = ()
    # ABI version suffix that the headers' #define maps `name` to (cuMemAlloc
    # -> cuMemAlloc_v2). The versioned symbol is the one probed and reported:
    # the unversioned one is the legacy ABI, with a different signature.
    version: str = ""
    slots: tuple[int, ...] = field(init=False, repr=False)
    out_index: dict[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        slots, out_index, nxt = [], {}, 0
        for arg in self.args:
            if arg.words == 2 and nxt < REGISTER_SLOTS < nxt + 2:
                raise ValueError(f"{self.name}: {arg.name} straddles registers and stack")
            slots.append(nxt)
            nxt += arg.words
            if arg.is_out:
                out_index[arg.name] = len(out_index)
        if nxt > MAX_SLOTS:
            raise ValueError(f"{self.name}: {nxt} argument words > {MAX_SLOTS}")
        if len(out_index) > MAX_OUTS:
            raise ValueError(f"{self.name}: more than {MAX_OUTS} out-parameters")
        # the BPF event has one buffer for what is copied at entry, and one func_name
        copied = [a for a in self.args if a.kind in CONFIG_KINDS or a.kind is ArgKind.CSTRING]
        if len(copied) > 1:
            raise ValueError(f"{self.name}: more than one argument copied at entry")
        if sum(a.kind in (ArgKind.FUNC, ArgKind.CU_FUNCTION) for a in self.args) > 1:
            raise ValueError(f"{self.name}: more than one kernel argument")
        object.__setattr__(self, "slots", tuple(slots))
        object.__setattr__(self, "out_index", out_index)

    @property
    def words(self) -> int:
        return sum(a.words for a in self.args)

    @property
    def stack_words(self) -> int:
        """Argument words passed on the stack (read at entry from sp+8)."""
        return max(0, self.words - REGISTER_SLOTS)

    @property
    def symbol(self) -> str:
        """The exported symbol that `name` resolves to in the headers."""
        return self.name + self.version

    @property
    def symbols(self) -> tuple[str, ...]:
        return (self.symbol, *(self.symbol + v for v in self.variants))

    def out_mask(self, width: int) -> int:
        """Bitmask of slots that are out-pointers to `width`-byte values."""
        mask = 0
        for arg, slot in zip(self.args, self.slots):
            if arg.is_out and (4 if arg.kind in OUT4_KINDS else 8) == width:
                mask |= 1 << slot
        return mask

    @property
    def config_slot(self) -> int:
        """Slot of a launch-config pointer read at entry, or -1."""
        for arg, slot in zip(self.args, self.slots):
            if arg.kind in CONFIG_KINDS:
                return slot
        return -1

    @property
    def string_slot(self) -> int:
        """Slot of a C string copied at entry, or -1."""
        for arg, slot in zip(self.args, self.slots):
            if arg.kind is ArgKind.CSTRING:
                return slot
        return -1


def _args(*pairs: tuple[str, ArgKind]) -> tuple[Arg, ...]:
    return tuple(Arg(name, kind) for name, kind in pairs)


K = ArgKind
PTSZ = ("_ptsz",)
PTDS = ("_ptds",)


def _rt(name: str, category: str, *args: tuple[str, ArgKind],
        variants: tuple[str, ...] = ()) -> Function:
    return Function(name, RUNTIME, category, _args(*args), variants)


RUNTIME_FUNCTIONS: tuple[Function, ...] = (
    # memory
    _rt("cudaMalloc", "memory", ("devPtr", K.OUT_PTR), ("size", K.SIZE)),
    _rt("cudaFree", "memory", ("devPtr", K.PTR)),
    _rt("cudaMallocHost", "memory", ("ptr", K.OUT_PTR), ("size", K.SIZE)),
    _rt("cudaFreeHost", "memory", ("ptr", K.PTR)),
    _rt("cudaHostAlloc", "memory", ("pHost", K.OUT_PTR), ("size", K.SIZE), ("flags", K.FLAGS)),
    _rt("cudaMallocManaged", "memory", ("devPtr", K.OUT_PTR), ("size", K.SIZE), ("flags", K.FLAGS)),
    _rt("cudaMallocAsync", "memory", ("devPtr", K.OUT_PTR), ("size", K.SIZE), ("hStream", K.STREAM),
        variants=PTSZ),
    _rt("cudaFreeAsync", "memory", ("devPtr", K.PTR), ("hStream", K.STREAM), variants=PTSZ),
    _rt("cudaMallocPitch", "memory", ("devPtr", K.OUT_PTR), ("pitch", K.OUT_SIZE),
        ("width", K.SIZE), ("height", K.COUNT)),
    _rt("cudaMemset", "memory", ("devPtr", K.PTR), ("value", K.INT), ("count", K.SIZE),
        variants=PTDS),
    _rt("cudaMemsetAsync", "memory", ("devPtr", K.PTR), ("value", K.INT), ("count", K.SIZE),
        ("stream", K.STREAM), variants=PTSZ),
    _rt("cudaMemGetInfo", "memory", ("free", K.OUT_SIZE), ("total", K.OUT_SIZE)),
    # memory accounting (issue 17 item 4): pools and host registration. Names and
    # parameter names as cuda_runtime_api.h declares them; memtrack.ROLES reads
    # the arguments by these names
    _rt("cudaMallocFromPoolAsync", "memory", ("ptr", K.OUT_PTR), ("size", K.SIZE),
        ("memPool", K.HANDLE), ("stream", K.STREAM), variants=PTSZ),
    _rt("cudaHostRegister", "memory", ("ptr", K.PTR), ("size", K.SIZE), ("flags", K.FLAGS)),
    _rt("cudaHostUnregister", "memory", ("ptr", K.PTR)),
    # end of the issue 17 item 4 block
    # transfer
    _rt("cudaMemcpy", "transfer", ("dst", K.PTR), ("src", K.PTR), ("count", K.SIZE),
        ("kind", K.MEMCPY_KIND), variants=PTDS),
    _rt("cudaMemcpyAsync", "transfer", ("dst", K.PTR), ("src", K.PTR), ("count", K.SIZE),
        ("kind", K.MEMCPY_KIND), ("stream", K.STREAM), variants=PTSZ),
    _rt("cudaMemcpy2D", "transfer", ("dst", K.PTR), ("dpitch", K.SIZE), ("src", K.PTR),
        ("spitch", K.SIZE), ("width", K.SIZE), ("height", K.COUNT), ("kind", K.MEMCPY_KIND),
        variants=PTDS),
    _rt("cudaMemcpy2DAsync", "transfer", ("dst", K.PTR), ("dpitch", K.SIZE), ("src", K.PTR),
        ("spitch", K.SIZE), ("width", K.SIZE), ("height", K.COUNT), ("kind", K.MEMCPY_KIND),
        ("stream", K.STREAM), variants=PTSZ),
    _rt("cudaMemcpyPeer", "transfer", ("dst", K.PTR), ("dstDevice", K.INT), ("src", K.PTR),
        ("srcDevice", K.INT), ("count", K.SIZE)),
    _rt("cudaMemcpyPeerAsync", "transfer", ("dst", K.PTR), ("dstDevice", K.INT), ("src", K.PTR),
        ("srcDevice", K.INT), ("count", K.SIZE), ("stream", K.STREAM)),
    # kernel
    _rt("cudaLaunchKernel", "kernel", ("func", K.FUNC), ("gridDim", K.DIM3), ("blockDim", K.DIM3),
        ("args", K.PTR), ("sharedMem", K.SIZE), ("stream", K.STREAM), variants=PTSZ),
    _rt("cudaLaunchKernelExC", "kernel", ("config", K.LAUNCH_CONFIG), ("func", K.FUNC),
        ("args", K.PTR), variants=PTSZ),
    _rt("cudaLaunchCooperativeKernel", "kernel", ("func", K.FUNC), ("gridDim", K.DIM3),
        ("blockDim", K.DIM3), ("args", K.PTR), ("sharedMem", K.SIZE), ("stream", K.STREAM),
        variants=PTSZ),
    _rt("cudaGraphLaunch", "kernel", ("graphExec", K.HANDLE), ("stream", K.STREAM), variants=PTSZ),
    # stream
    _rt("cudaStreamCreate", "stream", ("pStream", K.OUT_HANDLE)),
    _rt("cudaStreamCreateWithFlags", "stream", ("pStream", K.OUT_HANDLE), ("flags", K.FLAGS)),
    _rt("cudaStreamCreateWithPriority", "stream", ("pStream", K.OUT_HANDLE), ("flags", K.FLAGS),
        ("priority", K.INT)),
    _rt("cudaStreamDestroy", "stream", ("stream", K.STREAM)),
    _rt("cudaStreamWaitEvent", "stream", ("stream", K.STREAM), ("event", K.EVENT),
        ("flags", K.FLAGS), variants=PTSZ),
    _rt("cudaStreamQuery", "stream", ("stream", K.STREAM), variants=PTSZ),
    _rt("cudaStreamIsCapturing", "stream", ("stream", K.STREAM), ("pCaptureStatus", K.OUT_INT),
        variants=PTSZ),
    # event
    _rt("cudaEventCreate", "event", ("event", K.OUT_HANDLE)),
    _rt("cudaEventCreateWithFlags", "event", ("event", K.OUT_HANDLE), ("flags", K.FLAGS)),
    _rt("cudaEventRecord", "event", ("event", K.EVENT), ("stream", K.STREAM), variants=PTSZ),
    _rt("cudaEventQuery", "event", ("event", K.EVENT)),
    _rt("cudaEventElapsedTime", "event", ("ms", K.OUT_FLOAT), ("start", K.EVENT), ("end", K.EVENT)),
    _rt("cudaEventDestroy", "event", ("event", K.EVENT)),
    # device
    _rt("cudaGetDevice", "device", ("device", K.OUT_INT)),
    _rt("cudaSetDevice", "device", ("device", K.INT)),
    _rt("cudaGetDeviceCount", "device", ("count", K.OUT_INT)),
    _rt("cudaGetDeviceProperties", "device", ("prop", K.PTR), ("device", K.INT)),
    _rt("cudaDeviceReset", "device"),
    _rt("cudaGetLastError", "device"),
    _rt("cudaPeekAtLastError", "device"),
    # sync
    _rt("cudaStreamSynchronize", "sync", ("stream", K.STREAM), variants=PTSZ),
    _rt("cudaEventSynchronize", "sync", ("event", K.EVENT)),
    _rt("cudaDeviceSynchronize", "sync"),
)



def _drv(name: str, category: str, *args: tuple[str, ArgKind], version: str = "",
         variants: tuple[str, ...] = ()) -> Function:
    return Function(name, DRIVER, category, _args(*args), variants, version)


V2 = "_v2"
# driver launches: CUfunction, then grid and block as three unsigned ints each
_GRID_BLOCK = (("gridDimX", K.DIM), ("gridDimY", K.DIM), ("gridDimZ", K.DIM),
               ("blockDimX", K.DIM), ("blockDimY", K.DIM), ("blockDimZ", K.DIM))

# Versions are what CUDA 13's cuda.h #defines each name to, and what libcuda
# exports (checked against the 535 driver by tests/unit/test_catalogue_headers.py).
DRIVER_FUNCTIONS: tuple[Function, ...] = (
    # device
    _drv("cuInit", "device", ("Flags", K.FLAGS)),
    _drv("cuDriverGetVersion", "device", ("driverVersion", K.OUT_INT)),
    _drv("cuDeviceGet", "device", ("device", K.OUT_INT), ("ordinal", K.INT)),
    _drv("cuDeviceGetCount", "device", ("count", K.OUT_INT)),
    # context: CUDA <= 12 headers call cuCtxCreate_v2, CUDA 13 headers cuCtxCreate_v4
    _drv("cuCtxCreate", "context", ("pctx", K.OUT_HANDLE), ("flags", K.FLAGS), ("dev", K.INT),
         version=V2),
    _drv("cuCtxCreate", "context", ("pctx", K.OUT_HANDLE), ("ctxCreateParams", K.PTR),
         ("flags", K.FLAGS), ("dev", K.INT), version="_v4"),
    _drv("cuCtxDestroy", "context", ("ctx", K.HANDLE), version=V2),
    _drv("cuCtxGetCurrent", "context", ("pctx", K.OUT_HANDLE)),
    _drv("cuCtxSetCurrent", "context", ("ctx", K.HANDLE)),
    _drv("cuDevicePrimaryCtxRetain", "context", ("pctx", K.OUT_HANDLE), ("dev", K.INT)),
    _drv("cuDevicePrimaryCtxRelease", "context", ("dev", K.INT), version=V2),
    # memory
    _drv("cuMemAlloc", "memory", ("dptr", K.OUT_PTR), ("bytesize", K.SIZE), version=V2),
    _drv("cuMemFree", "memory", ("dptr", K.PTR), version=V2),
    _drv("cuMemAllocHost", "memory", ("pp", K.OUT_PTR), ("bytesize", K.SIZE), version=V2),
    _drv("cuMemFreeHost", "memory", ("p", K.PTR)),
    _drv("cuMemHostAlloc", "memory", ("pp", K.OUT_PTR), ("bytesize", K.SIZE), ("Flags", K.FLAGS)),
    _drv("cuMemAllocManaged", "memory", ("dptr", K.OUT_PTR), ("bytesize", K.SIZE),
         ("flags", K.FLAGS)),
    _drv("cuMemAllocPitch", "memory", ("dptr", K.OUT_PTR), ("pPitch", K.OUT_SIZE),
         ("WidthInBytes", K.SIZE), ("Height", K.COUNT), ("ElementSizeBytes", K.UINT), version=V2),
    _drv("cuMemAllocAsync", "memory", ("dptr", K.OUT_PTR), ("bytesize", K.SIZE),
         ("hStream", K.STREAM), variants=PTSZ),
    _drv("cuMemFreeAsync", "memory", ("dptr", K.PTR), ("hStream", K.STREAM), variants=PTSZ),
    # memory accounting (issue 17 item 4): virtual memory (cuMemCreate makes
    # physical memory, cuMemMap maps it at an address cuMemAddressReserve
    # reserved), pools and host registration. Names, parameter names and the
    # versions cuda.h #defines (cuMemHostRegister -> _v2); memtrack.ROLES reads
    # the arguments by these names
    _drv("cuMemCreate", "memory", ("handle", K.OUT_HANDLE), ("size", K.SIZE), ("prop", K.PTR),
         ("flags", K.FLAGS)),
    _drv("cuMemRelease", "memory", ("handle", K.HANDLE)),
    _drv("cuMemMap", "memory", ("ptr", K.PTR), ("size", K.SIZE), ("offset", K.SIZE),
         ("handle", K.HANDLE), ("flags", K.FLAGS)),
    _drv("cuMemUnmap", "memory", ("ptr", K.PTR), ("size", K.SIZE)),
    _drv("cuMemAddressReserve", "memory", ("ptr", K.OUT_PTR), ("size", K.SIZE),
         ("alignment", K.SIZE), ("addr", K.PTR), ("flags", K.FLAGS)),
    _drv("cuMemAddressFree", "memory", ("ptr", K.PTR), ("size", K.SIZE)),
    _drv("cuMemSetAccess", "memory", ("ptr", K.PTR), ("size", K.SIZE), ("desc", K.PTR),
         ("count", K.COUNT)),
    _drv("cuMemAllocFromPoolAsync", "memory", ("dptr", K.OUT_PTR), ("bytesize", K.SIZE),
         ("pool", K.HANDLE), ("hStream", K.STREAM), variants=PTSZ),
    _drv("cuMemHostRegister", "memory", ("p", K.PTR), ("bytesize", K.SIZE), ("Flags", K.FLAGS),
         version=V2),
    _drv("cuMemHostUnregister", "memory", ("p", K.PTR)),
    # end of the issue 17 item 4 block
    _drv("cuMemsetD8", "memory", ("dstDevice", K.PTR), ("uc", K.UINT8), ("N", K.COUNT),
         version=V2, variants=PTDS),
    _drv("cuMemsetD16", "memory", ("dstDevice", K.PTR), ("us", K.UINT16), ("N", K.COUNT),
         version=V2, variants=PTDS),
    _drv("cuMemsetD32", "memory", ("dstDevice", K.PTR), ("ui", K.UINT), ("N", K.COUNT),
         version=V2, variants=PTDS),
    _drv("cuMemsetD8Async", "memory", ("dstDevice", K.PTR), ("uc", K.UINT8), ("N", K.COUNT),
         ("hStream", K.STREAM), variants=PTSZ),
    _drv("cuMemsetD16Async", "memory", ("dstDevice", K.PTR), ("us", K.UINT16), ("N", K.COUNT),
         ("hStream", K.STREAM), variants=PTSZ),
    _drv("cuMemsetD32Async", "memory", ("dstDevice", K.PTR), ("ui", K.UINT), ("N", K.COUNT),
         ("hStream", K.STREAM), variants=PTSZ),
    # transfer
    _drv("cuMemcpy", "transfer", ("dst", K.PTR), ("src", K.PTR), ("ByteCount", K.SIZE),
         variants=PTDS),
    _drv("cuMemcpyAsync", "transfer", ("dst", K.PTR), ("src", K.PTR), ("ByteCount", K.SIZE),
         ("hStream", K.STREAM), variants=PTSZ),
    _drv("cuMemcpyHtoD", "transfer", ("dstDevice", K.PTR), ("srcHost", K.PTR),
         ("ByteCount", K.SIZE), version=V2, variants=PTDS),
    _drv("cuMemcpyDtoH", "transfer", ("dstHost", K.PTR), ("srcDevice", K.PTR),
         ("ByteCount", K.SIZE), version=V2, variants=PTDS),
    _drv("cuMemcpyDtoD", "transfer", ("dstDevice", K.PTR), ("srcDevice", K.PTR),
         ("ByteCount", K.SIZE), version=V2, variants=PTDS),
    _drv("cuMemcpyHtoDAsync", "transfer", ("dstDevice", K.PTR), ("srcHost", K.PTR),
         ("ByteCount", K.SIZE), ("hStream", K.STREAM), version=V2, variants=PTSZ),
    _drv("cuMemcpyDtoHAsync", "transfer", ("dstHost", K.PTR), ("srcDevice", K.PTR),
         ("ByteCount", K.SIZE), ("hStream", K.STREAM), version=V2, variants=PTSZ),
    _drv("cuMemcpyDtoDAsync", "transfer", ("dstDevice", K.PTR), ("srcDevice", K.PTR),
         ("ByteCount", K.SIZE), ("hStream", K.STREAM), version=V2, variants=PTSZ),
    # kernel: 11 argument words, blockDimZ onwards on the stack
    _drv("cuLaunchKernel", "kernel", ("f", K.CU_FUNCTION), *_GRID_BLOCK,
         ("sharedMemBytes", K.SIZE32), ("hStream", K.STREAM), ("kernelParams", K.PTR),
         ("extra", K.PTR), variants=PTSZ),
    _drv("cuLaunchKernelEx", "kernel", ("config", K.CU_LAUNCH_CONFIG), ("f", K.CU_FUNCTION),
         ("kernelParams", K.PTR), ("extra", K.PTR), variants=PTSZ),
    _drv("cuLaunchCooperativeKernel", "kernel", ("f", K.CU_FUNCTION), *_GRID_BLOCK,
         ("sharedMemBytes", K.SIZE32), ("hStream", K.STREAM), ("kernelParams", K.PTR),
         variants=PTSZ),
    _drv("cuGraphLaunch", "kernel", ("hGraphExec", K.HANDLE), ("hStream", K.STREAM),
         variants=PTSZ),
    # module
    _drv("cuModuleLoad", "module", ("module", K.OUT_HANDLE), ("fname", K.CSTRING)),
    _drv("cuModuleLoadData", "module", ("module", K.OUT_HANDLE), ("image", K.PTR)),
    _drv("cuModuleLoadDataEx", "module", ("module", K.OUT_HANDLE), ("image", K.PTR),
         ("numOptions", K.UINT), ("options", K.PTR), ("optionValues", K.PTR)),
    _drv("cuModuleUnload", "module", ("hmod", K.HANDLE)),
    _drv("cuModuleGetFunction", "module", ("hfunc", K.OUT_FUNCTION), ("hmod", K.HANDLE),
         ("name", K.CSTRING)),
    _drv("cuLibraryLoadData", "module", ("library", K.OUT_HANDLE), ("code", K.PTR),
         ("jitOptions", K.PTR), ("jitOptionsValues", K.PTR), ("numJitOptions", K.UINT),
         ("libraryOptions", K.PTR), ("libraryOptionValues", K.PTR),
         ("numLibraryOptions", K.UINT)),
    _drv("cuLibraryGetKernel", "module", ("pKernel", K.OUT_FUNCTION), ("library", K.HANDLE),
         ("name", K.CSTRING)),
    _drv("cuKernelGetFunction", "module", ("pFunc", K.OUT_FUNCTION), ("kernel", K.CU_FUNCTION)),
    # stream
    _drv("cuStreamCreate", "stream", ("phStream", K.OUT_HANDLE), ("Flags", K.FLAGS)),
    _drv("cuStreamDestroy", "stream", ("hStream", K.STREAM), version=V2),
    _drv("cuStreamWaitEvent", "stream", ("hStream", K.STREAM), ("hEvent", K.EVENT),
         ("Flags", K.FLAGS), variants=PTSZ),
    # event
    _drv("cuEventCreate", "event", ("phEvent", K.OUT_HANDLE), ("Flags", K.FLAGS)),
    _drv("cuEventRecord", "event", ("hEvent", K.EVENT), ("hStream", K.STREAM), variants=PTSZ),
    _drv("cuEventDestroy", "event", ("hEvent", K.EVENT), version=V2),
    # sync
    _drv("cuCtxSynchronize", "sync"),
    _drv("cuStreamSynchronize", "sync", ("hStream", K.STREAM), variants=PTSZ),
    _drv("cuEventSynchronize", "sync", ("hEvent", K.EVENT)),
)

FUNCTIONS: tuple[Function, ...] = RUNTIME_FUNCTIONS + DRIVER_FUNCTIONS

# Hot getters: frameworks call them hundreds of times a step (PyTorch's
# launch-bound MLP step: ~700 cudaGetDevice; a 3 s matmul/softmax loop: 285,846
# cudaGetDevice of 355,213 calls, docs/gpu-results/), each paying the uprobe
# trap pair for a call that says nothing new. Left out of the default set;
# `-e all`, their category or their name selects them (docs/events.md).
HOT = frozenset({"cudaGetDevice", "cudaGetLastError", "cudaPeekAtLastError",
                 "cudaStreamIsCapturing", "cuCtxGetCurrent"})

# exported symbol (without variant suffix) -> function; unique
BY_SYMBOL: dict[str, Function] = {f.symbol: f for f in FUNCTIONS}
# header name -> function; where one name has several ABI versions
# (cuCtxCreate_v2, _v4) this holds the newest, as the current headers declare it
BY_NAME: dict[str, Function] = {f.name: f for f in FUNCTIONS}


# cudaMemcpyKind
MEMCPY_KINDS = {
    0: "HostToHost",
    1: "HostToDevice",
    2: "DeviceToHost",
    3: "DeviceToDevice",
    4: "Default",
}
