"""--gpu-time with --pid: the GPU-time library injected into running
programs (C and Python) whose threads are busy in malloc/free, in
dlopen/dlclose loops and in CUDA calls (the real libcudart and libcuda 535,
failing fast without a GPU, the safe-point probes firing). CUPTI is the
fake libcupti of tests/workloads/fake_libcupti.c (one kernel record per
flush), so that the recording and its stop run; the real one refuses
without a GPU, said in one line. Many attach/detach cycles, cudaprobe
killed at every point of the injection: the program's output and exit
status are those of an untraced run, nothing is left behind but the
library, loaded once."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from cudaprobe.sessions.gputime_attach import GpuTimeAttach
from cudaprobe.targets import injectable

from ..conftest import HANG_S, REPO, build_workload
from .conftest import build_cuda_workload, trace_jsonl
from .running import Lines
from .test_per_process import private_copy
from .test_serve_prometheus import free_port, stop

pytestmark = pytest.mark.slow  # tens of seconds: scheduled first (tests/conftest.py)

HELPER = Path(__file__).with_name("attach_helper.py")
UNTRACED = "malloc ok\ndlopen ok\ncuda ok\n"
CONCURRENT_KERNEL = 10  # CUpti_ActivityKind
RUNTIME_KIND, DRIVER_KIND = "5", "4"  # CUpti_ActivityKind, as the fake CUPTI logs them
LAUNCH_CBID = 211  # cudaLaunchKernel_v7000
TIE_RECORDS = 1 << 18  # the library's buffer of call ties (cupti/gputime.c)
GONE_S = HANG_S  # for the kernel or the library to let go: an event waited for, never a pass


@pytest.fixture(scope="module")
def target_exe(libcuda) -> Path:
    return build_cuda_workload("inject_target.c", libcuda)


def readlink_if_there(path: Path) -> str | None:
    """A descriptor or thread listed a moment ago may be gone when read: the
    program closes its memfds and ends its threads while the test looks."""
    try:
        return os.readlink(path)
    except FileNotFoundError:
        return None


def read_if_there(path: Path) -> str | None:
    try:
        return path.read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None


class Target:
    """The program, running until its stdin is closed."""

    def __init__(self, argv: list[str], env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, env={**os.environ, **(env or {})})
        assert self.proc.stdout.readline().startswith("ready")
        self.pid = self.proc.pid

    def finish(self) -> tuple[str, int]:
        self.proc.stdin.close()
        out = self.proc.stdout.read()
        return out, self.proc.wait(timeout=HANG_S)

    def maps(self) -> str:
        return Path(f"/proc/{self.pid}/maps").read_text()

    def loaded(self) -> int:
        """Times the library was loaded: its mappings at offset 0."""
        return sum(1 for line in self.maps().splitlines()
                   if "/memfd:cudaprobe-gputime-" in line and line.split()[2] == "00000000")

    def memfds(self) -> list[str]:
        links = (readlink_if_there(fd) for fd in Path(f"/proc/{self.pid}/fd").iterdir())
        return [link for link in links if link and "memfd:" in link]

    def threads(self) -> list[str]:
        tasks = Path(f"/proc/{self.pid}/task").iterdir()
        return sorted(text.strip() for t in tasks if (text := read_if_there(t / "comm")))

    def tracers(self) -> set[str]:
        tasks = Path(f"/proc/{self.pid}/task").iterdir()
        return {line.split()[1] for t in tasks
                for line in (read_if_there(t / "status") or "").splitlines()
                if line.startswith("TracerPid:")}

    def settled(self) -> bool:
        """Nothing of an injection under way: no tracer, no memfd, no watcher thread."""
        return (self.tracers() == {"0"} and not self.memfds()
                and "cudaprobe-gpu" not in self.threads())

    def wait_settled(self) -> None:
        deadline = time.monotonic() + GONE_S
        while not self.settled():
            assert time.monotonic() < deadline, (self.tracers(), self.memfds(), self.threads())
            time.sleep(0.05)


def libc_code_end(pid: int) -> tuple[str, bytes]:
    """The C library's executable mapping (its maps line) and the bytes of its
    last page, where the stub goes."""
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        fields = line.split()
        if fields[1] == "r-xp" and re.search(r"/libc\.so\.6$", line):
            end = int(fields[0].split("-")[1], 16)
            fd = os.open(f"/proc/{pid}/mem", os.O_RDONLY)
            try:
                return line, os.pread(fd, 4096, end - 4096)
            finally:
                os.close(fd)
    raise AssertionError("no libc mapped")


def helper(pid: int, cycles: int, kill: str | None, cupti: Path | None) -> list[dict]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    if cupti is not None:
        env["CUDAPROBE_CUPTI"] = str(cupti)
    p = subprocess.run([sys.executable, str(HELPER), str(pid), str(cycles), *(
        [kill] if kill else [])], capture_output=True, text=True, timeout=HANG_S, env=env)
    if kill and kill not in ("recording",) and p.returncode == 0:
        raise AssertionError(f"the kill point {kill} was never reached: {p.stdout}")
    assert p.returncode in (0, -signal.SIGKILL), p.stderr
    assert "Traceback" not in p.stderr, p.stderr
    return [json.loads(line) for line in p.stdout.splitlines()]


def test_cycles_on_a_c_program(target_exe, fake_cupti):
    t = Target([str(target_exe), "2", "3"])
    try:
        cycles = helper(t.pid, 100, None, fake_cupti)
        assert len(cycles) == 100
        for c in cycles:
            said = f"--gpu-time: the GPU-time library is recording in pid {t.pid} ("
            assert [line[:len(said)] for line in c["said"]][:1] == [said], c["said"]
            assert c["said"][1:] == [
                "--gpu-time: CUPTI records every CUDA call of the 1 running process it was "
                "put in (its switches for launches and copies alone give no record once CUDA "
                "runs): it costs it more while recorded"], c["said"]
            assert c["said"][0].endswith(" s to put in)"), c["said"]
            # the flush at each stop: the fake's kernel, named in each new memfd
            assert c["kernels"] == ["fake_attached_kernel"]
        t.wait_settled()
        assert t.loaded() == 1  # loaded by the first attach, called again by the others
    finally:
        out, status = t.finish()
    assert (out, status) == (UNTRACED, 3)


@pytest.mark.parametrize("point", ["seized", "armed", "stopped", "moved", "stage1", "stage2",
                                   "recording"])
def test_cudaprobe_killed_during_the_injection(target_exe, fake_cupti, point):
    t = Target([str(target_exe), "2", "0"])
    try:
        page = libc_code_end(t.pid)
        helper(t.pid, 1, point, fake_cupti)
        t.wait_settled()  # the watcher stops alone once the heartbeat stops
        # nothing written before the thread is sent into the stub
        assert (libc_code_end(t.pid) == page) == (point in ("seized", "armed", "stopped"))
        # loaded only where the kill came after the loader's call
        assert t.loaded() == (1 if point in ("stage2", "recording") else 0)
        again = helper(t.pid, 1, None, fake_cupti)  # and it can be attached to again
        assert again[0]["kernels"] == ["fake_attached_kernel"], again
        t.wait_settled()
        assert t.loaded() == 1
    finally:
        out, status = t.finish()
    assert (out, status) == (UNTRACED, 0)


def test_trace_and_stats_with_pid(tmp_path, target_exe, fake_cupti):
    t = Target([str(target_exe), "1", "5"])
    env = {**os.environ, "CUDAPROBE_CUPTI": str(fake_cupti)}
    try:
        calls, summary, proc = trace_jsonl(tmp_path, "--pid", str(t.pid), "--gpu-time",
                                           "-e", "cudaMalloc,cudaFree", "-d", "1", env=env)
        assert proc.returncode == 0, proc.stderr
        assert f"--gpu-time: the GPU-time library is recording in pid {t.pid}" in proc.stderr
        # the fake's API record is stamped at the library's first flush, on the library's
        # own thread (not traced), half a second in: inside the window, or after it on a
        # loaded machine
        said = ("--gpu-time: 1 kernels, 0 copies, 0 memsets timed on the GPU; 1 made by calls "
                "not traced", "--gpu-time: 1 kernels, 0 copies, 0 memsets timed on the GPU; 1 "
                "made by calls before or after the traced window")
        assert any(s in proc.stderr for s in said), proc.stderr
        assert calls and {c["event"] for c in calls} <= {"cudaMalloc", "cudaFree"}
        t.wait_settled()
        stats = subprocess.run([sys.executable, "-m", "cudaprobe", "stats", "--pid", str(t.pid),
                                "--gpu-time", "--json", "-e", "cudaMalloc", "-d", "1"],
                               capture_output=True, text=True, timeout=300, env=env)
        assert stats.returncode == 0, stats.stderr
        kernels = json.loads(stats.stdout)["gpu"]["kernels"]
        assert [(k["name"], k["calls"]) for k in kernels] == [("fake_attached_kernel", 1)]
        t.wait_settled()
        assert t.loaded() == 1
    finally:
        out, status = t.finish()
    assert (out, status) == (UNTRACED, 5)


def test_stats_by_collective_with_pid(libcuda, libnccl, fake_cupti):
    """stats --by collective --gpu-time on a running process (as on a job's
    ranks, each by --pid): the library is injected at its CUDA calls and its
    GPU records read; the NCCL rows are joined to them (none here: the
    program maps libnccl but makes no NCCL call)."""
    cuda, nccl = str(libcuda.parent), str(libnccl.parent)
    exe = build_workload("inject_target.c", "inject_target_nccl", extra=[
        f"-L{cuda}", "-lcuda", f"-Wl,-rpath,{cuda}", "-Wl,--no-as-needed", f"-L{nccl}",
        "-l:libnccl.so.2", f"-Wl,-rpath,{nccl}", "-Wl,--as-needed"])
    t = Target([str(exe), "1", "0"])
    env = {**os.environ, "CUDAPROBE_CUPTI": str(fake_cupti)}
    try:
        stats = subprocess.run([sys.executable, "-m", "cudaprobe", "stats", "--by", "collective",
                                "--pid", str(t.pid), "--gpu-time", "--json", "-d", "1"],
                               capture_output=True, text=True, timeout=HANG_S, env=env)
        assert stats.returncode == 0, stats.stderr
        assert f"--gpu-time: the GPU-time library is recording in pid {t.pid}" in stats.stderr
        report = json.loads(stats.stdout)
        assert [(k["name"], k["calls"]) for k in report["gpu"]["kernels"]] == [
            ("fake_attached_kernel", 1)]
        assert report["nccl"] == {"collectives": [], "waits": []}
        assert report["libraries"] == [str(libnccl.resolve())]
        t.wait_settled()
    finally:
        out, status = t.finish()
    assert (out, status) == (UNTRACED, 0)


def test_python_program(target_exe, fake_cupti, libcudart, libcuda):
    script = REPO / "tests" / "workloads" / "inject_target.py"
    t = Target([sys.executable, str(script), str(libcudart), str(libcuda)])
    try:
        cycles = helper(t.pid, 5, None, fake_cupti)
        assert [c["kernels"] for c in cycles] == [["fake_attached_kernel"]] * 5
        t.wait_settled()
        assert t.loaded() == 1
    finally:
        out, status = t.finish()
    assert (out, status) == ("alloc ok\ndlopen ok\ncuda ok\n", 0)


def _refused(t: Target, cupti: Path | None) -> str:
    (cycle,) = helper(t.pid, 1, None, cupti)
    assert cycle["kernels"] == []
    (line,) = cycle["said"]
    assert line.startswith(f"no GPU time for pid {t.pid}: "), line
    return line.split(": ", 1)[1]


def test_refusals(target_exe, fake_cupti):
    t = Target([str(target_exe), "1", "0"], env={"FAKE_CUPTI_SUBSCRIBED": "1"})
    try:  # a profiler holds CUPTI: refused, nothing left on
        assert _refused(t, fake_cupti) == (
            'the GPU-time library in it said: "CUPTI refused activity recording (CUptiResult '
            '39: the program has a CUPTI subscriber of its own)"')
        t.wait_settled()
        # no GPU: the real libcupti, found under CUDA_HOME, refuses
        assert "CUPTI" in _refused(t, None) or "libcupti" in _refused(t, None)
    finally:
        assert t.finish() == (UNTRACED, 0)
    t = Target([str(target_exe), "1", "0", "seccomp"])
    try:
        assert "seccomp filter" in _refused(t, fake_cupti)
        assert t.loaded() == 0
    finally:
        assert t.finish() == (UNTRACED, 0)
    t = Target([str(target_exe), "1", "0"])
    tracer = subprocess.Popen([sys.executable, "-c", (
        "import sys; from cudaprobe.targets.ptrace import TracedThread; "
        f"TracedThread({t.pid}); print('seized', flush=True); sys.stdin.read()")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        assert tracer.stdout.readline() == "seized\n"
        assert _refused(t, fake_cupti).startswith(f"it is already traced by pid {tracer.pid}")
    finally:
        tracer.stdin.close()
        tracer.wait(timeout=HANG_S)
        assert t.finish() == (UNTRACED, 0)
    no_cuda = subprocess.Popen(["sleep", "600"])
    try:
        said: list[str] = []
        GpuTimeAttach(said.append).attach(no_cuda.pid)
        assert said == [f"no GPU time for pid {no_cuda.pid}: it maps no CUDA library "
                        "(libcuda, libcudart)"]
    finally:
        no_cuda.kill()
        no_cuda.wait()
    t = Target([str(target_exe), "1", "0"])
    try:  # stopped: said at once, not after waiting out the safe point
        os.kill(t.pid, signal.SIGSTOP)
        while injectable.status_field("State", t.pid)[0] != "T":
            time.sleep(0.01)
        assert _refused(t, fake_cupti).startswith("it is stopped (SIGSTOP, job control or a "
                                                  "debugger)")
        assert t.loaded() == 0
    finally:
        os.kill(t.pid, signal.SIGCONT)
        assert t.finish() == (UNTRACED, 0)
    zombie = subprocess.Popen(["true"])
    while injectable.status_field("State", zombie.pid)[0] != "Z":
        time.sleep(0.01)
    assert injectable.refusal(zombie.pid) == "it is a zombie"
    zombie.wait()


def test_yama_scope_3(tmp_path, monkeypatch):
    scope = tmp_path / "ptrace_scope"
    scope.write_text("3\n")
    monkeypatch.setattr(injectable, "YAMA", str(scope))
    assert injectable.refusal(os.getpid()) == ("ptrace is disabled on this machine (Yama "
                                               "ptrace_scope is 3)")


def test_serve_with_pid(target_exe, fake_cupti):
    t = Target([str(target_exe), "1", "0"])
    env = {**os.environ, "CUDAPROBE_CUPTI": str(fake_cupti)}
    try:
        p = subprocess.run([sys.executable, "-m", "cudaprobe", "serve", "--prometheus",
                            f"127.0.0.1:{free_port()}", "--pid", str(t.pid), "--gpu-time",
                            "-e", "cudaMalloc", "-d", "1"],
                           capture_output=True, text=True, timeout=300, env=env)
        assert p.returncode == 0, p.stderr
        assert f"--gpu-time: the GPU-time library is recording in pid {t.pid}" in p.stderr
        # the stop's flush reached the metrics: no "no GPU activity" line
        assert "no GPU activity" not in p.stderr and "Traceback" not in p.stderr
        # serve joins no GPU record to a call: CUPTI records the GPU work only, none
        # of the calls (trace --pid records them all: test_cycles_on_a_c_program)
        assert "records every CUDA call" not in p.stderr, p.stderr
        t.wait_settled()
    finally:
        assert t.finish() == (UNTRACED, 0)


def test_a_child_started_after_the_attach_is_traced_and_timed_from_its_first_call(
        tmp_path, fake_cupti, libcudart, libcuda):
    """--pid --gpu-time injects into the process running at the start, and into
    a child it starts later: the gate holds the child at its open of libcudart
    while its safe point goes on, and the library goes in at its first (and
    only) CUDA call. Each process's library flushes one kernel record (the
    parent's at the stop, the child's at its exit): two kernels timed."""
    script = REPO / "tests" / "workloads" / "gputime_parent.py"
    t = Target([sys.executable, str(script), str(libcudart), str(libcuda)])
    out = tmp_path / "calls.jsonl"
    tracing = subprocess.Popen(
        [sys.executable, "-m", "cudaprobe", "trace", "-o", str(out), "--pid", str(t.pid),
         "--gpu-time", "-e", "cudaGetDeviceCount"], stderr=subprocess.PIPE, text=True,
        env={**os.environ, "CUDAPROBE_CUPTI": str(fake_cupti)})
    try:
        err = Lines(tracing.stderr)
        err.wait_for(lambda s: f"is recording in pid {t.pid}" in s, "the injection")
        t.proc.stdin.write("child\n")
        t.proc.stdin.flush()
        assert t.proc.stdout.readline() == "child done\n"
        tracing.send_signal(signal.SIGINT)
        assert tracing.wait(timeout=HANG_S) == 0, err.text()
    finally:
        out_text, status = t.finish()
    assert (out_text, status) == ("", 0)
    calls = [json.loads(x) for x in out.read_text().splitlines()][:-1]
    children = {c["pid"] for c in calls} - {t.pid}
    assert len(children) == 1, calls
    (child,) = children
    err._thread.join(timeout=HANG_S)
    said = err.text()
    assert f"--gpu-time: the GPU-time library is recording in pid {child}" in said, said
    assert "--gpu-time: 2 kernels, 0 copies, 0 memsets timed on the GPU" in said, said
    assert "not timed" not in said and f"no GPU time for pid {child}" not in said, said
    assert [c["event"] for c in calls if c["pid"] == child] == ["cudaGetDeviceCount"]


def test_a_target_that_execs_a_cuda_program_gets_the_library_in_its_new_image(
        tmp_path, fake_cupti, libcudart):
    """--pid of a shell that maps no CUDA (no GPU time for it, said), which then
    execs a program calling CUDA: the same pid, a new image, held at its open
    of libcudart and given the library at its first and only call."""
    child = ("import ctypes, sys; n = ctypes.c_int(); "
             "ctypes.CDLL(sys.argv[1]).cudaGetDeviceCount(ctypes.byref(n))")
    shell = subprocess.Popen(["bash", "-c", f'echo ready; read x; exec "$0" -c "{child}" "$1"',
                              sys.executable, str(libcudart)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert shell.stdout.readline() == "ready\n"
    out = tmp_path / "calls.jsonl"
    tracing = subprocess.Popen(
        [sys.executable, "-m", "cudaprobe", "trace", "-o", str(out), "--pid", str(shell.pid),
         "--wait", "--gpu-time", "-e", "cudaGetDeviceCount"], stderr=subprocess.PIPE,
        text=True, env={**os.environ, "CUDAPROBE_CUPTI": str(fake_cupti)})
    try:
        err = Lines(tracing.stderr)
        err.wait_for(lambda s: f"no GPU time for pid {shell.pid}: it maps no CUDA" in s,
                     "the shell's refusal")
        shell.stdin.write("go\n")
        shell.stdin.flush()
        assert shell.wait(timeout=HANG_S) == 0
        assert tracing.wait(timeout=HANG_S) == 0, err.text()
    finally:
        shell.kill()
    err._thread.join(timeout=HANG_S)
    said = err.text()
    assert f"--gpu-time: the GPU-time library is recording in pid {shell.pid}" in said, said
    assert "--gpu-time: 1 kernels, 0 copies, 0 memsets timed on the GPU" in said, said
    calls = [json.loads(x) for x in out.read_text().splitlines()][:-1]
    assert [(c["pid"], c["event"]) for c in calls] == [(shell.pid, "cudaGetDeviceCount")]


def _serve_samples(url: str) -> dict[str, list]:
    with urllib.request.urlopen(url, timeout=HANG_S) as r:
        text = r.read().decode()
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def _records_memfds(pid: int) -> int:
    links = (readlink_if_there(fd) for fd in Path(f"/proc/{pid}/fd").iterdir())
    return sum(1 for link in links if link and "cudaprobe-gpu-records" in link)


def test_serve_on_a_node_puts_the_library_into_each_process_found_and_counts_refusals(
        tmp_path, target_exe, fake_cupti, libcudart):
    """serve --gpu-time with no target (a node's): each process found making
    CUDA calls through the probed library gets the library, one running at
    the start and one started later alike; one under a seccomp filter, and one
    whose environment opts out, are refused, counted by their reasons; the
    GPU time each wrote reaches the metrics, the last records of one that
    exits too, and what was held for it is let go. Each program's output
    and exit status are an untraced run's."""
    library, env = private_copy(tmp_path, libcudart)
    before = Target([str(target_exe), "1", "0"], env=env)
    address = f"127.0.0.1:{free_port()}"
    serve = subprocess.Popen(
        [sys.executable, "-m", "cudaprobe", "serve", "--prometheus", address, "--lib", library,
         "-e", "cudaGetDeviceCount", "--gpu-time"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "CUDAPROBE_CUPTI": str(fake_cupti)})
    err = Lines(serve.stderr)
    url = f"http://{address}/metrics"
    later = filtered = out = None
    try:
        err.wait_for(lambda s: "serving Prometheus metrics" in s, "serving", timeout=HANG_S)
        later = Target([str(target_exe), "1", "0"], env=env)
        filtered = Target([str(target_exe), "1", "0", "seccomp"], env=env)
        out = Target([str(target_exe), "1", "0"], env={**env, "CUDAPROBE_NO_GPU_TIME": "1"})
        for t in (before, later):
            err.wait_for(lambda s, pid=t.pid: f"the GPU-time library is recording in pid {pid} "
                         in s, f"recording in {t.pid}", timeout=HANG_S)
        err.wait_for(lambda s: f"no GPU time for pid {filtered.pid}: " in s and "seccomp" in s,
                     "the seccomp refusal", timeout=HANG_S)
        err.wait_for(lambda s: f"no GPU time for pid {out.pid}: its environment has "
                     "CUDAPROBE_NO_GPU_TIME" in s, "the opt-out", timeout=HANG_S)
        samples = _serve_samples(url)
        assert samples["cudaprobe_gpu_time_processes"][0].value == 2
        refusals = {s.labels["reason"]: s.value for s in samples["cudaprobe_gpu_time_refusals"]
                    if s.name.endswith("_total")}
        assert refusals == {"seccomp": 1, "opted_out": 1}
        assert filtered.loaded() == 0 and out.loaded() == 0
        assert _records_memfds(serve.pid) == 2
        assert before.finish() == (UNTRACED, 0)  # its library flushes as it exits
        deadline = time.monotonic() + HANG_S
        while True:  # read, then let go of
            samples = _serve_samples(url)
            kernels = [s for s in samples.get("cudaprobe_gpu_kernel_duration_seconds", [])
                       if s.name.endswith("_count") and s.labels["kernel"] ==
                       "fake_attached_kernel"]
            if kernels and _records_memfds(serve.pid) == 1:
                break
            assert time.monotonic() < deadline, (kernels, err.text())
            time.sleep(0.05)
        assert kernels[0].value >= 1
    finally:
        for t in (later, filtered, out):
            if t is not None:
                assert t.finish() == (UNTRACED, 0)
        if before.proc.poll() is None:
            before.finish()
        assert stop(serve) == 0, err.text()
    assert "Traceback" not in err.text()


@pytest.mark.parametrize("end", ["stopped", "killed"])
def test_serve_duty_never_switches_cupti_with_its_slices(tmp_path, target_exe, fake_cupti,
                                                        libcudart, end):
    """serve --duty --gpu-time on a node: CUPTI's recording is never switched
    with the slices (switched while a job launches, it can kill the job): the
    kernel kind goes on once as the library goes in (the fake CUPTI logs each
    switch) and stays on across two slices; it goes off once, at serve's stop,
    or, serve killed (kill -9) wherever the cycle is, when the library's
    watcher finds the heartbeat gone. The program's output and exit status
    are an untraced run's."""
    library, env = private_copy(tmp_path, libcudart)
    log = tmp_path / "switches.log"
    t = Target([str(target_exe), "1", "0"], env={**env, "FAKE_CUPTI_LOG": str(log)})
    address = f"127.0.0.1:{free_port()}"
    serve = subprocess.Popen(
        [sys.executable, "-m", "cudaprobe", "serve", "--prometheus", address,
         "--lib", library, "-e", "cudaGetDeviceCount", "--gpu-time", "--duty", "20%",
         "--duty-period", "1"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "CUDAPROBE_CUPTI": str(fake_cupti)})
    err = Lines(serve.stderr)
    try:
        err.wait_for(lambda s: f"the GPU-time library is recording in pid {t.pid} " in s,
                     "recording", timeout=HANG_S)
        begun = windows(address)
        deadline = time.monotonic() + HANG_S
        while windows(address) < begun + 2:  # two slices begun since CUPTI went on
            assert time.monotonic() < deadline, err.text()
            time.sleep(0.05)
        assert kernel_switches(log) == ["enable"], (kernel_switches(log), err.text())
        if end == "killed":  # the watcher, its heartbeat gone, stops the recording itself
            serve.kill()
            serve.wait(timeout=HANG_S)
            while not stop_done(log):
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.1)
    finally:
        if end == "stopped":
            assert stop(serve) == 0, err.text()
        assert t.finish() == (UNTRACED, 0)
    assert kernel_switches(log) == ["enable", "disable"]
    assert "Traceback" not in err.text()


