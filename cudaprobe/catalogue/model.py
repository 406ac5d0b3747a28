"""The catalogue's data model: a function, its arguments, how each is captured.

A function is reported under the symbol it is probed at: the versioned symbol
that the headers' #define selects (cuMemAlloc -> cuMemAlloc_v2), or a
per-thread-stream variant of it (cuMemcpyHtoD_v2_ptds).

Each argument has a *kind* that says how it is captured and decoded. Argument
*slots* are the x86-64 System V integer argument words: slots 0-5 are the
registers rdi, rsi, rdx, rcx, r8, r9; slot 6 onwards are read from the stack
at entry. A `dim3` passed by value takes two slots (x|y packed in one, z in
the next); a struct passed by value in registers takes one slot per 8 bytes,
and goes on the stack whole where the registers left cannot hold it; a
struct over 16 bytes always goes on the stack; float and double arguments go
in SSE registers and are not captured. An argument whose slot would be past
MAX_SLOTS is not captured either (slot -1, decoded as None): the function is
still traced. Out-parameters are pointers whose target is read at exit.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from cudaprobe.catalogue.structs import LAYOUTS

REGISTER_SLOTS = 6
MAX_SLOTS = 12
MAX_OUTS = 4

RUNTIME = "runtime"
DRIVER = "driver"
NCCL = "nccl"  # the NCCL library's API (libnccl), above the runtime's
APIS = (RUNTIME, DRIVER, NCCL)

CATEGORIES = ("memory", "transfer", "kernel", "stream", "event", "device", "sync", "context",
              "module", "graph", "capture", "vmm", "pool", "ipc", "peer", "callback", "profiler",
              "texture", "occupancy", "attribute", "interop", "other",
              "collective", "p2p", "group", "comm")


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
    OUT_U64 = "out_u64"  # other 8-byte integer written by the call (unsigned long long *)
    ENUM = "enum"  # an enum by value, named from the headers' enum (Arg.type_name)
    # const struct X * decoded by its layout (structs.py; Arg.type_name is X):
    # a window of its bytes is copied at entry
    STRUCT = "struct"
    BYVAL = "byval"  # a small struct by value in registers (Arg.size bytes), shown in hex
    STACK_STRUCT = "stack_struct"  # a struct by value over 16 bytes: on the stack, not captured
    NOT_CAPTURED = "not_captured"  # in an SSE register, or past MAX_SLOTS: None


OUT_KINDS = {
    ArgKind.OUT_PTR,
    ArgKind.OUT_HANDLE,
    ArgKind.OUT_FUNCTION,
    ArgKind.OUT_SIZE,
    ArgKind.OUT_INT,
    ArgKind.OUT_FLOAT,
    ArgKind.OUT_U64,
}
# out-parameters whose target is 4 bytes wide (the rest are 8)
OUT4_KINDS = {ArgKind.OUT_INT, ArgKind.OUT_FLOAT}
# pointers to a struct of which a window is copied at entry (cp_probe_cfg.cfg_off,
# cfg_len): the launch configurations, and the structs structs.py lays out
CONFIG_KINDS = {ArgKind.LAUNCH_CONFIG, ArgKind.CU_LAUNCH_CONFIG, ArgKind.STRUCT}
# at most this many bytes of it: cfg words from CP_FRAME_WORD on hold a call site
CONFIG_MAX_BYTES = 64
LAUNCH_CONFIG_BYTES = 40  # the launch config structs' fields up to the stream
NOT_CAPTURED_SLOT = -1


@dataclass(frozen=True)
class Arg:
    name: str  # parameter name as in the CUDA headers
    kind: ArgKind
    ctype: str = ""  # C type as the headers write it
    type_name: str = ""  # ENUM: the enum (generated.ENUMS); STRUCT: the struct (structs.py)
    size: int = 0  # BYVAL, STACK_STRUCT: bytes

    @property
    def words(self) -> int:
        if self.kind is ArgKind.DIM3:
            return 2
        if self.kind in (ArgKind.BYVAL, ArgKind.STACK_STRUCT):
            return (self.size + 7) // 8
        return 0 if self.kind is ArgKind.NOT_CAPTURED else 1

    @property
    def is_out(self) -> bool:
        return self.kind in OUT_KINDS


@dataclass(frozen=True)
class Function:
    name: str  # base symbol, as declared in the headers
    api: str  # RUNTIME, DRIVER or NCCL
    category: str
    args: tuple[Arg, ...]
    # Per-thread-stream variants (suffixes of `symbol`), probed where the
    # library exports them and skipped quietly where it does not.
    variants: tuple[str, ...] = ()
    # ABI version suffix that the headers' #define maps `name` to (cuMemAlloc
    # -> cuMemAlloc_v2). The versioned symbol is the one probed and reported:
    # the unversioned one is the legacy ABI, with a different signature.
    version: str = ""
    deprecated: bool = False  # __CUDA_DEPRECATED in the headers
    returns: str = ""  # C return type; "" for cudaError_t / CUresult / ncclResult_t
    slots: tuple[int, ...] = field(init=False, repr=False)
    out_index: dict[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        slots, out_index, reg, stack = [], {}, 0, 0
        for arg in self.args:
            # x86-64 System V: an argument that the registers left cannot hold
            # whole goes on the stack; later ones may still take a register
            if arg.words == 0:
                slot = NOT_CAPTURED_SLOT
            elif arg.kind is ArgKind.STACK_STRUCT or reg + arg.words > REGISTER_SLOTS:
                slot = REGISTER_SLOTS + stack
                stack += arg.words
            else:
                slot = reg
                reg += arg.words
            if slot + arg.words > MAX_SLOTS or arg.kind is ArgKind.STACK_STRUCT:
                slot = NOT_CAPTURED_SLOT
            slots.append(slot)
            if arg.is_out and slot != NOT_CAPTURED_SLOT:
                out_index[arg.name] = len(out_index)
        if len(out_index) > MAX_OUTS:
            raise ValueError(f"{self.name}: more than {MAX_OUTS} out-parameters")
        # the BPF event has one buffer for what is copied at entry, and one func_name
        copied = [a for a in self.args if a.kind in CONFIG_KINDS or a.kind is ArgKind.CSTRING]
        if len(copied) > 1:
            raise ValueError(f"{self.name}: more than one argument copied at entry")
        if sum(a.kind in (ArgKind.FUNC, ArgKind.CU_FUNCTION) for a in self.args) > 1:
            raise ValueError(f"{self.name}: more than one kernel argument")
        for a in self.args:
            if a.kind is ArgKind.STRUCT and (a.type_name not in LAYOUTS or
                                             LAYOUTS[a.type_name].length > CONFIG_MAX_BYTES):
                raise ValueError(f"{self.name}: {a.name}: no layout of {a.type_name!r} fits")
        object.__setattr__(self, "slots", tuple(slots))
        object.__setattr__(self, "out_index", out_index)

    @property
    def words(self) -> int:
        """Argument words captured: up to the last captured slot."""
        return max((slot + arg.words for arg, slot in zip(self.args, self.slots)
                    if slot != NOT_CAPTURED_SLOT), default=0)

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
            if arg.name in self.out_index and (4 if arg.kind in OUT4_KINDS else 8) == width:
                mask |= 1 << slot
        return mask

    @property
    def config_slot(self) -> int:
        """Slot of a struct pointer of which a window is read at entry, or -1."""
        for arg, slot in zip(self.args, self.slots):
            if arg.kind in CONFIG_KINDS:
                return slot
        return -1

    @property
    def config_arg(self) -> Arg | None:
        return next((a for a, s in zip(self.args, self.slots)
                     if a.kind in CONFIG_KINDS and s != NOT_CAPTURED_SLOT), None)

    @property
    def config_window(self) -> tuple[int, int]:
        """(offset, length) of the bytes of the config_slot struct copied at entry."""
        arg = self.config_arg
        if arg is None:
            return 0, 0
        if arg.kind is ArgKind.STRUCT:
            layout = LAYOUTS[arg.type_name]
            return layout.offset, layout.length
        return 0, LAUNCH_CONFIG_BYTES

    @property
    def string_slot(self) -> int:
        """Slot of a C string copied at entry, or -1."""
        for arg, slot in zip(self.args, self.slots):
            if arg.kind is ArgKind.CSTRING:
                return slot
        return -1
