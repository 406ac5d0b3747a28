"""cudaprobe trace on the driver API: Debian's real libcuda (535, no GPU), and
a stand-in libcuda whose calls succeed, for kernel-handle naming.

driver_calls.c prints what it passed and got; the tests compare the decoded
events with that. With the real library cuInit returns CUDA_ERROR_NO_DEVICE
and later calls CUDA_ERROR_NOT_INITIALIZED, but the probes fire on the real
code with real arguments.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ..conftest import build_workload
from .conftest import expected_calls, trace_jsonl

VECADD = "vecAdd(float const*, float const*, float*, int)"
SCALE = "void scale<float>(float*, float, int)"


def driver_calls(libcuda: Path) -> Path:
    d = str(libcuda.parent)
    return build_workload("driver_calls.c", extra=[f"-L{d}", "-lcuda", f"-Wl,-rpath,{d}"])


@pytest.fixture(scope="module")
def fake_libcuda() -> Path:
    return build_workload("fake_libcuda.c", "fake/libcuda.so.1",
                          extra=["-shared", "-fPIC", "-Wl,-soname,libcuda.so.1"])


def by_event(calls: list[dict]) -> dict[str, dict]:
    """The first call of each event."""
    first: dict[str, dict] = {}
    for c in calls:
        first.setdefault(c["event"], c)
    return first


def hexed(printed: str) -> str:
    """printf's %#lx as cudaprobe writes it (C prints zero as "0")."""
    return hex(int(printed, 16))


def test_real_libcuda_calls_decoded_as_made(tmp_path, libcuda):
    exe = driver_calls(libcuda)
    calls, summary, proc = trace_jsonl(tmp_path, "--lib", str(libcuda), command=[str(exe)])
    assert proc.returncode == 0, proc.stderr
    truth = expected_calls(proc.stdout)
    # versioned symbols are the events: cuMemAlloc_v2, cuStreamDestroy_v2 ...
    assert [c["event"] for c in calls] == [t["event"] for t in truth]
    assert summary["lost_total"] == 0
    names = {0: "CUDA_SUCCESS", 3: "CUDA_ERROR_NOT_INITIALIZED", 100: "CUDA_ERROR_NO_DEVICE",
             400: "CUDA_ERROR_INVALID_HANDLE"}
    for call, t in zip(calls, truth):
        assert call["ret"] == t["ret"] and call["ret_name"] == names[t["ret"]], call
        assert call["api"] == "driver" and call["process"] == "driver_calls"
        # out-parameters are read at exit when the call succeeded: what it wrote;
        # a failed call's are not read (null), not what was left in memory
        for key in ("dptr", "pctx", "module", "hfunc", "library", "pKernel", "pFunc",
                    "phStream", "phEvent"):
            if key in t:
                expected = hexed(t[key]) if t["ret"] == 0 else None
                assert call["args"][key] == expected, (call, key)
                if t["ret"]:
                    assert f"{key}=-" in call["details"].split(), call
    first = by_event(truth)
    c = by_event(calls)

    def written(event: str, key: str, value=None):
        """What `event` wrote to `key` (its printed value, or `value`), if it succeeded."""
        t = first[event]
        return (t[key] if value is None else value) if t["ret"] == 0 else None

    assert c["cuInit"]["ret_name"] == "CUDA_ERROR_NO_DEVICE"
    assert first["cuDriverGetVersion"]["ret"] == 0  # needs no device: its out-parameter read
    assert c["cuDriverGetVersion"]["args"] == {
        "driverVersion": first["cuDriverGetVersion"]["driverVersion"]}
    assert c["cuDeviceGet"]["args"] == {"device": written("cuDeviceGet", "device"), "ordinal": 0}
    assert c["cuCtxCreate_v2"]["args"] == {"pctx": written("cuCtxCreate_v2", "pctx", "0xc0"),
                                           "flags": 4, "dev": 0}
    assert c["cuMemAlloc_v2"]["args"]["bytesize"] == 1 << 20
    pitch = c["cuMemAllocPitch_v2"]["args"]
    assert (pitch["pPitch"], pitch["WidthInBytes"], pitch["Height"],
            pitch["ElementSizeBytes"]) == (written("cuMemAllocPitch_v2", "pPitch"), 1000, 10, 4)
    assert c["cuMemcpyHtoD_v2"]["args"] == {"dstDevice": "0x1000", "srcHost": "0x2000",
                                            "ByteCount": 4096}
    assert c["cuMemcpyDtoHAsync_v2"]["args"] == {"dstHost": "0x3000", "srcDevice": "0x4000",
                                                 "ByteCount": 123, "hStream": "0x5000"}
    assert c["cuMemsetD8_v2"]["args"] == {"dstDevice": "0x6000", "uc": 0xAB, "N": 256}
    assert c["cuMemsetD32_v2"]["args"]["ui"] == 0xFFFFFFFE
    assert c["cuModuleLoadData"]["args"]["image"] == hexed(first["cuModuleLoadData"]["image"])
    # the name is copied at entry, whatever the call then does
    assert c["cuModuleGetFunction"]["args"] == {
        "hfunc": written("cuModuleGetFunction", "hfunc", "0xf00d"), "hmod": "0x0",
        "name": "_Z6vecAddPKfS0_Pfi"}
    assert c["cuModuleGetFunction"]["details"].endswith(f"name={VECADD}")
    launch = c["cuLaunchKernel"]
    # f and grid/block x,y in registers; block z, smem, stream, params, extra on the stack
    assert launch["args"] == {"f": "0x0", "gridDim": [4, 2, 1], "blockDim": [256, 1, 1],
                              "sharedMemBytes": 1024, "hStream": "0x7000",
                              "kernelParams": hexed(first["cuLaunchKernel"]["kernelParams"]),
                              "extra": "0x0"}
    ex = c["cuLaunchKernelEx"]["args"]
    assert ex["config"] == hexed(first["cuLaunchKernelEx"]["config"])
    assert (ex["gridDim"], ex["blockDim"], ex["sharedMemBytes"], ex["hStream"]) == (
        [8, 4, 2], [128, 1, 1], 4096, "0xabc")
    assert c["cuLibraryGetKernel"]["args"]["name"] == "_Z5scaleIfEvPT_S0_i"
    coop = c["cuLaunchCooperativeKernel"]["args"]
    assert coop["gridDim"] == [16, 1, 1] and coop["blockDim"] == [32, 2, 1]
    assert coop["hStream"] == "0x7000"


