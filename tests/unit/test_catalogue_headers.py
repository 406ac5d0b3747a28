"""The catalogue against the CUDA headers and the driver library it describes.

Every function and argument name must be declared in cuda_runtime_api.h
(runtime) or cuda.h (driver), and every driver symbol must be one that
libcuda exports: probing an unversioned legacy symbol (cuMemAlloc instead of
cuMemAlloc_v2) would decode the wrong signature.
"""

from __future__ import annotations

import re
from functools import cache

import pytest

from cudaprobe.catalogue import functions as catalogue
from cudaprobe.catalogue.functions import ArgKind
from cudaprobe.probe.plan import missing_symbols
from cudaprobe.targets.elfsyms import read_symbols

from ..conftest import CUDA_HOME, libcuda_path

HEADERS = {catalogue.RUNTIME: "cuda_runtime_api.h", catalogue.DRIVER: "cuda.h"}
# declared in CUDA 13's cuda.h, exported only by drivers newer than Debian's 535
NEWER_THAN_535 = {"cuCtxCreate_v4"}
# what CUDA <= 12 headers #define a name to, kept for programs built against them
OLDER_HEADERS = {"cuCtxCreate_v2"}

REQUIRED_DRIVER = """cuInit cuDriverGetVersion cuDeviceGet cuDeviceGetCount cuCtxCreate
cuCtxDestroy cuCtxSynchronize cuDevicePrimaryCtxRetain cuDevicePrimaryCtxRelease cuMemAlloc
cuMemFree cuMemAllocHost cuMemFreeHost cuMemHostAlloc cuMemAllocManaged cuMemAllocPitch
cuMemAllocAsync cuMemFreeAsync cuMemcpy cuMemcpyAsync cuMemcpyHtoD cuMemcpyDtoH cuMemcpyDtoD
cuMemcpyHtoDAsync cuMemcpyDtoHAsync cuMemcpyDtoDAsync cuMemsetD8 cuMemsetD16 cuMemsetD32
cuMemsetD8Async cuMemsetD16Async cuMemsetD32Async cuLaunchKernel cuLaunchKernelEx
cuLaunchCooperativeKernel cuModuleLoad cuModuleLoadData cuModuleLoadDataEx cuModuleUnload
cuModuleGetFunction cuLibraryLoadData cuLibraryGetKernel cuKernelGetFunction cuStreamCreate
cuStreamDestroy cuStreamSynchronize cuStreamWaitEvent cuEventCreate cuEventRecord
cuEventSynchronize cuEventDestroy cuGraphLaunch""".split()

_DECL = re.compile(r"\b(cu[A-Za-z0-9_]+)\s*\(([^;{}]*?)\)\s*;")


def _param_names(params: str) -> tuple[str, ...]:
    params = " ".join(params.split())
    if params.strip() in ("", "void"):
        return ()
    return tuple(re.findall(r"(\w+)\s*(?:\[[^\]]*\])?\s*$", p)[0] for p in params.split(","))


@cache
def declarations(api: str) -> dict[str, set[tuple[str, ...]]]:
    """Function name -> parameter-name lists it is declared with (all #if branches)."""
    header = CUDA_HOME / "include" / HEADERS[api]
    if not header.is_file():
        pytest.skip(f"{header} not found (CUDA toolkit missing)")
    text = re.sub(r"/\*.*?\*/|//[^\n]*", "", header.read_text(errors="replace"), flags=re.S)
    text = re.sub(r"__dv\([^)]*\)", "", text)  # default arguments
    decls: dict[str, set[tuple[str, ...]]] = {}
    for name, params in _DECL.findall(text):
        if "(" not in params:  # not a function-pointer parameter list we cannot split
            decls.setdefault(name, set()).add(_param_names(params))
    return decls


@pytest.mark.parametrize("fn", catalogue.FUNCTIONS, ids=lambda f: f.symbol)
def test_names_and_arguments_are_the_headers(fn):
    decls = declarations(fn.api)
    # a versioned symbol is declared under it (cuCtxCreate_v2) or under the name
    # the headers #define to it (cuMemAlloc -> cuMemAlloc_v2)
    found = decls.get(fn.symbol, set()) | decls.get(fn.name, set())
    assert found, f"{fn.symbol} is not declared in {HEADERS[fn.api]}"
    assert tuple(a.name for a in fn.args) in found


