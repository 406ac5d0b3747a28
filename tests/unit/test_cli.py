"""CLI parsing and errors without root: help, list, --dump-bpf, bad input."""

from __future__ import annotations

import os
import subprocess

import pytest

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
    assert "cudaMalloc: {0, -1, 1, 0, -1, 2, 1, 88, -1, -1, 0, 0, 0, 0}" in p.stdout


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


def test_options_end_at_the_command_name():
    """Words after the command's name are its own, as strace reads them:
    `trace python3 -c ...` runs python3 -c, `-d 2` after the name is the
    command's, and `-e --` takes `--` as -e's value."""
    from cudaprobe.commands.trace import trace_command  # noqa: PLC0415

    def parsed(*args: str) -> dict:
        return trace_command.make_context("trace", list(args)).params

    assert parsed("python3", "-c", "print(1)")["command"] == ("python3", "-c", "print(1)")
    assert parsed("python3", "-c", "print(1)")["cmd"] is None
    params = parsed("-d", "1", "./loop", "-d", "2", "0")
    assert params["duration"] == 1 and params["command"] == ("./loop", "-d", "2", "0")
    assert parsed("ls", "-p", "/tmp")["pids"] == ()
    assert parsed("-o", "x.jsonl", "--", "ls", "--", "-o")["command"] == ("ls", "--", "-o")
    assert parsed("-e", "--")["events"] == ("--",)


def test_a_command_with_options_runs_them_not_cudaprobe():
    p = run("trace", "--dump-bpf", "python3", "-c", "print(1)")
    assert p.returncode in (0, 2), p.stderr  # 2: no libcudart on this machine
    assert "both name the command" not in p.stderr


@pytest.mark.parametrize("args", [["--help"], ["--version"], ["trace", "--help"],
                                  ["list"], ["completion", "bash"], ["trace", "--dump-bpf"]])
@pytest.mark.parametrize("stdout", ["full", "closed"])
def test_output_that_cannot_be_written_is_said(args, stdout):
    """Help, the version, list, completion, --dump-bpf: to a full disk or a
    closed stdout, one line and exit 1, never a traceback nor a quiet 0."""
    if "--dump-bpf" in args and libcudart_path() is not None:
        args = [*args, "--lib", str(libcudart_path())]
    with open("/dev/full", "w") as full:
        p = subprocess.run(cudaprobe_cmd(*args), stdout=full if stdout == "full" else None,
                           stderr=subprocess.PIPE, text=True, timeout=HANG_S,
                           preexec_fn=None if stdout == "full" else (lambda: os.close(1)))
    if "--dump-bpf" in args and libcudart_path() is None:
        assert p.returncode == 2  # no library to dump for: said first
        return
    why = "No space left on device" if stdout == "full" else "stdout is closed"
    assert p.returncode == 1 and p.stderr.count("\n") == 1, p.stderr
    assert p.stderr.startswith("cudaprobe: writing") and why in p.stderr