def test_launches_named_by_the_handles_made_before(tmp_path, libcuda, fake_libcuda):
    exe = driver_calls(libcuda)
    calls, summary, proc = trace_jsonl(
        tmp_path, "--lib", str(fake_libcuda),
        command=["env", f"LD_LIBRARY_PATH={fake_libcuda.parent}", str(exe)])
    assert proc.returncode == 0, proc.stderr
    assert summary["lost_total"] == 0
    assert all(c["ret_name"] == "CUDA_SUCCESS" for c in calls)
    # every call succeeded: every out-parameter is read, as the library wrote it
    truth = expected_calls(proc.stdout)
    assert [c["event"] for c in calls] == [t["event"] for t in truth]
    for call, t in zip(calls, truth):
        for key in ("dptr", "pctx", "module", "hfunc", "library", "pKernel", "pFunc",
                    "phStream", "phEvent"):
            if key in t:
                assert call["args"][key] == hexed(t[key]), (call, key)
        if "driverVersion" in t:
            assert call["args"]["driverVersion"] == t["driverVersion"]
    launches = [c for c in calls if c["category"] == "kernel"]
    assert [(c["event"], c["args"]["f"], c["args"].get("func_name")) for c in launches] == [
        ("cuLaunchKernel", "0xf0000001", VECADD),  # cuModuleGetFunction's handle
        ("cuLaunchKernelEx", "0xf0000001", VECADD),
        ("cuLaunchCooperativeKernel", "0xf0000002", SCALE),  # cuKernelGetFunction's
        ("cuLaunchKernel", "0x4e10", SCALE),  # the CUkernel itself, as a CUfunction
    ]
    assert f"f=0xf0000001 {VECADD} gridDim=(4,2,1)" in launches[0]["details"]
    made = by_event(calls)
    assert made["cuModuleGetFunction"]["args"]["hfunc"] == "0xf0000001"
    assert made["cuKernelGetFunction"]["args"] == {"pFunc": "0xf0000002", "kernel": "0x4e10",
                                                   "func_name": SCALE}


def test_api_driver_selects_driver_functions_only(tmp_path, libcuda, libcudart):
    exe = driver_calls(libcuda)
    calls, summary, proc = trace_jsonl(tmp_path, "--lib", str(libcuda), "--lib", str(libcudart),
                                       "--api", "driver", "-e", "cuMemAlloc,kernel",
                                       command=[str(exe)])
    assert proc.returncode == 0, proc.stderr
    assert [c["event"] for c in calls] == ["cuMemAlloc_v2", "cuLaunchKernel", "cuLaunchKernelEx",
                                           "cuLaunchCooperativeKernel", "cuLaunchKernel"]
    assert summary["not_found"] == []