def stop_done(log: Path) -> bool:
    """Whether the library's stop has ended, by the fake CUPTI's log: its last
    step is to ask CUPTI to leave (its callbacks on every call on) or, where
    CUPTI cannot leave, to unsubscribe."""
    return any(w in ("domain-on", "unsubscribe") for w, _ in
               (line.split() for line in log.read_text().splitlines()))


def switches_of(log: Path, what: int) -> list[str]:
    """The fake CUPTI's switches of an activity kind, or of a callback by its id,
    in order."""
    lines = (log.read_text() if log.exists() else "").splitlines()
    return [w for w, key in (line.split() for line in lines) if key == str(what)]


def kernel_switches(log: Path) -> list[str]:
    """The fake CUPTI's switches of the kernel kind, in order."""
    return switches_of(log, CONCURRENT_KERNEL)


def windows(address: str) -> float:
    """serve's slices so far (cudaprobe_sampled_windows)."""
    samples = _serve_samples(f"http://{address}/metrics").get("cudaprobe_sampled_windows", [])
    return sum(s.value for s in samples if s.name == "cudaprobe_sampled_windows_total")


def test_serve_duty_with_py_stacks_never_switches_cupti_with_its_slices(
        tmp_path, target_exe, fake_cupti, libcudart):
    """serve --duty --gpu-time --py-stacks: the launches are tied to their kernels
    by CUPTI's callbacks on the launch functions alone, never by CUPTI's API
    record kinds (RUNTIME, DRIVER: every call recorded, +8-18% on a PyTorch
    job). CUPTI's recording is never switched with the slices (switched while
    a job launches, it can kill the job): the kernel kind and the launch's
    callback go on once (the fake CUPTI logs each switch) and stay on across
    two slices, and go off once, at the stop; serve says so; no API record
    kind is ever switched on; the program's output and exit status are an
    untraced run's."""
    library, env = private_copy(tmp_path, libcudart)
    log = tmp_path / "switches.log"
    t = Target([str(target_exe), "1", "0"], env={**env, "FAKE_CUPTI_LOG": str(log)})
    address = f"127.0.0.1:{free_port()}"
    serve = subprocess.Popen(
        [sys.executable, "-m", "cudaprobe", "serve", "--prometheus", address,
         "--lib", library, "--gpu-time", "--py-stacks", "--duty", "20%", "--duty-period", "1"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "CUDAPROBE_CUPTI": str(fake_cupti)})
    err = Lines(serve.stderr)

    def switched() -> tuple[list[str], list[str]]:
        """The kernel kind's switches, and the launch callback's, so far."""
        return kernel_switches(log), switches_of(log, LAUNCH_CBID)
    try:
        err.wait_for(lambda s: f"the GPU-time library is recording in pid {t.pid} " in s,
                     "recording", timeout=HANG_S)
        begun = windows(address)
        deadline = time.monotonic() + HANG_S
        while windows(address) < begun + 2:  # two slices begun since CUPTI went on
            assert time.monotonic() < deadline, err.text()
            time.sleep(0.05)
        assert switched() == (["enable"], ["tie-on"]), (switched(), err.text())
    finally:
        assert stop(serve) == 0, err.text()
        assert t.finish() == (UNTRACED, 0)
    assert switched() == (["enable", "disable"], ["tie-on", "tie-off"])
    switches = [line.split() for line in log.read_text().splitlines()]
    assert not [s for s in switches if s[0] == "enable" and s[1] in (RUNTIME_KIND, DRIVER_KIND)]
    assert "CUPTI records in each process all along" in err.text()
    assert "Traceback" not in err.text()


