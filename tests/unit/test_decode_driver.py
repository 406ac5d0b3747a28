"""Decoding driver-API events: versioned names, CUresult names, launch shapes."""

from __future__ import annotations

from cudaprobe.catalogue import functions as catalogue
from cudaprobe.decode.calls import decode_event
from cudaprobe.decode.handles import KernelHandles
from cudaprobe.probe import event

from .eventbuild import make_event, probes_for

GARBAGE = 0xDEAD_BEEF_0000_0000  # upper half of a stack word holding an unsigned int


def raw(symbol: str, args=(), outs=(), cfg=(), ret=0):
    """An event as the kernel writes it (eventbuild.make_event), and its probe."""
    return make_event(args, outs, cfg, ret=ret, comm="drv"), probes_for(symbol)


def test_versioned_symbol_is_the_event_and_results_are_curesult_names():
    r, probes = raw("cuMemAlloc_v2", args=(0x7FFC1000, 1 << 20), outs=(0x7F0000200000,), ret=3)
    c = decode_event(r, probes, 0)
    assert c.event == "cuMemAlloc_v2" and c.api == "driver" and c.category == "memory"
    assert c.ret_name == "CUDA_ERROR_NOT_INITIALIZED"
    assert c.args == {"dptr": None, "bytesize": 1 << 20}  # failed: dptr not read
    assert c.details == "dptr=- bytesize=1.0 MiB"
    r, probes = raw("cuInit", args=(0,), ret=100)
    assert decode_event(r, probes, 0).ret_name == "CUDA_ERROR_NO_DEVICE"
    r, probes = raw("cuInit", args=(0,), ret=0)
    assert decode_event(r, probes, 0).ret_name == "CUDA_SUCCESS"


def test_launch_kernel_grid_block_and_stack_words():
    # f, gx, gy, gz, bx, by in registers; bz, smem, stream, params, extra on the stack
    words = (0x55AA00, 64, 2, 1, 128, 2, GARBAGE | 1, GARBAGE | 2048, 0x7000, 0x7FF0, 0)
    r, probes = raw("cuLaunchKernel_ptsz", args=words)
    c = decode_event(r, probes, 0)
    assert c.event == "cuLaunchKernel_ptsz" and c.category == "kernel"
    assert c.args == {"f": "0x55aa00", "gridDim": [64, 2, 1], "blockDim": [128, 2, 1],
                      "sharedMemBytes": 2048, "hStream": "0x7000", "kernelParams": "0x7ff0",
                      "extra": "0x0"}
    assert "gridDim=(64,2,1) blockDim=(128,2,1) sharedMemBytes=2.0 KiB hStream=0x7000" in (
        c.details)


def test_launch_kernel_ex_reads_a_culaunchconfig():
    # CUlaunchConfig: gridDimX..Z, blockDimX..Z (unsigned int each), sharedMemBytes
    # (unsigned int, 4 bytes of padding after it), hStream at byte 32
    cfg = (8 | (4 << 32), 2 | (256 << 32), 1 | (1 << 32), GARBAGE | 4096, 0xABC)
    r, probes = raw("cuLaunchKernelEx", args=(0x9000, 0x55AA00, 0x7FF0, 0), cfg=cfg)
    c = decode_event(r, probes, 0)
    assert c.args == {"config": "0x9000", "gridDim": [8, 4, 2], "blockDim": [256, 1, 1],
                      "sharedMemBytes": 4096, "hStream": "0xabc", "f": "0x55aa00",
                      "kernelParams": "0x7ff0", "extra": "0x0"}
    assert c.details.startswith("grid=(8,4,2) block=(256,1,1) smem=4.0 KiB stream=0xabc f=")


def test_memset_values_use_only_their_width():
    r, probes = raw("cuMemsetD8_v2", args=(0x1000, 0xFFFF_FF07, 16))
    assert decode_event(r, probes, 0).args == {"dstDevice": "0x1000", "uc": 7, "N": 16}
    r, probes = raw("cuMemsetD16Async", args=(0x1000, 0xFFFF_1234, 16, 0x50))
    assert decode_event(r, probes, 0).args["us"] == 0x1234
    r, probes = raw("cuMemsetD32_v2_ptds", args=(0x1000, GARBAGE | 0xFFFFFFFF, 4))
    assert decode_event(r, probes, 0).args["ui"] == 0xFFFFFFFF


def cstring_words(text: bytes) -> tuple[int, ...]:
    """A string as the BPF program copies it into the event's cfg words."""
    data = text[: 8 * event.CFG_WORDS - 1].ljust(8 * event.CFG_WORDS, b"\0")
    return tuple(int.from_bytes(data[i : i + 8], "little") for i in range(0, len(data), 8))


def test_driver_launch_named_by_the_handle_module_get_function_made():
    handles = KernelHandles()
    name = cstring_words(b"_Z6vecAddPKfS0_Pfi")
    r, probes = raw("cuModuleGetFunction", args=(0x7FFC0000, 0x30D0, 0x5000), outs=(0xF001,),
                    cfg=name)
    c = decode_event(r, probes, 0, handles=handles)
    assert c.args == {"hfunc": "0xf001", "hmod": "0x30d0", "name": "_Z6vecAddPKfS0_Pfi"}
    assert c.details == ("hfunc=0xf001 hmod=0x30d0 "
                         "name=vecAdd(float const*, float const*, float*, int)")
    launch = (0xF001, 4, 1, 1, 256, 1, 1, 0, 0, 0, 0)
    r, probes = raw("cuLaunchKernel", args=launch)
    c = decode_event(r, probes, 0, handles=handles)
    assert c.args["func_name"] == "vecAdd(float const*, float const*, float*, int)"
    assert c.details.startswith("f=0xf001 vecAdd(float const*, float const*, float*, int) grid")
    # the same handle value in another process is another handle
    r, probes = raw("cuLaunchKernel", args=launch)
    assert decode_event(r._replace(pid=99), probes, 0, handles=handles).args.get(
        "func_name") is None


