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
import time
import urllib.request
from pathlib import Path

import pytest

from .. import chrome_check
from ..conftest import (
    CUDA_HOME,
    HANG_S,
    REPO,
    WORKLOAD_BIN,
    WORKLOADS,
    build_once,
    build_workload,
    cudaprobe_cmd,
)
from .conftest import run_cudaprobe, trace_jsonl
from .memstub import build_stub_runtime
from .test_serve_prometheus import free_port


def program(libcuda: Path) -> Path:
    d = str(libcuda.parent)
    return build_workload("gputime_program.c", extra=[f"-L{d}", "-lcuda", f"-Wl,-rpath,{d}"])


def untraced(exe: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(exe)], capture_output=True, text=True, timeout=HANG_S,
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


def kernel_counts(address: str) -> dict[str, float]:
    """cudaprobe_gpu_kernel_duration_seconds_count by kernel, as scraped."""
    counts = scrape(address, "_count").get("cudaprobe_gpu_kernel_duration_seconds", {})
    return {dict(labels)["kernel"]: n for labels, n in counts.items()}


def test_serve_counts_a_running_programs_gpu_time_before_it_exits(tmp_path, libcuda, fake_cupti):
    """CUPTI's own periodic flush hands back full buffers only, one per thread: a
    program that ran a few kernels and then went on without the GPU would have
    them counted at its exit. The library (loaded by the real libcuda at cuInit,
    with CUPTI faked: its records come at a flush only) has CUPTI hand back every
    buffer of complete records each half second: serve counts the kernel while
    the program still runs."""
    exe = program(libcuda)
    hold = tmp_path / "hold"
    address = f"127.0.0.1:{free_port()}"
    serve = subprocess.Popen(
        cudaprobe_cmd("serve", "--prometheus", address, "--gpu-time", "--lib", str(libcuda),
                      "-e", "cuInit", "--", str(exe), str(hold)),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "CUDAPROBE_CUPTI": str(fake_cupti)})
    try:
        assert serve.stdout.readline() == "cuInit 100 cuDeviceGet 3\n"  # the library is in
        deadline = time.monotonic() + HANG_S
        counts: dict[str, float] = {}
        while not counts and time.monotonic() < deadline and serve.poll() is None:
            counts = kernel_counts(address)
            time.sleep(0.1)
        assert counts == {"fake_attached_kernel": 1}
        assert serve.poll() is None  # the program holds: no exit flushed it
    finally:
        hold.touch()
    assert serve.wait(timeout=HANG_S) == 7, serve.stderr.read()
    assert serve.stdout.read() == "injection -\n"


def test_a_child_forked_while_the_library_flushes_exits(tmp_path, libcuda, fake_cupti):
    """The library's thread flushes CUPTI each half second under a lock; a fork
    while it held it would leave the lock held for ever in the child, whose
    exit (the library's atexit flush) would then hang. With each flush made to
    take 200 ms, 20 forks 50 ms apart fall in one: every child exits, and the
    program's output and status are its own."""
    exe = program(libcuda)
    proc = run_cudaprobe("trace", "--gpu-time", "-o", str(tmp_path / "calls.jsonl"), "--lib",
                         str(libcuda), "-e", "cuInit", "--", str(exe), "fork", "20",
                         env={**os.environ, "CUDAPROBE_CUPTI": str(fake_cupti),
                              "FAKE_CUPTI_FLUSH_MS": "200"})
    assert proc.returncode == 7, proc.stderr
    assert proc.stdout == "cuInit 100 cuDeviceGet 3\ninjection -\nforks 20 ok\n"


FAKE_DIR = WORKLOAD_BIN / "gputimestub"


def fake_gpu() -> tuple[Path, Path]:
    """gputime_fake_gpu.c on the stand-in runtime gputime_fake_cudart.c (its
    libcudart.so.13, found through the program's DT_RPATH, before any
    LD_LIBRARY_PATH): (program, library)."""
    lib = build_stub_runtime(FAKE_DIR, [WORKLOADS / "gputime_fake_cudart.c"])
    src = WORKLOADS / "gputime_fake_gpu.c"
    exe = build_once(FAKE_DIR / "gputime_fake_gpu", [src, lib], lambda to: [
        "gcc", "-O1", "-g", f"-I{CUDA_HOME}/include", f"-I{REPO / 'cupti'}", "-o", str(to),
        str(src), f"-L{FAKE_DIR}", "-l:libcudart.so.13", "-Wl,--disable-new-dtags",
        f"-Wl,-rpath,{FAKE_DIR}"])
    return exe, lib


LAUNCHES, COPIES = 200, 20


