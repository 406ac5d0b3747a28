"""What the headers cannot say: the one hand-written table of the catalogue.

Everything else comes from the headers (generated.py) through the type rules
(kinds.py) and the name rules (categories.py). tests/unit/test_catalogue_headers.py
checks that each entry here still names a declared function and parameter.
"""

from __future__ import annotations

from cudaprobe.catalogue import generated
from cudaprobe.catalogue.model import ArgKind

K = ArgKind

# (function, parameter) -> kind, where the C type does not say it
ARGS: dict[tuple[str, str], ArgKind] = {
    # the kernel a launch runs: a host stub (runtime), a CUfunction/CUkernel
    # handle (driver), named where its making was seen (decode/handles.py)
    ("cudaLaunchKernel", "func"): K.FUNC,
    ("cudaLaunchKernelExC", "func"): K.FUNC,
    ("cudaLaunchCooperativeKernel", "func"): K.FUNC,
    ("cuLaunchKernel", "f"): K.CU_FUNCTION,
    ("cuLaunchKernelEx", "f"): K.CU_FUNCTION,
    ("cuLaunchCooperativeKernel", "f"): K.CU_FUNCTION,
    ("cuKernelGetFunction", "kernel"): K.CU_FUNCTION,
    # handles made from a kernel's name: named after it
    ("cuModuleGetFunction", "hfunc"): K.OUT_FUNCTION,
    ("cuLibraryGetKernel", "pKernel"): K.OUT_FUNCTION,
    ("cuKernelGetFunction", "pFunc"): K.OUT_FUNCTION,
    # driver launches pass grid and block as three unsigned ints each
    **{(fn, f"{stem}Dim{axis}"): K.DIM
       for fn in ("cuLaunchKernel", "cuLaunchCooperativeKernel")
       for stem in ("grid", "block") for axis in "XYZ"},
    ("cuLaunchKernel", "sharedMemBytes"): K.SIZE32,
    ("cuLaunchCooperativeKernel", "sharedMemBytes"): K.SIZE32,
    # ints that are byte values, not counts
    ("cudaMemset", "value"): K.INT,
    ("cudaMemsetAsync", "value"): K.INT,
    # a count of access descriptors, not bytes
    ("cuMemSetAccess", "count"): K.COUNT,
    # NCCL counts elements of its datatype (the runtime's size_t `count` is bytes)
    **{(fn, name): K.COUNT for fn, *_, params in generated.NCCL
       for name, ctype, _ in params if name == "count" and ctype == "size_t"},
    ("ncclCommShrink", "excludeRanksList"): K.PTR,  # ranks the call reads
    # out-parameter arrays (NULL to ask for the count): the pointer, not a value
    **{(fn, arg): K.PTR for fn, arg in (
        ("cudaGraphGetNodes", "nodes"), ("cudaGraphGetRootNodes", "pRootNodes"),
        ("cudaGraphGetEdges", "from"), ("cudaGraphGetEdges", "to"),
        ("cudaGraphNodeGetDependencies", "pDependencies"),
        ("cudaGraphNodeGetDependentNodes", "pDependentNodes"),
        ("cuGraphGetNodes", "nodes"), ("cuGraphGetRootNodes", "rootNodes"),
        ("cuGraphGetEdges", "from"), ("cuGraphGetEdges", "to"),
        ("cuGraphNodeGetDependencies", "dependencies"),
        ("cuGraphNodeGetDependentNodes", "dependentNodes"),
        ("cuDeviceGetName", "name"), ("cudaGetDeviceProperties", "prop"),
        ("cuCtxGetDevResource", "resource"))},
}

# name -> category, where categories.RULES get it wrong
CATEGORIES: dict[str, str] = {
    # its category in the hand-written catalogue: `-e stream` kept it
    "cudaStreamIsCapturing": "stream",
}

# Functions that older headers declare under an ABI version the current ones do
# not: probed too, for programs built against them. (name, version, parameters)
OLDER_HEADERS: tuple[tuple[str, str, tuple[tuple[str, str, str], ...]], ...] = (
    # CUDA <= 12 headers call cuCtxCreate_v2, CUDA 13 headers cuCtxCreate_v4
    ("cuCtxCreate", "_v2", (("pctx", "CUcontext *", "ptr:handle:CUctx_st"),
                            ("flags", "unsigned int", "u32"), ("dev", "CUdevice", "s32"))),
)