def library_here_run(script: str, fake_cupti, *args: str,
                     **env: str) -> subprocess.CompletedProcess:
    """`script` (one that loads the library in its own process, library_here.py)
    with the built library and the stand-in CUPTI, `env` added to this
    process's environment (skipped where the library cannot be built)."""
    from cudaprobe.targets.cupti import build_library  # noqa: PLC0415
    library, why = build_library()
    if library is None:
        pytest.skip(why)
    return subprocess.run(
        [sys.executable, str(Path(__file__).parent / script), str(library),
         str(fake_cupti), str(REPO / "cupti" / "inject.h"), *args],
        capture_output=True, text=True, timeout=HANG_S, env={**os.environ, **env})


def call_ties_run(fake_cupti, *args: str, **env: str) -> subprocess.CompletedProcess:
    """call_ties_workload.py with `args`."""
    return library_here_run("call_ties_workload.py", fake_cupti, *args, **env)


@pytest.mark.parametrize("mode", ["ties", "calls", "refused"])
def test_call_ties_are_written_from_cupti_s_callbacks_at_the_call(tmp_path, fake_cupti, mode):
    """The library attached in a process and asked for call ties (what serve
    --py-stacks asks): no API record kind goes on; CUPTI's callback on the launch
    function goes on, and off at the stop; its call's record is written by the
    library at the call's exit: the kernel's correlation id, the calling thread,
    the entry's and exit's times in CUPTI's clock, its function's name before
    it; the header says so (API_CALLS). Asked for API records instead (--pid
    --gpu-time): the RUNTIME and DRIVER kinds, no callback. Ties asked of a
    CUPTI that refuses the callbacks: the GPU work alone (API_NONE), never
    every call's record."""
    log = tmp_path / "switches.log"
    run = call_ties_run(fake_cupti, "calls" if mode == "calls" else "ties",
                        FAKE_CUPTI_LOG=str(log),
                        FAKE_CUPTI_NO_CALLBACKS="1" if mode == "refused" else "0")
    assert run.returncode == 0, run.stdout + run.stderr
    out = json.loads(run.stdout)
    switches = [line.split() for line in log.read_text().splitlines()]
    apis = [r for r in out["records"] if r["type"] == 4]
    if mode == "refused":
        assert out["api_records"] == 3 and not apis  # GPUTIME_API_NONE
        assert not [s for s in switches if s[0] == "tie-on" or
                    (s[0] == "enable" and s[1] in (RUNTIME_KIND, DRIVER_KIND))], switches
        return
    if mode == "calls":
        assert out["api_records"] == 2  # GPUTIME_API_ALL
        assert ["enable", RUNTIME_KIND] in switches and ["enable", DRIVER_KIND] in switches
        assert not [s for s in switches if s[0] == "tie-on"]
        return
    assert out["api_records"] == 4, out  # GPUTIME_API_CALLS
    assert not [s for s in switches if s[0] == "enable" and s[1] in (RUNTIME_KIND, DRIVER_KIND)]
    ties = [s for s in switches if s[0].startswith("tie")]
    assert ties == [["tie-on", str(LAUNCH_CBID)], ["tie-off", str(LAUNCH_CBID)]], switches
    assert len(apis) == 1, out
    api = apis[0]
    assert (api["correlation"], api["cbid"], api["domain"]) == (7, LAUNCH_CBID, int(RUNTIME_KIND))
    assert api["tid"] > 0 and 0 < api["start"] <= api["end"]
    named = [i for i, r in enumerate(out["records"]) if r["type"] == 6]  # FUNCTION
    assert named and out["records"][named[0]]["text"] == "cudaLaunchKernel_v7000"
    assert named[0] < out["records"].index(api)
    kernels = [r for r in out["records"] if r["type"] == 1]
    assert [k["correlation"] for k in kernels] == [7]