def test_unknown_and_failed_handles_say_why():
    handles = KernelHandles()
    r, probes = raw("cuModuleGetFunction", args=(0x7FFC0000, 0x30D0, 0x5000), outs=(0xF002,),
                    cfg=cstring_words(b"vecAdd"), ret=3)
    c = decode_event(r, probes, 0, handles=handles)
    assert c.ret_name == "CUDA_ERROR_NOT_INITIALIZED" and c.args["hfunc"] is None
    assert c.details.startswith("hfunc=- hmod=0x30d0")
    r, probes = raw("cuLaunchKernelEx", args=(0x9000, 0xF002, 0, 0))
    c = decode_event(r, probes, 0, handles=handles)
    assert "func_name" not in c.args
    assert "f=0xf002 (name unknown: not made by a traced call" in c.details


def test_handles_not_read_are_not_learned():
    """A call that succeeded with its out-parameters unread (not something the
    kernel writes today) names no handle, and raises nothing."""
    handles = KernelHandles()
    fn = catalogue.BY_NAME["cuModuleGetFunction"]
    handles.learn(fn, 42, {"hfunc": None, "hmod": "0x30d0", "name": "vecAdd"})
    handles.learn(fn, 42, {"hfunc": "0x0", "hmod": "0x30d0", "name": "vecAdd"})
    assert handles._names == {}


def test_kernel_handles_pass_their_name_to_functions():
    handles = KernelHandles()
    r, probes = raw("cuLibraryGetKernel", args=(0x7FFC0000, 0x11B0, 0x5000), outs=(0x4E10,),
                    cfg=cstring_words(b"_Z5scaleIfEvPT_S0_i"))
    decode_event(r, probes, 0, handles=handles)
    r, probes = raw("cuKernelGetFunction", args=(0x7FFC0008, 0x4E10), outs=(0xF003,))
    c = decode_event(r, probes, 0, handles=handles)
    assert c.args == {"pFunc": "0xf003", "kernel": "0x4e10",
                      "func_name": "void scale<float>(float*, float, int)"}
    for handle in (0xF003, 0x4E10):  # a CUkernel may be launched as a CUfunction
        r, probes = raw("cuLaunchCooperativeKernel", args=(handle, 1, 1, 1, 1, 1, 1, 0, 0, 0))
        c = decode_event(r, probes, 0, handles=handles)
        assert c.args["func_name"] == "void scale<float>(float*, float, int)"


def test_strings_cut_short_by_the_buffer_say_so():
    long_name = b"k" * 300
    r, probes = raw("cuModuleGetFunction", args=(1, 2, 3), outs=(4,), cfg=cstring_words(long_name))
    name = decode_event(r, probes, 0).args["name"]
    assert name == "k" * (8 * event.CFG_WORDS - 1) + "…"
    r, probes = raw("cuModuleLoad", args=(1, 0), outs=(4,), cfg=cstring_words(b""))
    assert decode_event(r, probes, 0).args["fname"] == ""


def test_out_parameters_of_driver_types():
    r, probes = raw("cuDeviceGet", args=(0x7FFC0000, 0), outs=(0xFFFFFFFF,), ret=0)
    assert decode_event(r, probes, 0).args == {"device": -1, "ordinal": 0}
    r, probes = raw("cuMemAllocPitch_v2", args=(0x7FFC0000, 0x7FFC0008, 1000, 10, 4),
                    outs=(0x7F0000400000, 1024))
    assert decode_event(r, probes, 0).args == {
        "dptr": "0x7f0000400000", "pPitch": 1024, "WidthInBytes": 1000, "Height": 10,
        "ElementSizeBytes": 4}
    r, probes = raw("cuDriverGetVersion", args=(0x7FFC0000,), outs=(12020,))
    assert decode_event(r, probes, 0).details == "driverVersion=12020"
    r, probes = raw("cuMemAllocPitch_v2", args=(0x7FFC0000, 0x7FFC0008, 1000, 10, 4),
                    outs=(0x7F0000400000, 1024), ret=2)
    c = decode_event(r, probes, 0)
    assert c.args == {"dptr": None, "pPitch": None, "WidthInBytes": 1000, "Height": 10,
                      "ElementSizeBytes": 4}
    assert c.details.startswith("dptr=- pPitch=- WidthInBytes=1000 B")


def test_runtime_launch_of_a_kernel_handle_named_by_cu_library_get_kernel():
    # CUDA 12+ <<<>>> passes cudaLaunchKernel a cudaKernel_t (a CUkernel), not a
    # host stub: seen on an H200, func == the pKernel cuLibraryGetKernel wrote
    handles = KernelHandles()
    r, probes = raw("cuLibraryGetKernel", args=(0x7FFC0000, 0x30D0, 0x5000), outs=(0xAB00,),
                    cfg=cstring_words(b"_Z6vecAddPKfS0_Pfi"))
    decode_event(r, probes, 0, handles=handles)
    launch = (0xAB00, 4 | (1 << 32), 1, 256 | (1 << 32), 1, 0x7FF0, 0, 0)
    r, probes = raw("cudaLaunchKernel", args=launch)
    c = decode_event(r, probes, 0, symbolize=lambda pid, addr: None, handles=handles)
    assert c.args["func_name"] == "vecAdd(float const*, float const*, float*, int)"
    assert c.details.startswith("func=0xab00 vecAdd(float const*, float const*, float*, int)")
