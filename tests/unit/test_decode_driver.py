"""Decoding driver-API events: versioned names, CUresult names, launch shapes."""

from __future__ import annotations

from cudaprobe import catalogue, event
from cudaprobe.decode import Probe, decode_event

GARBAGE = 0xDEAD_BEEF_0000_0000  # upper half of a stack word holding an unsigned int


def raw(symbol: str, args=(), outs=(), cfg=(), ret=0):
    a = list(args) + [0] * (event.MAX_SLOTS - len(args))
    o = list(outs) + [0] * (event.MAX_OUTS - len(outs))
    c = list(cfg) + [0] * (event.CFG_WORDS - len(cfg))
    data = event.EVENT_STRUCT.pack(5_000, 700, 42, 43, 0, ret, *a, *o, *c, b"drv")
    fn = next(f for f in catalogue.DRIVER_FUNCTIONS if symbol in f.symbols)
    return event.unpack_event(data), [Probe(0, symbol, fn)]


def test_versioned_symbol_is_the_event_and_results_are_curesult_names():
    r, probes = raw("cuMemAlloc_v2", args=(0x7FFC1000, 1 << 20), outs=(0x7F0000200000,), ret=3)
    c = decode_event(r, probes, 0)
    assert c.event == "cuMemAlloc_v2" and c.api == "driver" and c.category == "memory"
    assert c.ret_name == "CUDA_ERROR_NOT_INITIALIZED"
    assert c.args == {"dptr": "0x7f0000200000", "bytesize": 1 << 20}
    assert c.details == "dptr=0x7f0000200000 bytesize=1.0 MiB"
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