def test_between_slices_the_callbacks_stay_on_and_tie_nothing(tmp_path, fake_cupti):
    """serve --duty's slices with call ties (--py-stacks): at a slice's end the
    GPU work's kinds go off and CUPTI's callback on the launch function stays
    on (switching it off and on under a running PyTorch job kills the job
    within a few hundred switches, CUDA 13), tying nothing: a launch made
    then has no record; one made in the next slice has its record. The
    callback goes off once, at the stop."""
    log = tmp_path / "switches.log"
    run = call_ties_run(fake_cupti, "ties", "pause", FAKE_CUPTI_LOG=str(log))
    assert run.returncode == 0, run.stdout + run.stderr
    out = json.loads(run.stdout)
    switches = [line.split() for line in log.read_text().splitlines()]
    assert [s for s in switches if s[0].startswith("tie")] == \
        [["tie-on", str(LAUNCH_CBID)], ["tie-off", str(LAUNCH_CBID)]], switches
    kernel = [s[0] for s in switches if s[1] == str(CONCURRENT_KERNEL)]
    assert kernel == ["enable", "disable", "enable", "disable"], switches  # start, slice, stop
    tied = [r["correlation"] for r in out["records"] if r["type"] == 4]
    assert 1000 not in tied and 1001 in tied, out


