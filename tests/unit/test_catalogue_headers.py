"""The catalogue against the CUDA headers and the driver library it describes.

generated.py must be what scripts/gen-catalogue makes of the installed
headers, and the driver symbols it probes ones that libcuda exports: probing
an unversioned legacy symbol (cuMemAlloc instead of cuMemAlloc_v2) would
decode the wrong signature.
"""

from __future__ import annotations

import sys
from functools import cache
from importlib.machinery import SourceFileLoader
from importlib.util import module_from_spec, spec_from_loader
from pathlib import Path
from types import ModuleType

import pytest

from cudaprobe.catalogue import functions as catalogue
from cudaprobe.catalogue import generated
from cudaprobe.catalogue.functions import ArgKind
from cudaprobe.probe.plan import missing_symbols
from cudaprobe.targets.elfsyms import read_symbols

from ..conftest import CUDA_HOME, NCCL_HOME, libcuda_path
from ..every import check_every

# declared in CUDA 13's cuda.h, exported only by drivers newer than Debian's 535
NEWER_THAN_535 = {"cuCtxCreate_v4"}

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

GENERATOR = Path(__file__).resolve().parents[2] / "scripts" / "gen-catalogue"


@cache
def load_generator() -> ModuleType:
    """Import scripts/gen-catalogue, which has no .py suffix."""
    loader = SourceFileLoader("gen_catalogue", str(GENERATOR))
    spec = spec_from_loader(loader.name, loader)
    assert spec is not None
    module = module_from_spec(spec)
    sys.modules[loader.name] = module  # dataclasses look their module up there
    loader.exec_module(module)
    return module


@cache
def regenerated() -> str:
    include = CUDA_HOME / "include"
    if not (include / "cuda.h").is_file():
        pytest.skip(f"{include}/cuda.h not found (CUDA toolkit missing)")
    if not (NCCL_HOME / "include" / "nccl.h").is_file():
        pytest.skip("nccl.h not unpacked: run scripts/setup")
    return load_generator().generate(include, NCCL_HOME / "include")


def test_generated_tables_are_the_installed_headers():
    # scripts/gen-catalogue rewrites cudaprobe/catalogue/generated.py
    assert Path(generated.__file__).read_text() == regenerated(), \
        "run scripts/gen-catalogue: the headers changed, or the generator did"


def test_every_declared_function_is_catalogued():
    declared = {(api, e[0] + e[1]) for api, table in (("runtime", generated.RUNTIME),
                                                     ("driver", generated.DRIVER),
                                                     ("nccl", generated.NCCL))
                for e in table}
    assert declared <= {(f.api, f.symbol) for f in catalogue.FUNCTIONS}
    # CUDA 13: 310 functions in cuda_runtime_api.h, 2 in cuda_profiler_api.h
    assert len(generated.RUNTIME) == 312


@pytest.mark.parametrize(("name", "symbol", "variants"), [
    ("cuMemAlloc", "cuMemAlloc_v2", ()),
    ("cuMemcpyHtoD", "cuMemcpyHtoD_v2", ("_ptds",)),
    ("cuMemcpyHtoDAsync", "cuMemcpyHtoDAsync_v2", ("_ptsz",)),
    ("cuMemPrefetchAsync", "cuMemPrefetchAsync_v2", ("_ptsz",)),
    ("cuGetProcAddress", "cuGetProcAddress_v2", ()),
    ("cudaMemcpy", "cudaMemcpy", ("_ptds",)),
    ("cudaLaunchKernel", "cudaLaunchKernel", ("_ptsz",)),
    ("cudaGraphLaunch", "cudaGraphLaunch", ("_ptsz",)),
    ("cudaMalloc", "cudaMalloc", ()),
])
def test_versions_and_variants_are_what_the_headers_define(name, symbol, variants):
    fn = catalogue.BY_NAME[name]
    assert (fn.symbol, fn.variants) == (symbol, variants)


def test_deprecation_is_read():
    assert catalogue.BY_NAME["cuDeviceGetProperties"].deprecated
    assert catalogue.BY_NAME["cuCtxAttach"].deprecated
    assert not catalogue.BY_NAME["cuMemAlloc"].deprecated
    assert sum(f.deprecated for f in catalogue.FUNCTIONS) >= 50


def test_parameters_come_with_names_and_c_types():
    fn = catalogue.BY_NAME["cuMemCreate"]
    assert [(a.name, a.ctype) for a in fn.args] == [
        ("handle", "CUmemGenericAllocationHandle *"), ("size", "size_t"),
        ("prop", "const CUmemAllocationProp *"), ("flags", "unsigned long long")]


def test_required_driver_functions_present():
    names = {f.name for f in catalogue.DRIVER_FUNCTIONS}
    assert set(REQUIRED_DRIVER) <= names


def test_driver_symbols_are_exported_by_libcuda():
    path = libcuda_path()
    if path is None:
        pytest.skip("libcuda not extracted: run scripts/setup")
    exported = read_symbols(str(path)).functions
    for name in REQUIRED_DRIVER:  # what the catalogue had before it was generated
        symbol = catalogue.BY_NAME[name].symbol
        assert symbol in exported or symbol in NEWER_THAN_535, name
    assert not NEWER_THAN_535 & set(exported)
    assert "cuCtxCreate_v2" in exported  # (overrides.OLDER_HEADERS)
    # CUDA 12's 535 exports most of what CUDA 13 declares
    found = [f for f in catalogue.DRIVER_FUNCTIONS if f.symbol in exported]
    assert len(found) > 0.8 * len(catalogue.DRIVER_FUNCTIONS)
    # the variants 535 exports are all catalogued (none missed by a typo) but
    # those of functions that CUDA 13 declares under a newer version
    ptsz = {s for f in catalogue.DRIVER_FUNCTIONS for s in f.symbols if s.endswith("_ptsz")}
    assert {"cuLaunchKernel_ptsz", "cuMemcpyHtoDAsync_v2_ptsz"} <= ptsz
    exported_ptsz = {s for s in exported if s.endswith("_ptsz")}
    uncatalogued = {s for s in exported_ptsz - ptsz
                    if s.replace("_ptsz", "") not in catalogue.BY_NAME}
    assert len(uncatalogued) <= 3, uncatalogued


def dims_come_as_x_y_z(fn: catalogue.Function) -> None:
    dims = [a.name for a in fn.args if a.kind is ArgKind.DIM]
    assert len(dims) % 3 == 0
    for i in range(0, len(dims), 3):
        stem = dims[i][:-1]
        assert dims[i : i + 3] == [stem + "X", stem + "Y", stem + "Z"]


def test_dim_arguments_come_as_x_y_z():
    check_every(catalogue.FUNCTIONS, dims_come_as_x_y_z, lambda fn: fn.symbol)


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


def test_missing_symbols_only_for_apis_the_libraries_provide():
    fns = [catalogue.BY_SYMBOL[s] for s in ("cudaMalloc", "cudaFree", "cuMemAlloc_v2")]
    # an executable with static cudart that defines cudaMalloc only
    assert missing_symbols(fns, ["/opt/app"], {"cudaMalloc"}) == ["cudaFree"]
    assert missing_symbols(fns, ["/x/libcuda.so.1"], {"cudaMalloc"}) == ["cudaFree",
                                                                         "cuMemAlloc_v2"]
    assert missing_symbols(fns, ["/x/libcudart.so.13"], {"cudaMalloc", "cudaFree"}) == []
