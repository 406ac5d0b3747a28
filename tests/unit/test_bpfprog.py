"""The generated BPF program: settings as -D cflags, probe configs from the catalogue."""

from __future__ import annotations

import re

from cudaprobe.catalogue import functions as catalogue
from cudaprobe.probe import bpfprog
from cudaprobe.probe.plan import Probe


def probes():
    names = ["cudaMalloc", "cudaLaunchKernel", "cudaLaunchKernelExC", "cudaEventElapsedTime"]
    return [Probe(i, n, catalogue.BY_NAME[n]) for i, n in enumerate(names)]


def test_probe_config_from_catalogue():
    p = probes()
    # (nstack, cfg_slot, out8, out4, str_slot, nargs, nouts, record size, func_slot,
    #  handle_slot, cfg_off, cfg_len); devPtr: an 8-byte out-parameter
    assert bpfprog.probe_config(p[0]) == (0, -1, 0b1, 0, -1, 2, 1, 88, -1, -1, 0, 0)
    # sharedMem, stream on the stack; the host stub (or handle) in slot 0
    assert bpfprog.probe_config(p[1]) == (2, -1, 0, 0, -1, 8, 0, 128, 0, 0, 0, 0)
    # config in slot 0: its first 40 bytes copied, the whole event sent; the host stub
    # in slot 1
    assert bpfprog.probe_config(p[2]) == (0, 0, 0, 0, -1, 3, 0, 320, 1, 1, 0, 40)
    assert bpfprog.probe_config(p[3]) == (0, -1, 0, 0b1, -1, 3, 1, 96, -1, -1, 0, 0)  # float out
    # a driver launch: its CUfunction in slot 0, no host stub
    launch = Probe(4, "cuLaunchKernel", catalogue.BY_NAME["cuLaunchKernel"])
    assert bpfprog.probe_config(launch)[8:10] == (-1, 0)
    # a 3D copy: the window of its parameters from the destination on (structs.py)
    copy3d = Probe(5, "cudaMemcpy3D", catalogue.BY_NAME["cudaMemcpy3D"])
    assert bpfprog.probe_config(copy3d)[1] == 0 and bpfprog.probe_config(copy3d)[10:] == (96, 64)

def test_multi_mode_needs_no_per_probe_programs():
    d = bpfprog.defines(probes(), bpfprog.Settings(attach="multi"))
    assert "CP_PROBES" not in d and "CP_FILTER_PID" not in d and "CP_ERRORS_ONLY" not in d
    assert d["CP_RINGBUF_PAGES"] == "4096"


def test_perf_mode_and_filters_as_cflags():
    s = bpfprog.Settings(attach="perf", filter_pid=True, errors_only=True, ringbuf_pages=64)
    flags = bpfprog.cflags(probes(), s)
    assert flags[0].startswith("-I") and flags[0].endswith("bpf")
    assert "-DCP_PROBES=CP_PROBE(0) CP_PROBE(1) CP_PROBE(2) CP_PROBE(3)" in flags
    assert "-DCP_FILTER_PID=1" in flags and "-DCP_ERRORS_ONLY=1" in flags
    assert "-DCP_RINGBUF_PAGES=64" in flags


def test_render_is_the_compiled_program():
    text = bpfprog.render(probes(), bpfprog.Settings(attach="multi", filter_pid=True))
    assert "#define CP_FILTER_PID 1" in text
    assert "struct cp_event {" in text  # header inlined
    assert "int cp_enter(struct pt_regs *ctx)" in text
    assert "1 cudaLaunchKernel: {2, -1, 0, 0, -1, 8, 0, 128, 0, 0, 0, 0}" in text


def test_attach_mode_override(monkeypatch):
    monkeypatch.setenv("CUDAPROBE_ATTACH", "perf")
    assert bpfprog.Settings().attach == "perf"
    monkeypatch.setenv("CUDAPROBE_ATTACH", "multi")
    assert bpfprog.Settings().attach == "multi"


def test_pairing_slots_fit_their_memory_budget(monkeypatch):
    monkeypatch.delenv("CUDAPROBE_PAIR_THREADS", raising=False)
    # trace: 320-byte entries; 4 probes * 64 slots is 80 KiB
    d = bpfprog.defines(probes(), bpfprog.Settings(attach="multi"))
    assert (d["CP_PAIR_THREADS"], d["CP_NR_PROBES"]) == ("64", "4")
    # 1000 probes: 64 slots would be 20 MB, so 16 slots (5 MB), a power of 2
    assert bpfprog.pair_threads(1000, 320) == 16
    assert 16 * 1000 * 320 <= bpfprog.PAIR_BYTES < 32 * 1000 * 320
    assert bpfprog.pair_threads(1000, bpfprog.STAMP_SIZE) == 64  # stats: 24-byte stamps
    assert bpfprog.pair_threads(10**6, 320) == 1  # never none: the hash takes the rest


def test_pairing_slots_override(monkeypatch):
    monkeypatch.setenv("CUDAPROBE_PAIR_THREADS", "1")
    assert bpfprog.pair_threads(4, 320) == 1
    for bad in ("3", "0", "128", "x", "-1"):  # not a power of 2 up to 64: the default
        monkeypatch.setenv("CUDAPROBE_PAIR_THREADS", bad)
        assert bpfprog.pair_threads(4, 320) == 64


def test_the_c_takes_every_number_from_defines():
    """bpfprog.Settings holds the defaults: the C has none, it stops at #error
    for each number it is not given, and defines() gives them all, in any mode."""
    src = (bpfprog.bpf_dir() / bpfprog.SOURCE_NAME).read_text()
    needed = set(re.findall(r"^#ifndef (CP_\w+)\n#error", src, re.M))
    assert {"CP_RINGBUF_PAGES", "CP_NR_PROBES", "CP_MAX_STACKS"} <= needed
    assert not [n for n in needed if re.search(rf"^#define {n}\b", src, re.M)]
    for settings in (bpfprog.Settings(attach="multi"),
                     bpfprog.Settings(attach="perf", stats=True, filter_pid=True)):
        assert needed <= set(bpfprog.defines(probes(), settings))