def test_call_ties_past_the_library_s_buffer_are_dropped_and_counted(tmp_path, fake_cupti):
    """More tied calls in one flush period than the library's buffer holds
    (262,144): the callback never waits or writes (it runs inside the
    program's CUDA calls); the ties past the buffer are dropped and counted in
    a DROPPED record, the others written whole, each once."""
    over = 5
    run = call_ties_run(fake_cupti, "ties", FAKE_CUPTI_TIES=str(TIE_RECORDS + over))
    assert run.returncode == 0, run.stdout + run.stderr
    out = json.loads(run.stdout)
    assert out["counts"]["4"] == TIE_RECORDS and out["dropped"] == over, out["counts"]
    apis = [r for r in out["records"] if r["type"] == 4]
    assert [r["correlation"] for r in apis] == list(range(7, 7 + len(apis)))


ATTACHED_LINES = Path(__file__).parent / "gpulines_attached.py"


def two_lines_running(tmp_path: Path, fake_cupti: Path, private: bool = False,
                      **env: str) -> tuple[subprocess.Popen, Path, Path]:
    """gpulines_attached.py running on the stand-in runtime, whose stand-in
    CUPTI logs each kernel it hands over (the log returned, with the runtime).
    `private`: a copy of the runtime of its own, for a serve on the node that
    must not go into another test's processes; `env` added to its environment."""
    from .test_gputime import fake_gpu  # noqa: PLC0415
    _, lib = fake_gpu()
    if private:
        lib = Path(private_copy(tmp_path, lib)[0])
    kernels = tmp_path / "kernels.log"
    work = subprocess.Popen(
        ["/usr/bin/python3.11", str(ATTACHED_LINES), str(lib)], stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "FAKE_CUPTI_PATH": str(fake_cupti),
             "FAKE_CUPTI_KERNELS": str(kernels), "FAKE_CUPTI_LAUNCHES_ONLY": "1", **env})
    assert work.stdout.readline() == "ready\n", work.stderr.read()
    return work, kernels, lib


