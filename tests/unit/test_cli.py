"""CLI parsing and errors without root: help, list, --dump-bpf, bad input."""

from __future__ import annotations

import subprocess

from ..conftest import HANG_S, as_not_root, cudaprobe_cmd, libcudart_path


def run(*args):
    return subprocess.run(cudaprobe_cmd(*args), capture_output=True, text=True, timeout=HANG_S)


def test_help_has_examples():
    p = run("trace", "--help")
    assert p.returncode == 0
    assert "Examples:" in p.stdout and "cudaprobe trace -- ./my_app" in p.stdout


def test_list_filters_by_category():
    p = run("list", "-e", "sync")
    assert p.returncode == 0
    assert "cudaStreamSynchronize" in p.stdout and "cudaMalloc " not in p.stdout


def test_unknown_event_suggests_close_names():
    p = run("list", "-e", "cudaMallc")
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert p.stderr.count("\n") == 1 and "cudaMalloc" in p.stderr


def test_dump_bpf_without_root():
    lib = libcudart_path()
    args = ["trace", "--dump-bpf", "-e", "cudaMalloc"] + (["--lib", str(lib)] if lib else [])
    p = subprocess.run(as_not_root(cudaprobe_cmd(*args)), capture_output=True, text=True,
                       timeout=HANG_S)
    if lib is None:
        assert p.returncode == 2
        return
    assert p.returncode == 0, p.stderr
    assert "cudaMalloc: {0, -1, 1, 0, -1, 2, 1, 88, -1, -1, 0, 0, 0}" in p.stdout


def test_not_root_is_one_line():
    p = subprocess.run(as_not_root(cudaprobe_cmd("trace", "-d", "1")),
                       capture_output=True, text=True, timeout=HANG_S)
    assert p.returncode == 2
    assert p.stderr == ("cudaprobe: tracing needs root (CAP_BPF and CAP_PERFMON) "
                        "(run it with sudo)\n")


def test_bad_format_and_missing_lib():
    p = run("trace", "--format", "xml")
    assert p.returncode == 2 and "xml" in p.stderr
    p = run("trace", "--lib", "/nonexistent/libcudart.so")
    assert p.returncode == 2 and "Traceback" not in p.stderr


def test_gpu_time_needs_a_process():
    for command in ("trace", "stats"):  # every process: none to load the library into
        p = run(command, "--gpu-time", "-d", "1")
        assert p.returncode == 2 and p.stderr.count("\n") == 1, p.stderr
        assert p.stderr == "cudaprobe: --gpu-time goes with -- COMMAND, --pid or --comm\n"
    p = run("trace", "--help")
    assert "--gpu-time" in p.stdout and "trace --gpu-time -o calls.jsonl --" in p.stdout
    assert "trace --gpu-time --pid 31337" in p.stdout