def test_gpu_records_joined_to_real_rows(tmp_path):
    """What the library would write on a GPU, written by the program itself
    around real (failing, traced) runtime calls, with the CPU interval each
    call read inside itself, as CUPTI does: the join works on the uprobe rows'
    CLOCK_MONOTONIC and tids; every row has its own work."""
    exe, lib = fake_gpu()
    calls, summary, proc = trace_jsonl(
        tmp_path, "--gpu-time", "--lib", str(lib), "-e", "cudaLaunchKernel,cudaMemcpy",
        command=[str(exe), str(LAUNCHES), str(COPIES)])
    assert proc.returncode == 0, proc.stderr
    assert [c["event"] for c in calls] == ["cudaLaunchKernel"] * LAUNCHES + ["cudaMemcpy"] * COPIES
    assert all(c["ret"] == 35 for c in calls)
    for i, c in enumerate(calls):
        g = c["gpu"]
        # 2 µs after a clock reading made after the call returned, before the next call
        assert c["ts_ns"] + c["duration_ns"] + 2000 <= g["start_ns"]
        if i + 1 < len(calls):
            assert g["start_ns"] <= calls[i + 1]["ts_ns"] + 2000
        if i < LAUNCHES:
            assert g == {"kind": "kernel", "start_ns": g["start_ns"], "duration_ns": 1000 + i,
                         "device": 0, "stream": 7, "context": 1}
        else:
            k = i - LAUNCHES
            assert g == {"kind": "memcpy", "start_ns": g["start_ns"], "duration_ns": 500 + k,
                         "device": 0, "stream": 14, "context": 1, "bytes": 4096 * (k + 1),
                         "copy_kind": "HtoD"}
    assert (f"cudaprobe: --gpu-time: {LAUNCHES} kernels, {COPIES} copies, 0 memsets timed "
            "on the GPU\n") in proc.stderr
    assert summary["calls"] == len(calls)


def test_a_records_file_made_1_tib_costs_no_memory_and_loses_no_row(tmp_path):
    """The program makes its records file 1 TiB long after its records (a hole:
    free for it). cudaprobe reads it in bounded chunks: every row is written,
    with its GPU work, the file is said to be unreadable past them, and the
    peak memory is within 64 MiB of a run without the hole (reading it whole
    was a MemoryError, exit 2, every row lost)."""
    exe, lib = fake_gpu()

    def run(hole: int) -> tuple[list[dict], str, int]:
        d = tmp_path / f"hole{hole}"
        d.mkdir()
        out = d / "calls.jsonl"
        proc = subprocess.run(
            ["/usr/bin/time", "-f", "maxrss_kib %M", *cudaprobe_cmd(
                "trace", "--gpu-time", "--lib", str(lib), "-e", "cudaLaunchKernel,cudaMemcpy",
                "-o", str(out), "--", str(exe), str(LAUNCHES), str(COPIES), str(hole))],
            capture_output=True, text=True, timeout=HANG_S)
        assert proc.returncode == 0, proc.stderr
        rows = [json.loads(line) for line in out.read_text().splitlines()][:-1]
        peak = int(proc.stderr.rsplit("maxrss_kib ", 1)[1].split()[0])
        return rows, proc.stderr, peak

    if not Path("/usr/bin/time").exists():
        pytest.skip("/usr/bin/time measures the peak memory")
    _, _, baseline = run(0)
    rows, said, peak = run(1 << 40)
    assert [c["event"] for c in rows] == ["cudaLaunchKernel"] * LAUNCHES + ["cudaMemcpy"] * COPIES
    assert all("gpu" in c for c in rows)
    assert "cudaprobe: --gpu-time: 1 GPU-time files were unreadable" in said
    assert peak - baseline < 64 << 10, (peak, baseline)


def test_gpu_tracks_in_chrome_and_stats(tmp_path):
    exe, lib = fake_gpu()
    out = tmp_path / "t.chrome.json"
    proc = run_cudaprobe("trace", "--gpu-time", "--lib", str(lib), "-e",
                         "cudaLaunchKernel,cudaMemcpy", "-o", str(out), "--", str(exe), "50", "5")
    assert proc.returncode == 0, proc.stderr
    events, terminated = chrome_check.load_events(str(out))
    report = chrome_check.check_events(events, terminated)
    assert report.problems == []
    gpu = {t: s for t, s in report.tracks.items() if t[0] == chrome_check.GPU_PID_BASE}
    assert set(gpu) == {(chrome_check.GPU_PID_BASE, 7), (chrome_check.GPU_PID_BASE, 14)}
    assert gpu[(chrome_check.GPU_PID_BASE, 7)].flows_in == 50  # one per launch
    assert report.process_names[chrome_check.GPU_PID_BASE] == "GPU 0"
    stats = tmp_path / "stats.json"
    proc = run_cudaprobe("stats", "--gpu-time", "--json", "-o", str(stats), "--lib", str(lib),
                         "-e", "cudaLaunchKernel,cudaMemcpy", "--", str(exe), "50", "5")
    assert proc.returncode == 0, proc.stderr
    gpu_stats = json.loads(stats.read_text())["gpu"]
    (kernel,) = gpu_stats["kernels"]
    assert (kernel["name"], kernel["calls"], kernel["min_ns"], kernel["max_ns"]) == (
        "fake_vecadd()", 50, 1000, 1049)
    (copy,) = gpu_stats["copies"]
    assert (copy["name"], copy["calls"], copy["bytes"]) == ("memcpy HtoD", 5, 4096 * 15)