def launches_stopped(work: subprocess.Popen) -> None:
    """gpulines_attached.py told to stop launching, and stopped."""
    work.stdin.write("stop\n")
    work.stdin.flush()
    assert work.stdout.readline() == "stopped\n"


def serve_lines(address: str, fake_cupti: Path, lib: Path, *args: str) -> subprocess.Popen:
    """serve --gpu-time --py-stacks of the stand-in runtime's launches, and `args`."""
    return subprocess.Popen(
        [sys.executable, "-m", "cudaprobe", "serve", "--prometheus", address, "--gpu-time",
         "--py-stacks", "--lib", str(lib), "-e", "cudaLaunchKernel", *args],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "CUDAPROBE_CUPTI": str(fake_cupti)})


@pytest.mark.skipif(not Path("/usr/bin/python3.11").exists(), reason="no /usr/bin/python3.11")
def test_serve_pid_py_stacks_joins_kernels_tied_by_callbacks_to_their_lines(tmp_path,
                                                                          fake_cupti):
    """serve --gpu-time --py-stacks --pid on a running Python program: the
    library goes in and ties each launch by CUPTI's callbacks at the call (the
    stand-in runtime has the stand-in CUPTI call them inside its launch, in
    CUPTI's own clock); serve aligns that clock on the ties and counts each
    kernel's GPU time under the Python line that launched it: exactly what the
    stand-in CUPTI handed over for each line, nothing unjoined; the program's
    exit status an untraced run's."""
    from .test_gputime import launch_line, scrape  # noqa: PLC0415
    work, kernels, lib = two_lines_running(tmp_path, fake_cupti)
    address = f"127.0.0.1:{free_port()}"
    serve = serve_lines(address, fake_cupti, lib, "--pid", str(work.pid))
    err = Lines(serve.stderr)
    try:
        err.wait_for(lambda s: f"the GPU-time library is recording in pid {work.pid} " in s,
                     "recording", timeout=HANG_S)
        deadline = time.monotonic() + HANG_S
        while len(kernels.read_text().splitlines() if kernels.exists() else []) < 400:
            assert time.monotonic() < deadline, err.text()
            time.sleep(0.1)
        launches_stopped(work)
        deadline = time.monotonic() + HANG_S
        # each line's kernels as the stand-in CUPTI handed them over, against the
        # metric, until the two agree twice running (CUPTI hands over each 0.5 s)
        agreed, truth, by_line = 0, {}, {}
        while agreed < 2 and time.monotonic() < deadline:
            truth = {launch_line(f, ATTACHED_LINES): 0 for f in ("heavy", "light")}
            for row in kernels.read_text().splitlines():
                ns = int(row.split()[1])
                truth[launch_line("light" if ns == 3_000 else "heavy", ATTACHED_LINES)] += ns
            metrics = scrape(address)
            by_line = {dict(k)["line"]: v for k, v in
                       metrics.get("cudaprobe_gpu_line_seconds", {}).items()}
            same = by_line == pytest.approx({k: ns / 1e9 for k, ns in truth.items()}, rel=1e-9)
            agreed = agreed + 1 if same else 0
            time.sleep(0.5)
        assert by_line == pytest.approx({k: ns / 1e9 for k, ns in truth.items()}, rel=1e-9), \
            err.text()
        assert min(truth.values()) > 0
        assert set(metrics["cudaprobe_gpu_line_unjoined"].values()) == {0}
    finally:
        assert stop(serve) == 0, err.text()
        work.stdin.close()
        assert work.wait(timeout=HANG_S) == 0, work.stderr.read()
    # its clock aligned once, by about the time the library's two reads of the clocks took
    moved = re.findall(rf"pid {work.pid}'s GPU timestamps moved by ([-+0-9.]+) µs", err.text())
    assert len(moved) == 1 and abs(float(moved[0])) < 1_000, err.text()
    assert "Traceback" not in err.text()


@pytest.mark.skipif(not Path("/usr/bin/python3.11").exists(), reason="no /usr/bin/python3.11")
def test_serve_duty_py_stacks_counts_every_kernel_by_name_and_the_slices_by_line(tmp_path,
                                                                                 fake_cupti):
    """serve --duty --gpu-time --py-stacks on a node, beside a running Python
    program whose every launch comes from one of two lines: CUPTI records all
    along (never switched with the slices), so the GPU time by kernel name is
    every kernel the stand-in handed over, once, unscaled; by line, only the
    kernels of launches the probes traced in a slice count, times 1/fraction:
    more than none, less than all of them times 1/fraction. A call that
    straddles a slice's start (begun before the probes were in, its tie
    stamped after) has no traced launch: at most one a slice. The program's
    exit status is an untraced run's."""
    from .test_gputime import scrape  # noqa: PLC0415
    work, kernels, lib = two_lines_running(tmp_path, fake_cupti, private=True)
    address = f"127.0.0.1:{free_port()}"
    serve = serve_lines(address, fake_cupti, lib, "--duty", "25%", "--duty-period", "1")
    err = Lines(serve.stderr)
    try:
        err.wait_for(lambda s: f"pid {work.pid}'s GPU timestamps moved" in s, "aligned",
                     timeout=HANG_S)
        deadline = time.monotonic() + HANG_S
        while windows(address) < 4:  # slices after the alignment
            assert time.monotonic() < deadline, err.text()
            time.sleep(0.1)
        launches_stopped(work)
        deadline = time.monotonic() + HANG_S
        agreed, lines, named = 0, 0.0, -1.0
        while agreed < 2 and time.monotonic() < deadline:  # settled: the same twice
            by_name = scrape(address, "_sum").get("cudaprobe_gpu_kernel_duration_seconds", {})
            now = (sum(scrape(address).get("cudaprobe_gpu_line_seconds", {}).values()),
                   sum(by_name.values()))
            agreed = agreed + 1 if now == (lines, named) else 0
            lines, named = now
            time.sleep(0.6)
        handed = sum(int(row.split()[1]) for row in kernels.read_text().splitlines()) / 1e9
        reasons = {dict(k)["reason"]: v for k, v in
                   scrape(address).get("cudaprobe_gpu_line_unjoined", {}).items()}
        unjoined = reasons.get("no_traced_launch", 0)
        slices = windows(address)
        assert named == pytest.approx(handed, rel=1e-9), (named, handed, err.text())
        assert 0 < lines < handed * 4 * 0.999, (lines, handed, err.text())
        # the call its thread began just before the probes were in, whose tie is
        # stamped just after (one thread here: one such call a slice at most)
        assert unjoined <= slices, (reasons, slices)
    finally:
        assert stop(serve) == 0, err.text()
        work.stdin.close()
        assert work.wait(timeout=HANG_S) == 0, work.stderr.read()
    assert "Traceback" not in err.text()


