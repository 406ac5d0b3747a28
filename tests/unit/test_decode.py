"""Decoding raw events into calls: values, names, details, JSON keys."""

from __future__ import annotations

import json
import struct

import pytest

from cudaprobe.decode.calls import decode_event, humanize_bytes
from cudaprobe.decode.schema import JSONL_KEYS

from .eventbuild import make_event, probes_for


def raw(fn_name: str, args=(), outs=(), cfg=(), ret=0, func_id=0):
    """An event as the kernel writes it (eventbuild.make_event), and its probe."""
    return make_event(args, outs, cfg, ret=ret, func_id=func_id), probes_for(fn_name)


def test_memcpy_decoded():
    r, probes = raw("cudaMemcpy", args=(0x7F0000000000, 0x55D000001010, 4 << 20, 1), ret=0)
    c = decode_event(r, probes, t0_ns=1_000_000)
    assert c.time_ms == 1.0 and c.duration_ns == 1500 and c.pid == 42 and c.tid == 43
    assert c.process == "app" and c.event == "cudaMemcpy" and c.category == "transfer"
    assert c.ret == 0 and c.ret_name == "cudaSuccess"
    assert c.args == {"dst": "0x7f0000000000", "src": "0x55d000001010", "count": 4 << 20,
                      "kind": "HostToDevice"}
    assert c.details == "dst=0x7f0000000000 src=0x55d000001010 count=4.0 MiB kind=HostToDevice"
    assert tuple(c.to_dict()) == JSONL_KEYS


@pytest.mark.parametrize("code,name", [(0, "cudaSuccess"), (35, "cudaErrorInsufficientDriver"),
                                       (100, "cudaErrorNoDevice"),
                                       (700, "cudaErrorIllegalAddress"),
                                       (12345, "cudaError(12345)")])
def test_sparse_error_names(code, name):
    r, probes = raw("cudaFree", args=(0x1000,), ret=code)
    assert decode_event(r, probes, 0).ret_name == name


@pytest.mark.parametrize("kind,name", [(0, "HostToHost"), (2, "DeviceToHost"),
                                       (3, "DeviceToDevice"), (4, "Default"), (9, "9")])
def test_memcpy_kinds(kind, name):
    r, probes = raw("cudaMemcpy", args=(1, 2, 3, kind))
    assert decode_event(r, probes, 0).args["kind"] == name


def test_launch_kernel_dim3_and_stack_args():
    grid_xy, grid_z = 4 | (2 << 32), 1
    block_xy, block_z = 256 | (1 << 32), 1
    r, probes = raw("cudaLaunchKernel",
                    args=(0x401000, grid_xy, grid_z, block_xy, block_z, 0x7FF0, 1024, 0x7000))
    c = decode_event(r, probes, 0, symbolize=lambda pid, addr: "vecAdd(float*)")
    assert c.args == {"func": "0x401000", "func_name": "vecAdd(float*)", "gridDim": [4, 2, 1],
                      "blockDim": [256, 1, 1], "args": "0x7ff0", "sharedMem": 1024,
                      "stream": "0x7000"}
    assert "gridDim=(4,2,1) blockDim=(256,1,1)" in c.details
    assert "func=0x401000 vecAdd(float*)" in c.details


def test_launch_config_read_at_entry():
    cfg = (8 | (4 << 32), 2 | (128 << 32), 1 | (1 << 32), 4096, 0xABC)
    r, probes = raw("cudaLaunchKernelExC", args=(0x9000, 0x401000, 0x7FF0), cfg=cfg)
    c = decode_event(r, probes, 0)
    assert c.args["gridDim"] == [8, 4, 2] and c.args["blockDim"] == [128, 1, 1]
    assert c.args["dynamicSmemBytes"] == 4096 and c.args["stream"] == "0xabc"
    assert c.args["config"] == "0x9000"


def test_out_parameters():
    r, probes = raw("cudaMalloc", args=(0x7FFC0000, 1 << 20), outs=(0x7F1200000000,))
    assert decode_event(r, probes, 0).args == {"devPtr": "0x7f1200000000", "size": 1 << 20}
    r, probes = raw("cudaGetDeviceCount", args=(0x7FFC0000,), outs=(0xFFFFFFFF,))
    assert decode_event(r, probes, 0).args == {"count": -1}
    bits = struct.unpack("<I", struct.pack("<f", 2.5))[0]
    r, probes = raw("cudaEventElapsedTime", args=(0x7FFC0000, 0xE1, 0xE2), outs=(bits,))
    assert decode_event(r, probes, 0).args == {"ms": 2.5, "start": "0xe1", "end": "0xe2"}
    r, probes = raw("cudaMemGetInfo", args=(1, 2), outs=(3 << 30, 80 << 30))
    c = decode_event(r, probes, 0)
    assert c.args == {"free": 3 << 30, "total": 80 << 30}
    assert c.details == "free=3.0 GiB total=80.0 GiB"


def test_out_parameters_of_failed_calls_were_not_read():
    """As strace leaves a failed syscall's out-parameters undecoded: null, `-`."""
    r, probes = raw("cudaMalloc", args=(0x7FFC0000, 64), outs=(0x677F9A5F,), ret=35)
    assert r.outs == ()
    c = decode_event(r, probes, 0)
    assert c.args == {"devPtr": None, "size": 64}
    assert c.details == "devPtr=- size=64 B"
    assert json.dumps(c.to_dict()["args"]) == '{"devPtr": null, "size": 64}'
    r, probes = raw("cudaMemGetInfo", args=(1, 2), outs=(3, 4), ret=35)
    c = decode_event(r, probes, 0)
    assert c.args == {"free": None, "total": None} and c.details == "free=- total=-"
    r, probes = raw("cudaEventElapsedTime", args=(0x7FFC0000, 0xE1, 0xE2), ret=600)
    c = decode_event(r, probes, 0)
    assert c.args == {"ms": None, "start": "0xe1", "end": "0xe2"}
    assert c.details == "ms=- start=0xe1 end=0xe2"


def test_in_flight_calls_out_parameters_were_not_read():
    r, probes = raw("cudaStreamCreate", args=(0x7FFC0000,), outs=(0x5000,))
    c = decode_event(r._replace(outs=()), probes, 0, in_flight=True)  # as PairingEntries.in_flight
    assert c.args == {"pStream": None}
    assert c.details == "pStream=- (still running when the trace ended)"


def test_signed_and_flag_arguments():
    r, probes = raw("cudaMemset", args=(0x1000, 0xFFFFFFFF, 16))
    assert decode_event(r, probes, 0).args["value"] == -1
    r, probes = raw("cudaHostAlloc", args=(0x1, 64, 0x5), outs=(0x2000,))
    c = decode_event(r, probes, 0)
    assert c.args["flags"] == 5 and "flags=0x5" in c.details


def test_in_flight_calls_have_no_result():
    r, probes = raw("cudaDeviceSynchronize")
    c = decode_event(r, probes, 0, in_flight=True)
    assert c.in_flight and c.duration_ns is None and c.ret is None and c.ret_name is None
    assert "still running" in c.details


def test_unknown_probe_id_is_a_value_error():
    r, probes = raw("cudaFree", func_id=7)
    with pytest.raises(ValueError):
        decode_event(r, probes, 0)


def test_humanize():
    assert humanize_bytes(0) == "0 B" and humanize_bytes(1023) == "1023 B"
    assert humanize_bytes(1536) == "1.5 KiB" and humanize_bytes(3 << 30) == "3.0 GiB"
