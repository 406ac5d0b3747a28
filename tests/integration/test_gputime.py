"""--gpu-time on a machine without a GPU (CI, this one): the library is
injected into a real program through the real libcuda (Debian's 535), CUPTI
refuses to record without a device, and cudaprobe says in one line that no
GPU activity was recorded; the program's output and exit status are those of
an untraced run, and the trace is as without --gpu-time. A program that
names its own CUDA_INJECTION64_PATH keeps it. The GPU side is checked on
the GPU machine: scripts/gpu/check-gputime.sh."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from ..conftest import build_workload
from .conftest import run_cudaprobe, trace_jsonl
from .test_serve_prometheus import free_port


def program(libcuda: Path) -> Path:
    d = str(libcuda.parent)
    return build_workload("gputime_program.c", extra=[f"-L{d}", "-lcuda", f"-Wl,-rpath,{d}"])


def untraced(exe: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(exe)], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **(env or {})})


HELD = "cudaprobe: --gpu-time: the rows are written when the command has exited"


def gpu_lines(stderr: str) -> list[str]:
    """What --gpu-time said, less the line that says the rows are held."""
    return [line for line in stderr.splitlines()
            if ("gpu-time" in line or "GPU time" in line) and not line.startswith(HELD)]


def test_no_gpu_said_in_one_line_and_the_program_unharmed(tmp_path, libcuda):
    exe = program(libcuda)
    alone = untraced(exe)
    assert alone.returncode == 7 and alone.stdout == "cuInit 100 cuDeviceGet 3\ninjection -\n"
    tmp = tmp_path / "tmp"  # where cudaprobe makes the library's directory (TMPDIR)
    tmp.mkdir()
    calls, summary, proc = trace_jsonl(tmp_path, "--gpu-time", "--lib", str(libcuda),
                                       "-e", "cuInit,cuDeviceGet", command=[str(exe)],
                                       env={**os.environ, "TMPDIR": str(tmp)})
    assert proc.returncode == 7, proc.stderr
    assert proc.stdout == alone.stdout
    assert "Traceback" not in proc.stderr
    # the library ran in the program (cuInit loaded it) and said why CUPTI gave nothing
    (line,) = gpu_lines(proc.stderr)
    assert line.startswith("cudaprobe: --gpu-time: no GPU activity was recorded: "), line
    assert "wrote nothing" not in line
    assert HELD in proc.stderr
    assert [(c["event"], c["ret"]) for c in calls] == [("cuInit", 100), ("cuDeviceGet", 3)]
    assert all("gpu" not in c for c in calls)
    assert summary["calls"] == 2
    assert list(tmp.iterdir()) == []  # the library's directory is gone with the trace


def test_program_own_injection_library_kept(tmp_path, libcuda):
    exe = program(libcuda)
    own = tmp_path / "own.so"  # not loadable: the driver ignores it, as untraced
    own.write_text("not a library\n")
    env = {**os.environ, "CUDA_INJECTION64_PATH": str(own)}
    alone = untraced(exe, env)
    calls, _, proc = trace_jsonl(tmp_path, "--gpu-time", "--lib", str(libcuda),
                                 "-e", "cuInit", command=[str(exe)], env=env)
    assert proc.returncode == alone.returncode == 7, proc.stderr
    assert proc.stdout == alone.stdout and f"injection {own}\n" in proc.stdout
    assert HELD not in proc.stderr  # no GPU time: the rows go out as they come
    (line,) = gpu_lines(proc.stderr)
    assert line == (f"cudaprobe: no GPU time: the command's environment sets "
                    f"CUDA_INJECTION64_PATH={own} (one CUDA injection library per process): "
                    "kept, no GPU time")
    assert [c["event"] for c in calls] == ["cuInit"]


def test_stats_gpu_time_without_gpu(tmp_path, libcuda):
    exe = program(libcuda)
    out = tmp_path / "stats.json"
    proc = run_cudaprobe("stats", "--gpu-time", "--json", "-o", str(out), "--lib", str(libcuda),
                         "-e", "cuInit,cuDeviceGet", "--", str(exe))
    assert proc.returncode == 7, proc.stderr
    assert proc.stdout.startswith("cuInit 100 cuDeviceGet 3\ninjection -\n")  # then the table
    (line,) = gpu_lines(proc.stderr)
    assert "no GPU activity was recorded" in line
    report = json.loads(out.read_text())
    assert "gpu" not in report and report["calls"] == 2


def test_serve_gpu_time_without_gpu(libcuda):
    exe = program(libcuda)
    proc = run_cudaprobe("serve", "--prometheus", f"127.0.0.1:{free_port()}", "--gpu-time",
                         "--lib", str(libcuda), "-e", "cuInit", "--", str(exe))
    assert proc.returncode == 7, proc.stderr
    assert proc.stdout == "cuInit 100 cuDeviceGet 3\ninjection -\n"
    (line,) = gpu_lines(proc.stderr)
    assert line.startswith("cudaprobe: --gpu-time: no GPU activity was recorded: "), line
