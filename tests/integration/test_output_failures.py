"""When writing the output fails, cudaprobe ends cleanly (sessions/trace.py,
output/files.py): probes detached, the rows not written counted as lost by
cause, whole lines in the file, one line on stderr, -- COMMAND's status kept
(or exit 1 with --pid), and the traced program unharmed. A pipe closed by its
reader is a quiet exit. Real failures: a 256 KiB tmpfs, /dev/full, a closed
pipe, stdout closed."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from ..conftest import HANG_S, build_workload, cudaprobe_cmd
from .running import Lines, host_pid_of, started

LOOPS = 20000  # 60000 calls: ~15 MB of JSONL, far more than the tmpfs holds
SUMMARY = re.compile(r"^(\d+) calls in .*, (\d+) lost \((.*)\)$", re.M)


@pytest.fixture
def small_fs(tmp_path: Path):
    """A 256 KiB tmpfs, mounted for this test alone."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mnt = tmp_path / "small"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)], check=True)
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=True)


def steady(loops: int = LOOPS, status: int = 7) -> list[str]:
    return [str(build_workload("steady_calls.c")), str(loops), "0", str(status)]


def trace(libcudart: Path, *args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(cudaprobe_cmd("trace", "--lib", str(libcudart), *args),
                          capture_output=True, text=True, timeout=HANG_S, **kwargs)


def assert_clean_end(proc: subprocess.CompletedProcess | str, what: str, cause: str) -> int:
    """One line saying what failed (in `proc`'s stderr, or that text); returns
    the calls it counted as not written."""
    stderr = proc if isinstance(proc, str) else proc.stderr
    assert "Traceback" not in stderr and "internal error" not in stderr
    failures = [line for line in stderr.splitlines() if "failed" in line]
    assert len(failures) == 1, stderr
    m = re.fullmatch(rf"cudaprobe: writing {re.escape(what)} failed: {cause}: tracing stopped, "
                     r"(\d+) calls not written \(counted as lost\)", failures[0])
    assert m, failures[0]
    if "calls in" in stderr:  # a summary on stderr (not the table's, on stdout): before
        assert stderr.index("calls in") < stderr.index(failures[0])
    return int(m.group(1))


def test_full_disk_keeps_whole_rows_counts_the_rest_and_the_commands_status(
        libcudart, small_fs):
    """steady_calls runs until the test stops it, after the failure was said:
    its loop counts, asked with SIGUSR1, show that the calls counted were all
    made before then, and that it went on untraced."""
    out = small_fs / "calls.jsonl"
    proc = started(subprocess.Popen(
        cudaprobe_cmd("trace", "--lib", str(libcudart), "-o", str(out), "--", *steady(0)),
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    stdout, stderr = Lines(proc.stdout), Lines(proc.stderr)
    stderr.wait_for(lambda s: "failed" in s, "the failure said")
    workload, so_far = host_pid_of(proc.pid, "steady_calls"), [-1]
    try:
        for _ in range(2):  # N1 loops by the time it was said; then N2 > N1, untraced
            os.kill(workload, signal.SIGUSR1)
            line = stdout.wait_for(lambda s: s.startswith("so far=") and
                                   int(s[7:]) > so_far[-1], "the loops so far")
            so_far.append(int(line[7:]))
    finally:
        os.kill(workload, signal.SIGTERM)  # and it exits (its loop runs forever)
    assert proc.wait(timeout=HANG_S) == 7  # the command's own status
    err = stderr.until_end()
    assert "stopped by signal 15" in stdout.until_end()  # ran on, untraced after the failure
    not_written = assert_clean_end(err, str(out), "No space left on device")
    text = out.read_text()
    assert text.endswith("\n")
    rows = [json.loads(line) for line in text.splitlines()]  # every line whole
    rows = [r for r in rows if "summary" not in r]
    assert rows and all(r["event"] in ("cudaGetDeviceCount", "cudaMalloc", "cudaFree")
                        for r in rows)
    calls, lost, causes = SUMMARY.search(err).groups()
    assert causes == f"output_enospc={not_written}" and int(lost) == not_written > 0
    assert len(rows) + not_written == int(calls)  # every call a row or counted
    # the probes came off before the failure was said, and the loop ran on
    assert int(calls) <= 3 * so_far[1] < 3 * so_far[2]


@pytest.mark.parametrize("where", ["-o /dev/full", "stdout on /dev/full", "stdout closed"])
def test_output_that_cannot_take_a_byte(libcudart, where):
    if where == "-o /dev/full":
        proc = trace(libcudart, "-o", "/dev/full", "--force", "-f", "jsonl", "--", *steady())
        name, cause = "/dev/full", "No space left on device"
    else:
        full = where == "stdout on /dev/full"
        with open("/dev/full", "w") as dev_full:
            proc = subprocess.run(
                cudaprobe_cmd("trace", "--lib", str(libcudart), "-o", "-", "--", "sh", "-c",
                              f"exec {' '.join(steady())} >/dev/null"),
                stdout=dev_full if full else None, stderr=subprocess.PIPE, text=True,
                timeout=HANG_S, preexec_fn=None if full else (lambda: os.close(1)))
        name, cause = "stdout", "No space left on device" if full else "stdout is closed"
    assert proc.returncode == 7, proc.stderr
    assert_clean_end(proc, name, cause)


def test_a_reader_that_closes_the_pipe_is_a_quiet_exit(libcudart):
    """`cudaprobe trace -f jsonl -- COMMAND | head -1`: no message, the command's status."""
    sh = (f"{' '.join(cudaprobe_cmd('trace', '--lib', str(libcudart), '-f', 'jsonl', '-o', '-'))}"
          " -- "
          f"sh -c 'exec {' '.join(steady())} >/dev/null' | head -1; exit ${{PIPESTATUS[0]}}")
    proc = subprocess.run(["bash", "-c", sh], capture_output=True, text=True, timeout=HANG_S)
    assert proc.returncode == 7, proc.stderr
    assert json.loads(proc.stdout)["event"] == "cudaGetDeviceCount"
    assert "Traceback" not in proc.stderr and "failed" not in proc.stderr
    assert re.search(r", (\d+) lost \(output_epipe=\1\)$", proc.stderr, re.M), proc.stderr


def test_pid_with_a_full_output_exits_1_and_leaves_the_program_running(libcudart):
    workload = subprocess.Popen(steady(0, 0)[:2] + ["1000", "0"], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + HANG_S  # until its loader has mapped libcudart
        while "libcudart" not in Path(f"/proc/{workload.pid}/maps").read_text():
            assert time.monotonic() < deadline, "the workload never mapped libcudart"
            time.sleep(0.01)
        proc = trace(libcudart, "--pid", str(workload.pid), "-o", "/dev/full", "--force",
                     "-f", "jsonl")
        assert proc.returncode == 1, proc.stderr
        assert_clean_end(proc, "/dev/full", "No space left on device")
        time.sleep(0.2)
        assert workload.poll() is None  # unharmed, running on
    finally:
        workload.send_signal(signal.SIGTERM)
        assert workload.wait(timeout=HANG_S) == 0


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_stopped_before_the_command_ran_leaves_the_old_file(libcudart, tmp_path, fmt):
    """--force, then SIGTERM while attaching: the command never runs, and the file
    --force would have replaced keeps its old trace (no empty trailer, no header)."""
    out = tmp_path / f"calls.{fmt}"
    out.write_text("the previous trace\n")
    proc = subprocess.Popen(cudaprobe_cmd("trace", "--lib", str(libcudart), "-o", str(out),
                                          "--force", "--", *steady(10, 0)),
                            stderr=subprocess.PIPE, text=True)
    # SIGTERM caught: the session has started, and compiles and attaches (a second or so)
    # before it lets the command run
    deadline = time.monotonic() + HANG_S
    while not _catches(proc.pid, signal.SIGTERM) and time.monotonic() < deadline:
        time.sleep(0.005)
    proc.send_signal(signal.SIGTERM)
    stderr = proc.stderr.read()
    assert proc.wait(timeout=HANG_S) == 128 + signal.SIGTERM, stderr
    assert "steady_calls was started: it did not run" in stderr
    assert out.read_text() == "the previous trace\n"


def _catches(pid: int, sig: int) -> bool:
    status = Path(f"/proc/{pid}/status").read_text()
    caught = int(re.search(r"^SigCgt:\s*([0-9a-f]+)", status, re.M).group(1), 16)
    return bool(caught & (1 << (sig - 1)))


@pytest.mark.parametrize("where", ["/dev/full", "closed", "head"])
def test_stats_report_that_cannot_be_written(libcudart, where):
    """stats writes its report at the end: one line (none for a closed pipe), and
    the command's status all the same."""
    argv = cudaprobe_cmd("stats", "--lib", str(libcudart), "--", "sh", "-c",
                         f"exec {' '.join(steady(100))} >/dev/null")
    if where == "head":
        proc = subprocess.run(["bash", "-c", " ".join(argv[:-1]) + f" '{argv[-1]}' | head -1; "
                               "exit ${PIPESTATUS[0]}"], capture_output=True, text=True,
                              timeout=HANG_S)
        assert proc.stdout.startswith("cudaprobe stats:")
    else:
        with open("/dev/full", "w") as dev_full:
            proc = subprocess.run(argv, stdout=dev_full if where == "/dev/full" else None,
                                  stderr=subprocess.PIPE, text=True, timeout=HANG_S,
                                  preexec_fn=(lambda: os.close(1)) if where == "closed" else None)
    assert proc.returncode == 7, proc.stderr
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr
    said = [line for line in proc.stderr.splitlines() if "failed" in line]
    assert said == {"/dev/full": ["cudaprobe: writing output failed: No space left on device"],
                    "closed": ["cudaprobe: writing stdout failed: stdout is closed"],
                    "head": []}[where]


@pytest.mark.parametrize("fmt", ["table", "jsonl"])
def test_an_output_that_fails_at_once_does_not_say_the_command_made_no_call(libcudart, fmt):
    """Tracing stopped at the first write: the command's calls after it were not
    traced, which is said; not that it made none."""
    exe = build_workload("runtime_calls.c")
    proc = trace(libcudart, "-o", "/dev/full", "--force", "-f", fmt, "--", str(exe), "2")
    assert proc.returncode == 0, proc.stderr  # the command's own status
    assert "made none of the traced calls" not in proc.stderr
    assert "made no CUDA call" not in proc.stderr
    assert "writing /dev/full failed: No space left on device: tracing stopped" in proc.stderr


@pytest.mark.parametrize("where", ["stdout on /dev/full", "a full tmpfs"])
@pytest.mark.parametrize("fmt", ["csv", "json", "chrome", "table"])
def test_a_header_that_cannot_be_written_counts_the_commands_calls_as_lost(
        libcudart, small_fs, fmt, where):
    """A format that writes a header first: the header's failure does not take
    the probes off before the command has run (it did, and its 300 calls were
    "none"); tracing stops at the first rows, which are counted as lost, as
    JSONL's are."""
    command = ["--", "sh", "-c", f"exec {' '.join(steady(100))} >/dev/null"]
    if where == "a full tmpfs":
        (small_fs / "filler").write_bytes(b"x" * (256 << 10))  # as much as it takes
        out = small_fs / f"calls.{fmt}"
        proc = trace(libcudart, "-f", fmt, "-o", str(out), *command)
        name = str(out)
        assert out.read_text() == ""  # not a byte of it fitted
    else:
        with open("/dev/full", "w") as dev_full:
            proc = subprocess.run(
                cudaprobe_cmd("trace", "--lib", str(libcudart), "-f", fmt, "-o", "-", *command),
                stdout=dev_full, stderr=subprocess.PIPE, text=True, timeout=HANG_S)
        name = "stdout"
    assert proc.returncode == 7, proc.stderr
    not_written = assert_clean_end(proc, name, "No space left on device")
    assert not_written > 0  # the calls made while traced, each one counted
    assert "made none" not in proc.stderr and "made no CUDA call" not in proc.stderr
    summary = SUMMARY.search(proc.stderr)  # on stderr where the rows are not a table
    if summary is not None:
        calls, lost, causes = summary.groups()
        assert int(calls) == int(lost) == not_written
        assert causes == f"output_enospc={not_written}"