@pytest.mark.skipif(not Path("/usr/bin/python3.11").exists(), reason="no /usr/bin/python3.11")
def test_serve_py_stacks_says_a_process_whose_cupti_refuses_the_callbacks(fake_cupti):
    """serve --gpu-time --py-stacks --pid on a process whose CUPTI refuses the
    callbacks that tie launches: its GPU work alone is recorded, and serve says
    so at once, by its pid, once; the program unharmed."""
    from .test_gputime import fake_gpu  # noqa: PLC0415
    _, lib = fake_gpu()
    work = subprocess.Popen(
        ["/usr/bin/python3.11", str(ATTACHED_LINES), str(lib)], stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "FAKE_CUPTI_PATH": str(fake_cupti), "FAKE_CUPTI_NO_CALLBACKS": "1"})
    assert work.stdout.readline() == "ready\n", work.stderr.read()
    serve = subprocess.Popen(
        [sys.executable, "-m", "cudaprobe", "serve", "--prometheus", f"127.0.0.1:{free_port()}",
         "--gpu-time", "--py-stacks", "--pid", str(work.pid), "--lib", str(lib),
         "-e", "cudaLaunchKernel"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "CUDAPROBE_CUPTI": str(fake_cupti)})
    err = Lines(serve.stderr)
    said = f"pid {work.pid}: its CUPTI refused callbacks on the calls that launch"
    try:
        err.wait_for(lambda s: said in s, "the refusal said", timeout=HANG_S)
    finally:
        assert stop(serve) == 0, err.text()
        work.stdin.write("stop\n")
        work.stdin.close()
        assert work.wait(timeout=HANG_S) == 0, work.stderr.read()
    assert err.text().count(said) == 1 and "Traceback" not in err.text()


def test_on_a_node_the_processes_waiting_for_the_library_are_bounded(monkeypatch):
    """A storm of CUDA processes cannot grow what serve keeps: past
    NODE_WAITING waiting, a process is refused (busy), counted and said."""
    from cudaprobe.sessions import gputime_attach  # noqa: PLC0415
    monkeypatch.setattr(gputime_attach, "NODE_WORKERS", 1)
    monkeypatch.setattr(gputime_attach, "NODE_WAITING", 1)
    said, refused = [], []
    attach = GpuTimeAttach(said.append, keep=False)
    if attach.reader is None:
        pytest.skip(said[0])
    taken, go = threading.Event(), threading.Event()

    def hold(pid: int) -> str:
        taken.set()
        go.wait(HANG_S)
        return "it has exited"
    monkeypatch.setattr(attach, "_attach_quietly", hold)
    attach.on_refused = lambda pid, why: refused.append((pid, why))
    procs = [subprocess.Popen(["sleep", "600"]) for _ in range(3)]
    try:
        attach.found(procs[0].pid)
        assert taken.wait(HANG_S)  # the one worker holds it
        attach.found(procs[1].pid)  # waits
        attach.found(procs[2].pid)  # one too many
        assert refused == [(procs[2].pid, "1 processes are waiting for the GPU-time library "
                            "already: it runs on untouched")]
        attach.found(procs[2].pid)  # tried once an image, refused or not
        assert len(refused) == 1
    finally:
        go.set()
        for p in procs:
            p.kill()
            p.wait()
        attach.close()
    assert any(f"no GPU time for pid {procs[2].pid}" in s for s in said)


@pytest.mark.parametrize("mode", ["ties", "calls"])
def test_a_buffer_handed_back_by_the_stop_s_forced_flush_is_left_to_cupti(tmp_path, fake_cupti,
                                                                         mode):
    """The stop's forced flush hands back buffers whose records are not all
    complete, and CUPTI may write into one afterwards. Here the stand-in CUPTI
    writes into the buffer it handed back once the library's callback has
    returned, and glibc unmaps each freed buffer at once (a fixed mmap
    threshold): a buffer the library freed would make that write a fault that
    kills the program. The program runs on to its stop and the exit's forced
    flush, whole, its records read."""
    run = call_ties_run(fake_cupti, mode, FAKE_CUPTI_WRITE_AFTER_FORCED="1",
                        GLIBC_TUNABLES="glibc.malloc.mmap_threshold=131072")
    assert run.returncode == 0, (run.returncode, run.stdout, run.stderr)
    out = json.loads(run.stdout)
    assert [k["correlation"] for k in out["records"] if k["type"] == 1] == [7], out


def detach_run(fake_cupti, mode: str, *steps: str, log: Path,
               **env: str) -> tuple[dict, list[list[str]]]:
    """cupti_detach_workload.py's STEPS: its JSON, and the stand-in's log of
    switches (written to `log`)."""
    run = library_here_run("cupti_detach_workload.py", fake_cupti, mode, *steps,
                           FAKE_CUPTI_LOG=str(log), **env)
    assert run.returncode == 0, run.stdout + run.stderr
    return json.loads(run.stdout), [line.split() for line in log.read_text().splitlines()]


def detached(out: dict) -> list[tuple[str, int]]:
    """Each step and the control block's `detached` after it."""
    return [(s["step"], s["detached"]) for s in out["steps"]]


ASKED, DONE, KEPT = 1, 3, 4  # inject.h's DETACH_*


