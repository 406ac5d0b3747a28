"""Processes that tests start and keep running: a workload, and cudaprobe beside it.

Both are read line by line on a thread, so a test can wait for "iteration 20"
or for cudaprobe's "attached to pid N" without sleeping for a guessed time.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import threading
import time
from pathlib import Path

from ..conftest import (
    CUDA_HOME,
    HANG_S,
    NVCC,
    WORKLOAD_BIN,
    WORKLOADS,
    build_once,
    build_workload,
    cudaprobe_cmd,
)

WAIT_S = HANG_S
STARTED: list[subprocess.Popen] = []  # by Loop, Tracing and the like: see kill_left_running


def started(proc: subprocess.Popen) -> subprocess.Popen:
    """`proc`, to be killed after the test if the test leaves it running."""
    STARTED.append(proc)
    return proc


def kill_left_running() -> None:
    """After each test: what it started and left running (it failed midway) is
    killed and reaped, its stdin closed first (a cuda_loop under it then ends
    too), rather than left to load the machine for the tests that follow."""
    while STARTED:
        proc = STARTED.pop()
        if proc.stdin is not None:
            with contextlib.suppress(OSError):
                proc.stdin.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()

def state_of(pid: int) -> str:
    """A process's state letter (/proc/PID/stat): R, S, D, T, Z ..."""
    with open(f"/proc/{pid}/stat", "rb") as f:  # bytes: its comm may be any
        return f.read().rsplit(b")", 1)[1].split()[0].decode()


def wait_state(pid: int, state: str, wchan: str = "") -> None:
    """Until `pid` is in `state` (and, if given, waiting in a kernel function
    whose name holds `wchan`)."""
    deadline = time.monotonic() + WAIT_S
    while state_of(pid) != state or wchan not in Path(f"/proc/{pid}/wchan").read_text():
        assert time.monotonic() < deadline, f"pid {pid} never reached state {state} {wchan}"
        time.sleep(0.01)


# tests/workloads/cuda_loop.c: the calls of one iteration I, in order, and
# where each carries I (cudaGetDeviceCount carries none)
LOOP_ORDER = ["cudaGetDeviceCount", "cudaMalloc", "cudaMemset", "cudaLaunchKernel", "cudaFree"]


def build_loop(variant: str) -> Path:
    """cuda_loop.c as `shared` (gcc, libcudart.so), `static` (nvcc's default:
    the runtime linked in) or `dlopen` (no CUDA linked; dlopen on a stdin line)."""
    if variant == "shared":
        return build_workload("cuda_loop.c", "loop_shared")
    src = WORKLOADS / "cuda_loop.c"
    if variant == "static":
        return build_once(WORKLOAD_BIN / "loop_static", [src], lambda to: [
            str(NVCC), "-O1", "-g", "-o", str(to), str(src)])
    return build_once(WORKLOAD_BIN / f"loop_{variant}", [src], lambda to: [
        "gcc", "-O1", "-g", "-DLATE_DLOPEN", f"-I{CUDA_HOME}/include", "-o", str(to), str(src),
        "-ldl"])


class Lines:
    """The lines a stream gives, collected on a thread."""

    def __init__(self, stream) -> None:
        self.lines: list[str] = []
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream) -> None:
        for line in stream:
            with self._cond:
                self.lines.append(line.rstrip("\n"))
                self._cond.notify_all()
        with self._cond:
            self.lines.append(None)  # end of stream
            self._cond.notify_all()

    def wait_for(self, predicate, what: str, timeout: float = WAIT_S) -> str:
        deadline = time.monotonic() + timeout
        with self._cond:
            seen = 0
            while True:
                for line in self.lines[seen:]:
                    if line is None:
                        raise AssertionError(f"stream ended before {what}: {self.text()}")
                    if predicate(line):
                        return line
                seen = len(self.lines)
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"timed out waiting for {what}: {self.text()}")
                self._cond.wait(left)

    def until_end(self, timeout: float = WAIT_S) -> str:
        """Everything, once the stream has ended."""
        self._thread.join(timeout)
        assert not self._thread.is_alive(), f"the stream never ended: {self.text()}"
        return self.text()

    def text(self) -> str:
        self._thread.join(timeout=0)
        return "\n".join(line for line in list(self.lines) if line is not None)


