"""The generated BPF program: settings as -D cflags, probe configs from the catalogue."""

from __future__ import annotations

from cudaprobe import bpfprog, catalogue
from cudaprobe.decode import Probe


def probes():
    names = ["cudaMalloc", "cudaLaunchKernel", "cudaLaunchKernelExC", "cudaEventElapsedTime"]
    return [Probe(i, n, catalogue.BY_NAME[n]) for i, n in enumerate(names)]


def test_probe_config_from_catalogue():
    p = probes()
    # (nstack, cfg_slot, out8, out4, str_slot, nargs, nouts, record size)
    assert bpfprog.probe_config(p[0]) == (0, -1, 0b1, 0, -1, 2, 1, 88)  # devPtr: 8-byte out
    assert bpfprog.probe_config(p[1]) == (2, -1, 0, 0, -1, 8, 0, 128)  # sharedMem, stream: stack
    assert bpfprog.probe_config(p[2]) == (0, 0, 0, 0, -1, 3, 0, 320)  # config in slot 0: whole
    assert bpfprog.probe_config(p[3]) == (0, -1, 0, 0b1, -1, 3, 1, 96)  # float out-parameter

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
    assert "1 cudaLaunchKernel: {2, -1, 0, 0, -1, 8, 0, 128}" in text


def test_attach_mode_override(monkeypatch):
    monkeypatch.setenv("CUDAPROBE_ATTACH", "perf")
    assert bpfprog.Settings().attach == "perf"
    monkeypatch.setenv("CUDAPROBE_ATTACH", "multi")
    assert bpfprog.Settings().attach == "multi"
