"""Structs decoded by layout: which bytes of a `const struct X *` argument are
copied at entry, and the fields in them.

A probe copies one window of at most CONFIG_MAX_BYTES (64) bytes of the
struct, at an offset: the fields that say most about the call (a 3D copy's
destination, extent and kind; an allocation's type and location). Offsets
are the x86-64 layout of the CUDA 13 headers, checked against them by
tests/unit/test_structs.py (a C program's offsetof and sizeof).

Field decoders: u8, u16, u32, s32, u64, size (bytes), ptr (hex), enum:E (the
headers' enum E, generated.ENUMS), dim3 (three unsigned ints).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Layout:
    c_name: str  # the type as C names it (for the offsetof test)
    offset: int  # window copied at entry: [offset, offset + length)
    length: int
    fields: tuple[tuple[str, int, str], ...]  # (field, offset in the struct, decoder)


_MEMCPY3D_DST = (("dstPtr.ptr", 96, "ptr"), ("dstPtr.pitch", 104, "size"),
                 ("dstPtr.xsize", 112, "size"), ("dstPtr.ysize", 120, "u64"),
                 ("extent.width", 128, "size"), ("extent.height", 136, "u64"),
                 ("extent.depth", 144, "u64"), ("kind", 152, "enum:cudaMemcpyKind"))
_CU_MEMCPY3D_DST = (("dstDevice", 136, "ptr"), ("dstArray", 144, "ptr"),
                    ("dstPitch", 160, "size"), ("dstHeight", 168, "u64"),
                    ("WidthInBytes", 176, "size"), ("Height", 184, "u64"), ("Depth", 192, "u64"))
_CU_LOCATION = (("location.type", 8, "enum:CUmemLocationType_enum"), ("location.id", 12, "s32"))
_RT_LOCATION = (("location.type", 8, "enum:cudaMemLocationType"), ("location.id", 12, "s32"))

# key: the struct tag as generated.py's resolved types name it
LAYOUTS: dict[str, Layout] = {
    "cudaMemcpy3DParms": Layout("struct cudaMemcpy3DParms", 96, 64, _MEMCPY3D_DST),
    "CUDA_MEMCPY3D_st": Layout("CUDA_MEMCPY3D", 136, 64, _CU_MEMCPY3D_DST),
    "CUDA_MEMCPY2D_st": Layout("CUDA_MEMCPY2D", 72, 56, (
        ("dstMemoryType", 72, "enum:CUmemorytype_enum"), ("dstHost", 80, "ptr"),
        ("dstDevice", 88, "ptr"), ("dstPitch", 104, "size"), ("WidthInBytes", 112, "size"),
        ("Height", 120, "u64"))),
    "CUmemAllocationProp_st": Layout("CUmemAllocationProp", 0, 32, (
        ("type", 0, "enum:CUmemAllocationType_enum"),
        ("requestedHandleTypes", 4, "enum:CUmemAllocationHandleType_enum"), *_CU_LOCATION,
        ("allocFlags.compressionType", 24, "u8"), ("allocFlags.gpuDirectRDMACapable", 25, "u8"),
        ("allocFlags.usage", 26, "u16"))),
    "CUmemPoolProps_st": Layout("CUmemPoolProps", 0, 40, (
        ("allocType", 0, "enum:CUmemAllocationType_enum"),
        ("handleTypes", 4, "enum:CUmemAllocationHandleType_enum"), *_CU_LOCATION,
        ("maxSize", 24, "size"), ("usage", 32, "u16"))),
    "cudaMemPoolProps": Layout("struct cudaMemPoolProps", 0, 40, (
        ("allocType", 0, "enum:cudaMemAllocationType"),
        ("handleTypes", 4, "enum:cudaMemAllocationHandleType"), *_RT_LOCATION,
        ("maxSize", 24, "size"), ("usage", 32, "u16"))),
    "CUmemAccessDesc_st": Layout("CUmemAccessDesc", 0, 12, (
        ("location.type", 0, "enum:CUmemLocationType_enum"), ("location.id", 4, "s32"),
        ("flags", 8, "enum:CUmemAccess_flags_enum"))),
    "cudaMemAccessDesc": Layout("struct cudaMemAccessDesc", 0, 12, (
        ("location.type", 0, "enum:cudaMemLocationType"), ("location.id", 4, "s32"),
        ("flags", 8, "enum:cudaMemAccessFlags"))),
    "cudaKernelNodeParams": Layout("struct cudaKernelNodeParams", 0, 40, (
        ("func", 0, "ptr"), ("gridDim", 8, "dim3"), ("blockDim", 20, "dim3"),
        ("sharedMemBytes", 32, "u32"))),
}