GPULINES = Path(__file__).parent / "gpulines_workload.py"
PYTHON = Path("/usr/bin/python3.11")  # Debian's: --py-stacks reads it (pythons.py)


def launch_line(function: str, program: Path = GPULINES) -> str:
    """`file:line (function)` of the launch in `program`'s `function`
    (gpulines_workload.py's unless given)."""
    lines = program.read_text().splitlines()
    start = lines.index(next(t for t in lines if t.startswith(f"def {function}(")))
    n = next(i for i in range(start, len(lines)) if "cudaLaunchKernel(" in lines[i]) + 1
    return f"{program}:{n} ({function})"


def scrape(address: str, suffix: str = "_total") -> dict[str, dict[tuple, float]]:
    """/metrics as {family: {labels: value}} of the samples named with `suffix`
    (prometheus_client's own parser)."""
    from prometheus_client.parser import text_string_to_metric_families  # noqa: PLC0415
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=HANG_S) as r:
        text = r.read().decode()
    return {f.name: {tuple(sorted(s.labels.items())): s.value for s in f.samples
                     if s.name.endswith(suffix)}
            for f in text_string_to_metric_families(text)}


@pytest.mark.skipif(not PYTHON.exists(), reason="no /usr/bin/python3.11")
@pytest.mark.parametrize("mode", [[], ["threads"]])
def test_serve_counts_gpu_time_by_the_python_line_that_launched_it(mode):
    """serve --gpu-time --py-stacks: each kernel's GPU time (the program's own
    records, with the CPU interval each real, traced call read inside itself)
    under the line of the program that launched it, to the nanosecond; the
    two lines one after the other, and at once on two threads."""
    _, lib = fake_gpu()
    address = f"127.0.0.1:{free_port()}"
    heavy, light = 300, 200
    serve = subprocess.Popen(
        cudaprobe_cmd("serve", "--prometheus", address, "--gpu-time", "--py-stacks",
                      "--lib", str(lib), "-e", "cudaLaunchKernel", "--",
                      str(PYTHON), str(GPULINES), str(lib), str(heavy), str(light), *mode),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        said = serve.stdout.readline().split()  # the program's own totals, once it has launched
        assert said[::2] == ["heavy", "light"], serve.stderr.read() if serve.poll() else said
        truth = {launch_line("heavy"): int(said[1]), launch_line("light"): int(said[3])}
        assert truth[launch_line("heavy")] == sum(10_000 + i for i in range(heavy))
        deadline = time.monotonic() + HANG_S
        while True:  # CUPTI's records are read each second: until all are counted
            metrics = scrape(address)
            by_line = {dict(k)["line"]: v for k, v in
                       metrics.get("cudaprobe_gpu_line_seconds", {}).items()}
            if sum(by_line.values()) >= sum(truth.values()) / 1e9 - 1e-12 \
                    or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert by_line == pytest.approx({k: ns / 1e9 for k, ns in truth.items()}, rel=1e-9)
        labels = {dict(k)["process"] for k in metrics["cudaprobe_gpu_line_seconds"]}
        assert labels == {"python3.11"}
        assert metrics["cudaprobe_gpu_line_unjoined"] == {
            (("reason", "bound"),): 0, (("reason", "no_api_record"),): 0,
            (("reason", "no_traced_launch"),): 0}
    finally:
        serve.stdin.close()
    assert serve.wait(timeout=HANG_S) == 0, serve.stderr.read()


def test_serve_py_stacks_without_gpu_time_is_one_clear_error():
    proc = run_cudaprobe("serve", "--prometheus", f"127.0.0.1:{free_port()}", "--py-stacks",
                         "--", "true")
    assert proc.returncode == 2
    assert proc.stderr == ("cudaprobe: serve --py-stacks counts GPU time by Python line: it "
                           "goes with --gpu-time\n")
