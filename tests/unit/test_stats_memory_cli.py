"""stats and memory on the command line, without root: help, --dump-bpf, errors."""

from __future__ import annotations

import subprocess

import pytest

from ..conftest import HANG_S, as_not_root, cudaprobe_cmd, libcudart_path


def run_not_root(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(as_not_root(cudaprobe_cmd(*args)), capture_output=True, text=True,
                          timeout=HANG_S)


@pytest.mark.parametrize("command,example", [("stats", "cudaprobe stats --compare api.json"),
                                             ("memory", "cudaprobe memory --stacks")])
def test_help_has_examples(command, example):
    p = subprocess.run(cudaprobe_cmd(command, "--help"), capture_output=True, text=True,
                       timeout=HANG_S)
    assert p.returncode == 0 and "Examples:" in p.stdout and example in p.stdout
    assert "--pid" in p.stdout and "--dump-bpf" in p.stdout


def test_dump_bpf_shows_the_mode():
    lib = libcudart_path()
    if lib is None:
        pytest.skip("no libcudart")
    p = run_not_root("stats", "--dump-bpf", "-e", "cudaMalloc", "--lib", str(lib))
    assert p.returncode == 0, p.stderr
    assert "then bpf/stats.bpf.c" in p.stdout and "#define CP_NR_PROBES 1" in p.stdout
    p = run_not_root("memory", "--dump-bpf", "--stacks", "--api", "runtime", "--lib", str(lib))
    assert p.returncode == 0, p.stderr
    assert "#define CP_STACKS 1" in p.stdout and "then bpf/trace.bpf.c" in p.stdout
    assert "cudaMallocManaged" in p.stdout and "cudaMemcpy" not in p.stdout


@pytest.mark.parametrize("command", ["stats", "memory"])
def test_not_root_is_one_line(command):
    p = run_not_root(command, "-d", "1")
    assert p.returncode == 2
    assert p.stderr == ("cudaprobe: tracing needs root (CAP_BPF and CAP_PERFMON) "
                        "(run it with sudo)\n")


def test_command_and_pid_do_not_mix():
    p = run_not_root("memory", "--pid", "1", "--", "true")
    assert p.returncode == 2 and "leave out --pid" in p.stderr and "Traceback" not in p.stderr