@pytest.mark.parametrize("mode", ["ties", "calls", "work"])
def test_cupti_leaves_the_process_at_the_exit_of_its_next_cuda_call_after_the_stop(
        tmp_path, fake_cupti, mode):
    """Turned off, CUPTI still sits in every CUDA call of a process until it is
    finalized, which CUPTI does safely only from a CUDA call's exit. The stop
    turns the recording off, flushes it, and asks CUPTI to leave: CUPTI's
    callbacks go on for every call; a call's entry does nothing; the next
    call's exit finalizes CUPTI, on the program's thread (the stand-in logs
    where it was called from), once. A second attach subscribes to CUPTI
    anew (CUPTI comes back), records, and its stop takes CUPTI out again."""
    out, log = detach_run(fake_cupti, mode, "attach", "stop", "entry", "exit", "exit",
                          "attach", "stop", "exit", log=tmp_path / "switches.log")
    assert detached(out) == [("attach", 0), ("stop", ASKED), ("entry", ASKED), ("exit", DONE),
                             ("exit", DONE), ("attach", 0), ("stop", ASKED), ("exit", DONE)]
    assert out["kernels"] == [1, 1]  # each attach's records came, the second after CUPTI left
    words = [w for w, _ in log]
    assert words.count("finalize-exit") == 2 and "finalize-outside" not in words, log
    assert words.count("subscribe") == 2 and "unsubscribe" not in words, log
    first = words.index("finalize-exit")
    # off, then asked to leave, then gone: nothing switched on between
    assert words.index("disable") < words.index("domain-on") < first, log
    assert "enable" not in words[words.index("disable"):first], log


def test_an_attach_before_cupti_left_takes_it_back(tmp_path, fake_cupti):
    """An attach after a stop whose CUPTI has not left yet (no CUDA call has
    returned since): CUPTI's callbacks on every call go off again, the same
    subscriber records on (no second subscribe, no finalize), and that
    recording's stop asks CUPTI to leave again, which the next call's exit
    does."""
    out, log = detach_run(fake_cupti, "ties", "attach", "stop", "attach", "stop", "exit",
                          log=tmp_path / "switches.log")
    assert detached(out) == [("attach", 0), ("stop", ASKED), ("attach", 0), ("stop", ASKED),
                             ("exit", DONE)]
    assert out["kernels"] == [1, 1]
    words = [w for w, _ in log]
    assert words.count("subscribe") == 1 and words.count("finalize-exit") == 1, log
    assert words.count("domain-on") == 4 and words.count("domain-off") == 2, log  # 2 domains


def test_a_forked_child_never_finalizes_its_parent_s_cupti(tmp_path, fake_cupti):
    """A child forked while the parent's CUPTI waits to leave: the child's CUDA
    call (failing there as CUDA does in a forked child) must not finalize a
    CUPTI whose threads stayed in the parent. The child finds the detach not
    its own (DETACH_KEPT in its copy) and finalizes nothing; the parent's next
    call's exit does, once."""
    out, log = detach_run(fake_cupti, "work", "attach", "stop", "child", "exit",
                          log=tmp_path / "switches.log")
    assert detached(out) == [("attach", 0), ("stop", ASKED), ("child", ASKED), ("exit", DONE)]
    assert out["steps"][2]["child"] == KEPT
    assert [w for w, _ in log].count("finalize-exit") == 1, log


@pytest.mark.parametrize("why", ["old", "keep"])
def test_cupti_stays_where_it_cannot_leave_safely(tmp_path, fake_cupti, why):
    """A CUPTI older than CUDA 12.6's (API version 24), which could crash a
    program with CUDA graphs when finalized, or a recording that asked to keep
    it (the cost benchmark's control): the stop unsubscribes as before, CUPTI
    stays (DETACH_KEPT), no call's exit finalizes it; an attach after it
    subscribes again and records."""
    env = {"FAKE_CUPTI_VERSION": "23"} if why == "old" else {}
    out, log = detach_run(fake_cupti, "work,keep" if why == "keep" else "work", "attach", "stop",
                          "exit", "attach", "stop", log=tmp_path / "switches.log", **env)
    assert detached(out) == [("attach", 0), ("stop", KEPT), ("exit", KEPT), ("attach", 0),
                             ("stop", KEPT)]
    assert out["kernels"] == [1, 1]
    words = [w for w, _ in log]
    assert words.count("unsubscribe") == 2 and words.count("subscribe") == 2, log
    assert not {"domain-on", "finalize-exit", "finalize-outside"} & set(words), log


@pytest.mark.skipif(not Path("/usr/bin/python3.11").exists(), reason="no /usr/bin/python3.11")
def test_serve_s_stop_takes_cupti_out_of_a_running_program(tmp_path, fake_cupti):
    """serve --gpu-time --py-stacks --pid on a running Python program that
    launches on: at serve's stop the library asks CUPTI to leave, and the
    program's next launch finalizes it as the launch returns; a second serve
    puts CUPTI back and counts the program's kernels again, and its stop takes
    CUPTI out again. The program's exit status is an untraced run's."""
    log = tmp_path / "switches.log"
    work, kernels, lib = two_lines_running(tmp_path, fake_cupti, FAKE_CUPTI_LOG=str(log))

    def count(word: str) -> int:
        return sum(1 for line in log.read_text().splitlines() if line.split()[0] == word)

    def handed_over() -> int:
        """Kernels the stand-in CUPTI has handed the library so far."""
        return len(kernels.read_text().splitlines()) if kernels.exists() else 0
    try:
        for cycle in (1, 2):
            address = f"127.0.0.1:{free_port()}"
            serve = serve_lines(address, fake_cupti, lib, "--pid", str(work.pid))
            err = Lines(serve.stderr)
            try:
                err.wait_for(lambda s: f"the GPU-time library is recording in pid {work.pid} "
                             in s, "recording", timeout=HANG_S)
                deadline = time.monotonic() + HANG_S
                before = handed_over()
                while handed_over() < before + 100:  # CUPTI in, recording the launches
                    assert time.monotonic() < deadline, err.text()
                    time.sleep(0.1)
                assert count("finalize-exit") == cycle - 1
            finally:
                assert stop(serve) == 0, err.text()
            assert "Traceback" not in err.text()
            deadline = time.monotonic() + HANG_S
            while count("finalize-exit") < cycle:  # the program's next launch, as it returns
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.05)
        assert (count("subscribe"), count("finalize-outside")) == (2, 0)
        launches_stopped(work)
    finally:
        work.stdin.close()
        assert work.wait(timeout=HANG_S) == 0, work.stderr.read()


def test_cudaprobe_says_when_cupti_stays_in_the_process(target_exe, fake_cupti):
    """A libcupti older than CUDA 12.6's: the stop leaves CUPTI in the process,
    and cudaprobe says so, once; with CUDA 13's, nothing is said (CUPTI leaves
    at the program's next CUDA call)."""
    said = "--gpu-time: CUPTI stays in pid {pid} after the stop"
    for version, stays in (("23", True), ("130001", False)):
        t = Target([str(target_exe), "1", "0"], env={"FAKE_CUPTI_VERSION": version})
        try:
            (cycle,) = helper(t.pid, 1, None, fake_cupti)
            assert cycle["kernels"] == ["fake_attached_kernel"]
            staying = [s for s in cycle["said"] if s.startswith(said.format(pid=t.pid))]
            assert len(staying) == stays, cycle["said"]
        finally:
            assert t.finish() == (UNTRACED, 0)
