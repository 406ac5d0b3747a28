"""How each argument is captured and decoded, by its C type: the rules.

generated.py gives every parameter its C type as the headers write it
(`CUdeviceptr *`) and resolved (`ptr:u64`: see scripts/gen-catalogue). The
rules below turn the two into an ArgKind; overrides.py holds the few
arguments they get wrong (a kernel handle, an out-parameter that is an array).
"""

from __future__ import annotations

from cudaprobe.catalogue.model import Arg, ArgKind
from cudaprobe.catalogue.structs import LAYOUTS

K = ArgKind
STREAMS = {"cudaStream_t", "CUstream"}
EVENTS = {"cudaEvent_t", "CUevent"}
# integer typedefs that are addresses or handles, not numbers
ADDRESSES = {"CUdeviceptr", "CUdeviceptr_v2"}
INTEGER_HANDLES = {"CUmemGenericAllocationHandle", "CUtexObject", "CUsurfObject",
                   "cudaTextureObject_t", "cudaSurfaceObject_t", "CUmemGenericAllocationHandle_v1",
                   "cudaGraphConditionalHandle", "CUgraphConditionalHandle"}
LAUNCH_CONFIGS = {"cudaLaunchConfig_st": K.LAUNCH_CONFIG, "CUlaunchConfig_st": K.CU_LAUNCH_CONFIG}
# size_t arguments that count things other than bytes (the runtime's `count` is bytes)
COUNT_NAMES = {"height", "depth", "n"}
# non-const pointers that the call reads, not writes: arrays of arguments and options
INPUT_ARRAYS = {"args", "extra", "kernelParams"}
INPUT_ARRAY_ENDINGS = ("ptions", "Values")


def _base(ctype: str) -> str:
    """The type's name without qualifiers and pointers: `const CUstream *` -> CUstream."""
    words = [w for w in ctype.replace("*", " ").split() if w not in ("const", "volatile",
                                                                     "struct", "enum")]
    return " ".join(words)


def _is_count(name: str) -> bool:
    lower = name.lower()
    return (lower in COUNT_NAMES or lower.startswith("num")
            or (lower.endswith("count") and lower != "count" and "byte" not in lower))


def _scalar(name: str, ctype: str, resolved: str) -> Arg:
    base = _base(ctype)
    if base in STREAMS:
        return Arg(name, K.STREAM, ctype)
    if base in EVENTS:
        return Arg(name, K.EVENT, ctype)
    if base in ADDRESSES:
        return Arg(name, K.PTR, ctype)
    if base in INTEGER_HANDLES or resolved.startswith("handle:") or resolved == "fnptr":
        return Arg(name, K.HANDLE if resolved != "fnptr" else K.PTR, ctype)
    if resolved == "enum:cudaMemcpyKind":
        return Arg(name, K.MEMCPY_KIND, ctype)
    if resolved.startswith("enum:"):
        return Arg(name, K.ENUM, ctype, resolved[len("enum:"):])
    if resolved.startswith("struct:"):
        _, tag, size, cls = resolved.split(":")
        if tag == "dim3":
            return Arg(name, K.DIM3, ctype)
        if cls != "int":  # SSE class: in xmm registers, or in memory past 16 bytes
            return Arg(name, K.NOT_CAPTURED if int(size) <= 16 else K.STACK_STRUCT, ctype,
                       size=int(size))
        return Arg(name, K.BYVAL if int(size) <= 16 else K.STACK_STRUCT, ctype, size=int(size))
    if resolved in ("f32", "f64"):
        return Arg(name, K.NOT_CAPTURED, ctype)
    flags = "flag" in name.lower()
    if resolved in ("u8", "char", "s8"):
        return Arg(name, K.UINT8, ctype)
    if resolved in ("u16", "s16"):
        return Arg(name, K.UINT16, ctype)
    if resolved == "s32":
        return Arg(name, K.INT, ctype)
    if resolved == "u32":
        return Arg(name, K.FLAGS if flags else K.UINT, ctype)
    if base == "size_t":
        return Arg(name, K.COUNT if _is_count(name) else K.SIZE, ctype)
    return Arg(name, K.FLAGS if flags else K.COUNT, ctype)  # other 64-bit integers


def _pointer(name: str, ctype: str, resolved: str) -> Arg:
    const = resolved.startswith("cptr:")
    target = resolved.split(":", 1)[1]
    base = _base(ctype)
    if target == "char":
        return Arg(name, K.CSTRING if const else K.PTR, ctype)
    if target.startswith("struct:"):
        tag = target.split(":")[1]
        if const and tag in LAUNCH_CONFIGS:
            return Arg(name, LAUNCH_CONFIGS[tag], ctype)
        if const and tag in LAYOUTS:
            return Arg(name, K.STRUCT, ctype, tag)
        return Arg(name, K.PTR, ctype)
    if const or name in INPUT_ARRAYS or name.endswith(INPUT_ARRAY_ENDINGS):
        return Arg(name, K.PTR, ctype)
    # a pointer to something the call writes: an out-parameter, read at exit
    if target.startswith(("ptr:", "cptr:")):
        return Arg(name, K.OUT_PTR, ctype)  # void **
    if target.startswith("handle:") or base in INTEGER_HANDLES:
        return Arg(name, K.OUT_HANDLE, ctype)
    if base in ADDRESSES:
        return Arg(name, K.OUT_PTR, ctype)
    if base == "size_t":
        return Arg(name, K.OUT_SIZE, ctype)
    if target in ("s32", "u32") or target.startswith("enum:"):
        return Arg(name, K.OUT_INT, ctype)
    if target == "f32":
        return Arg(name, K.OUT_FLOAT, ctype)
    if target in ("u64", "s64"):
        return Arg(name, K.OUT_U64, ctype)
    return Arg(name, K.PTR, ctype)


def arg_of(name: str, ctype: str, resolved: str) -> Arg:
    """The argument as its C type says to capture it."""
    if resolved.startswith(("ptr:", "cptr:")):
        return _pointer(name, ctype, resolved)
    return _scalar(name, ctype, resolved)
