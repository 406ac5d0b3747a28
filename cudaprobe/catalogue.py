"""The catalogue: every traced CUDA function, as data.

This is the single source of truth. The BPF probe table, the decoders, the
bpftrace exporter, `cudaprobe list` and the docs are all derived from it.

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

CATEGORIES = ("memory", "transfer", "kernel", "stream", "event", "device", "sync")


class ArgKind(enum.Enum):
    """How an argument is captured (entry/exit) and decoded."""

    PTR = "ptr"  # any pointer, shown in hex
    SIZE = "size"  # size_t byte count
    COUNT = "count"  # size_t element count / dimension
    INT = "int"  # int
    UINT = "uint"  # unsigned int
    FLAGS = "flags"  # unsigned int bit flags, shown in hex
    MEMCPY_KIND = "memcpy_kind"  # enum cudaMemcpyKind
    DIM3 = "dim3"  # dim3 by value: two slots
    STREAM = "stream"  # cudaStream_t / CUstream handle
    EVENT = "event"  # cudaEvent_t / CUevent handle
    HANDLE = "handle"  # other opaque handle (graph exec, ...)
    FUNC = "func"  # kernel host stub address
    LAUNCH_CONFIG = "launch_config"  # const cudaLaunchConfig_t *, read at entry
    OUT_PTR = "out_ptr"  # void ** written by the call
    OUT_HANDLE = "out_handle"  # cudaStream_t * / cudaEvent_t * written by the call
    OUT_SIZE = "out_size"  # size_t * written by the call
    OUT_INT = "out_int"  # int * written by the call
    OUT_FLOAT = "out_float"  # float * written by the call


OUT_KINDS = {
    ArgKind.OUT_PTR,
    ArgKind.OUT_HANDLE,
    ArgKind.OUT_SIZE,
    ArgKind.OUT_INT,
    ArgKind.OUT_FLOAT,
}
# out-parameters whose target is 4 bytes wide (the rest are 8)
OUT4_KINDS = {ArgKind.OUT_INT, ArgKind.OUT_FLOAT}


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
    # Versioned/per-thread-stream variants, probed where the library exports
    # them and skipped quietly where it does not.
    variants: tuple[str, ...] = ()
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
    def symbols(self) -> tuple[str, ...]:
        return (self.name, *(self.name + v for v in self.variants))

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
            if arg.kind is ArgKind.LAUNCH_CONFIG:
                return slot
        return -1


def _args(*pairs: tuple[str, ArgKind]) -> tuple[Arg, ...]:
    return tuple(Arg(name, kind) for name, kind in pairs)


K = ArgKind
PTSZ = ("_ptsz",)
PTDS = ("_ptds",)


def _rt(name: str, category: str, *args: tuple[str, ArgKind], variants: tuple[str, ...] = ()) -> Function:
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
    _rt("cudaMallocPitch", "memory", ("devPtr", K.OUT_PTR), ("pitch", K.OUT_SIZE), ("width", K.SIZE),
        ("height", K.COUNT)),
    _rt("cudaMemset", "memory", ("devPtr", K.PTR), ("value", K.INT), ("count", K.SIZE), variants=PTDS),
    _rt("cudaMemsetAsync", "memory", ("devPtr", K.PTR), ("value", K.INT), ("count", K.SIZE),
        ("stream", K.STREAM), variants=PTSZ),
    _rt("cudaMemGetInfo", "memory", ("free", K.OUT_SIZE), ("total", K.OUT_SIZE)),
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
    _rt("cudaStreamWaitEvent", "stream", ("stream", K.STREAM), ("event", K.EVENT), ("flags", K.FLAGS),
        variants=PTSZ),
    _rt("cudaStreamQuery", "stream", ("stream", K.STREAM), variants=PTSZ),
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
    # sync
    _rt("cudaStreamSynchronize", "sync", ("stream", K.STREAM), variants=PTSZ),
    _rt("cudaEventSynchronize", "sync", ("event", K.EVENT)),
    _rt("cudaDeviceSynchronize", "sync"),
)

FUNCTIONS: tuple[Function, ...] = RUNTIME_FUNCTIONS

BY_NAME: dict[str, Function] = {f.name: f for f in FUNCTIONS}
