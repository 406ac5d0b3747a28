"""What `cudaprobe memory` prints and writes, rendered to StringIO from recorded calls."""

from __future__ import annotations

import io
import json

from rich.console import Console

from cudaprobe.analysis.memtrack import MemCall, MemoryAccounting
from cudaprobe.output.memory_view import process_dict, render_exit, render_summary, to_dict

TORCH_SITE = ("c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc("
              "signed char, unsigned long, CUstream_st*)+0x1a4 (libc10_cuda.so)",
              "at::native::empty_cuda(c10::ArrayRef<long>, std::optional<c10::ScalarType>)"
              "+0x2b (libtorch_cuda.so)")


def call(event, t, ret=0, site=TORCH_SITE, **args):
    return MemCall(t, 10, 7, 7, "py[th]on", event, ret, args, site)


def accounting() -> MemoryAccounting:
    acct = MemoryAccounting(hold_ns=0)
    acct.feed([call("cudaMalloc", 1_000_000, devPtr="0x7f0000000000", size=3 << 20),
               call("cudaMalloc", 2_000_000, devPtr="0x7f0000400000", size=1 << 20,
                    site=("libcublas.so.13+0x5b45ee",)),
               call("cudaMallocManaged", 2_500_000, devPtr="0x7f0000800000", size=4096, flags=1),
               call("cudaDeviceReset", 3_000_000),
               call("cudaMallocHost", 4_000_000, ptr="0x1000", size=4, site=()),
               call("cudaMalloc", 5_000_000, ret=2, devPtr="0x0", size=1 << 40)])
    acct.process_exited(7, 9_000_000)
    return acct


def ms(ns: int) -> float:
    return round(ns / 1e6, 3)


def test_leak_report_keeps_offsets_and_modules_of_long_cpp_names():
    out = io.StringIO()
    render_exit(accounting().processes[7], Console(file=out, width=200), ms)
    text = out.getvalue()
    assert "pid 7 (py[th]on) exited: peak 4.0 MiB, 4 allocations, 0 frees" in text
    assert "cudaDeviceReset at 3.000 ms freed 3 allocations (4.0 MiB) without a free call" in text
    assert "1 allocation never freed, 4 B; 3 freed only implicitly" in text
    lines = text.splitlines()
    [first] = [line for line in lines if "3.0 MiB" in line and "at the peak" not in line]
    assert any(line.startswith("  at the peak: 3.0 MiB from ") for line in lines)
    assert "DeviceCachingAllocator::malloc+0x1a4 (libc10_cuda.so)" in first
    assert "cudaDeviceReset" in first and "cudaMalloc" in first
    assert any(TORCH_SITE[1] in line for line in lines)  # fits: kept whole
    assert any("libcublas.so.13+0x5b45ee" in line for line in lines)
    assert any("(unknown)" in line and "process exit" in line for line in lines)


def test_summary_counts_and_lost_events():
    acct = accounting()
    out = io.StringIO()
    render_summary(list(acct.processes.values()), {"ringbuf_full": 3}, 1, 2.5,
                   Console(file=out, width=300))
    text = out.getvalue()
    assert "4 allocations, 0 frees, 1 failed allocations" in text
    assert "3 lost (ringbuf_full=3: the accounting misses those calls)" in text


def test_json_document():
    acct = accounting()
    doc = json.loads(json.dumps(to_dict(list(acct.processes.values()), {"ringbuf_full": 0}, 0,
                                        1.0, ["/lib/libcudart.so.13"], ms)))
    assert doc["cudaprobe"] == "memory" and doc["schema"] == 1 and doc["lost_total"] == 0
    [p] = doc["processes"]
    assert p["exited"] and p["allocations"] == 4 and p["failed_allocations"] == 1
    assert p["implicit_frees"] == [{"by": "cudaDeviceReset", "at_ms": 3.0, "allocations": 3,
                                    "bytes": (4 << 20) + 4096}]
    assert [(g["ended_by"], g["bytes"], g["site"][:1]) for g in p["leaks"]] == [
        ("cudaDeviceReset", 3 << 20, [TORCH_SITE[0]]),
        ("cudaDeviceReset", 1 << 20, ["libcublas.so.13+0x5b45ee"]),
        ("cudaDeviceReset", 4096, [TORCH_SITE[0]]),
        ("process exit", 4, [])]
    assert p["leaks"][0]["allocations"] == [{"ptr": "0x7f0000000000", "size": 3 << 20,
                                             "at_ms": 1.0, "tid": 7}]
    assert p["peak_bytes"]["total"] == (4 << 20) + 4096 and p["peak_bytes"]["at_ms"] == 2.5
    assert p["timeline"][-1] == [9.0, 0] and p["live"] == []
    assert set(process_dict(acct.processes[7], ms)) == set(p)


def test_vmm_and_registered_columns_only_once_used_and_what_kept_a_leak():
    plain = io.StringIO()
    render_summary(list(accounting().processes.values()), {}, 0, 1.0,
                   Console(file=plain, width=300))
    header = next(line for line in plain.getvalue().splitlines() if "PID" in line)
    assert "ASYNC-POOL" in header and "VMM" not in header and "REGISTERED" not in header
    acct = MemoryAccounting(hold_ns=0)
    acct.feed([call("cuMemCreate", 1_000_000, handle="0x55aa00", size=20 << 20, prop="0x1",
                    flags=0),
               call("cuMemMap", 1_100_000, ptr="0x7f2000000000", size=20 << 20, offset=0,
                    handle="0x55aa00", flags=0),
               call("cudaHostRegister", 1_200_000, ptr="0x560000", size=4096, flags=0)])
    acct.process_exited(7, 9_000_000)
    out = io.StringIO()
    p = acct.processes[7]
    render_exit(p, Console(file=out, width=300), ms)
    render_summary([p], {}, 0, 1.0, Console(file=out, width=300))
    text = out.getvalue()
    assert "cuMemCreate (not released, mapped at 1 address)" in text
    header = next(line for line in text.splitlines() if "PID" in line)
    assert "VMM" in header and "HOST-REGISTERED" in header
    [vmm, registered] = process_dict(p, ms)["leaks"]
    assert (vmm["kind"], vmm["outstanding"], vmm["bytes"]) == ("vmm", "not released, mapped "
                                                                "at 1 address", 20 << 20)
    assert vmm["allocations"][0]["mappings"] == [["0x7f2000000000", 20 << 20]]
    assert vmm["allocations"][0]["released"] is False
    assert (registered["kind"], registered["outstanding"]) == ("host-registered", None)
    assert "mappings" not in registered["allocations"][0]