class Loop:
    """A running cuda_loop (possibly under a prefix: unshare, cudaprobe -- ...).

    Its stdin stays open until stop(), which makes it finish the iteration it
    is in and exit: the last iteration it printed is then the last it ran.
    """

    def __init__(self, argv: list, env: dict | None = None) -> None:
        self.started = time.monotonic()
        self.proc = started(subprocess.Popen([str(a) for a in argv], stdin=subprocess.PIPE,
                                             stdout=subprocess.PIPE, text=True, env=env))
        self.out = Lines(self.proc.stdout)
        self.pid = self._value("pid")  # as the workload sees itself

    def _value(self, key: str, at_least: int = 0) -> int:
        line = self.out.wait_for(
            lambda s: s.startswith("{") and json.loads(s).get(key, -1) >= at_least,
            f'{{"{key}": >= {at_least}}}')
        return json.loads(line)[key]

    def age_s(self) -> float:
        """Seconds since it was started: more than any span of its life said since
        (the clock read before the process existed)."""
        return time.monotonic() - self.started

    def wait_iter(self, n: int) -> int:
        return self._value("iter", n)

    @property
    def iteration(self) -> int:
        iters = [json.loads(s)["iter"] for s in list(self.out.lines)
                 if s and s.startswith('{"iter"')]
        return iters[-1] if iters else -1

    def send(self, line: str) -> None:
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def stop(self) -> int:
        """End the run; returns the last iteration it ran."""
        self.proc.stdin.close()
        assert self.proc.wait(timeout=WAIT_S) == 0, self.out.text()
        self.out._thread.join(timeout=WAIT_S)
        return self.iteration


class Tracing:
    """`cudaprobe trace -o calls.jsonl ARGS` running in the background."""

    def __init__(self, tmp_path: Path, *args: str, name: str = "calls.jsonl") -> None:
        self.output = tmp_path / name
        self.proc = started(subprocess.Popen(
            cudaprobe_cmd("trace", "-o", str(self.output), *args), stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
        self.err = Lines(self.proc.stderr)

    def wait_for(self, text: str) -> str:
        return self.err.wait_for(lambda s: text in s, repr(text))

    def finish(self, timeout: float = WAIT_S) -> tuple[list[dict], dict, str]:
        """Wait for cudaprobe to end by itself; returns (calls, summary, stderr)."""
        assert self.proc.wait(timeout=timeout) == 0, self.err.text()
        self.err._thread.join(timeout=WAIT_S)
        return read_jsonl(self.output) + (self.err.text(),)

    def interrupt(self) -> tuple[list[dict], dict, str]:
        self.proc.send_signal(2)
        return self.finish()


def first_traced_iteration(output: Path, pid: int, timeout: float = WAIT_S) -> int:
    """Once the trace written so far (rows go out each poll) holds a call of
    `pid` that carries its iteration: that iteration. Its probes are in from
    then on, whatever the machine's speed, which the loop's own lines, read on
    a thread that may lag, cannot tell."""
    deadline = time.monotonic() + timeout
    while True:
        if output.exists():
            whole = output.read_text().rpartition("\n")[0]
            for line in whole.splitlines():
                call = json.loads(line)
                if call.get("pid") == pid and (i := iteration_of(call)) is not None:
                    return i
        assert time.monotonic() < deadline, f"no call of pid {pid} in {output}"
        time.sleep(0.05)


def read_jsonl(path: Path) -> tuple[list[dict], dict]:
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert rows and "summary" in rows[-1]
    return rows[:-1], rows[-1]["summary"]


def iteration_of(call: dict) -> int | None:
    args = call["args"]
    return {
        "cudaMalloc": lambda: args["size"] - 4096,
        "cudaMemset": lambda: args["value"],
        "cudaLaunchKernel": lambda: args["gridDim"][0] - 1,
        "cudaFree": lambda: int(args["devPtr"], 16) - 0x8000,
    }.get(call["event"], lambda: None)()


def check_iterations(calls: list[dict], last: int) -> int:
    """The calls are whole iterations of cuda_loop, in order, each once, from the
    first traced to `last` (the first may lack the calls made before attach).
    Returns the first iteration traced."""
    assert calls, "no calls traced"
    n = len(LOOP_ORDER)
    events = [c["event"] for c in calls]
    start = LOOP_ORDER.index(events[0])
    cycles = (start + len(events) + n - 1) // n
    assert events == (LOOP_ORDER * cycles)[start:start + len(events)]
    k0, i0 = next((k, iteration_of(c)) for k, c in enumerate(calls) if iteration_of(c) is not None)
    first = i0 - (start + k0) // n  # the iteration calls[0] belongs to
    for k, call in enumerate(calls):
        i = iteration_of(call)
        assert i is None or i == first + (start + k) // n, call
    assert events[-1] == "cudaFree" and iteration_of(calls[-1]) == last
    return first


def host_pid_of(parent: int, comm: str, timeout: float = WAIT_S) -> int:
    """The pid, as seen here, of the descendant of `parent` named `comm`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        todo = [parent]
        while todo:
            pid = todo.pop()
            try:
                if Path(f"/proc/{pid}/comm").read_text().strip() == comm:
                    return pid
                for task in os.listdir(f"/proc/{pid}/task"):
                    todo += map(int, Path(f"/proc/{pid}/task/{task}/children").read_text().split())
            except FileNotFoundError:
                continue
        time.sleep(0.05)
    raise AssertionError(f"no process named {comm} under pid {parent}")