def test_probed_symbol_is_what_the_header_defines_the_name_to():
    header = CUDA_HOME / "include" / "cuda.h"
    if not header.is_file():
        pytest.skip(f"{header} not found (CUDA toolkit missing)")
    defines = dict(re.findall(r"#define\s+(cu\w+)\s+(?:__CUDA_API_PT[DS][SZ]\()?(cu\w+)",
                              header.read_text()))
    for fn in catalogue.DRIVER_FUNCTIONS:
        if fn.symbol in OLDER_HEADERS:
            continue
        assert fn.symbol == defines.get(fn.name, fn.name), fn.name


def test_required_driver_functions_present():
    names = {f.name for f in catalogue.DRIVER_FUNCTIONS}
    assert set(REQUIRED_DRIVER) <= names


def test_driver_symbols_are_exported_by_libcuda():
    path = libcuda_path()
    if path is None:
        pytest.skip("libcuda not extracted: run scripts/setup")
    exported = read_symbols(str(path)).functions
    for fn in catalogue.DRIVER_FUNCTIONS:
        if fn.symbol in NEWER_THAN_535:
            assert fn.symbol not in exported
            continue
        assert fn.symbol in exported, fn.symbol
    # the variants 535 exports are all catalogued (none missed by a typo)
    ptsz = {s for f in catalogue.DRIVER_FUNCTIONS for s in f.symbols if s.endswith("_ptsz")}
    assert {"cuLaunchKernel_ptsz", "cuMemcpyHtoDAsync_v2_ptsz"} <= ptsz <= set(exported)


@pytest.mark.parametrize("fn", catalogue.FUNCTIONS, ids=lambda f: f.symbol)
def test_dim_arguments_come_as_x_y_z(fn):
    dims = [a.name for a in fn.args if a.kind is ArgKind.DIM]
    assert len(dims) % 3 == 0
    for i in range(0, len(dims), 3):
        stem = dims[i][:-1]
        assert dims[i : i + 3] == [stem + "X", stem + "Y", stem + "Z"]


def test_cu_launch_kernel_abi_slots():
    fn = catalogue.BY_NAME["cuLaunchKernel"]
    # f, grid x y z, block x y in registers; block z, smem, stream, params, extra on the stack
    assert fn.words == 11 and fn.stack_words == 5
    assert fn.slots == tuple(range(11))
    assert catalogue.BY_NAME["cuLaunchKernelEx"].config_slot == 0
    assert catalogue.BY_NAME["cuLibraryLoadData"].stack_words == 2


def test_driver_out_parameter_widths():
    by = catalogue.BY_SYMBOL
    assert by["cuMemAlloc_v2"].out_mask(8) == 0b1  # CUdeviceptr is 8 bytes
    assert by["cuDeviceGet"].out_mask(4) == 0b1  # CUdevice is an int
    assert by["cuMemAllocPitch_v2"].out_mask(8) == 0b11
    assert by["cuCtxCreate_v2"].symbols == ("cuCtxCreate_v2",)
    assert by["cuMemcpyHtoD_v2"].symbols == ("cuMemcpyHtoD_v2", "cuMemcpyHtoD_v2_ptds")


def test_header_parser_reads_multiline_declarations():
    assert ("f", "gridDimX", "gridDimY", "gridDimZ", "blockDimX", "blockDimY", "blockDimZ",
            "sharedMemBytes", "hStream", "kernelParams", "extra") in declarations(
        catalogue.DRIVER)["cuLaunchKernel"]
    assert ("devPtr", "size") in declarations(catalogue.RUNTIME)["cudaMalloc"]



def test_missing_symbols_only_for_apis_the_libraries_provide():
    fns = [catalogue.BY_SYMBOL[s] for s in ("cudaMalloc", "cudaFree", "cuMemAlloc_v2")]
    # an executable with static cudart that defines cudaMalloc only
    assert missing_symbols(fns, ["/opt/app"], {"cudaMalloc"}) == ["cudaFree"]
    assert missing_symbols(fns, ["/x/libcuda.so.1"], {"cudaMalloc"}) == ["cudaFree",
                                                                         "cuMemAlloc_v2"]
    assert missing_symbols(fns, ["/x/libcudart.so.13"], {"cudaMalloc", "cudaFree"}) == []
