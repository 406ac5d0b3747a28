"""Cost only where asked: with --pid, --comm and -- COMMAND the probes are attached per
process (uprobe_multi links that take a pid), so a process that maps the same
library but is not traced carries no breakpoint and takes no trap; children
of a traced process get links of their own when they appear.

A uprobe is an int3 (0xcc) written into the process's copy of the page: the
tests read the first byte of cudaMalloc in each process's memory."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from cudaprobe.targets.elfsyms import read_symbols

from ..conftest import cudaprobe_cmd, unique_name
from .running import (
    Loop,
    Tracing,
    build_loop,
    check_iterations,
    first_traced_iteration,
    read_jsonl,
)

INT3 = 0xCC


def first_byte(pid: int, library: str, symbol: str) -> int:
    """The byte at `symbol` of `library` as process `pid` sees it."""
    offset = read_symbols(library).functions[symbol]
    real = os.path.realpath(library)
    for line in open(f"/proc/{pid}/maps"):
        fields = line.split()
        if len(fields) < 6 or os.path.realpath(fields[5]) != real:
            continue
        start, end = (int(x, 16) for x in fields[0].split("-"))
        map_offset = int(fields[2], 16)
        if map_offset <= offset < map_offset + (end - start):
            with open(f"/proc/{pid}/mem", "rb") as mem:
                mem.seek(start + offset - map_offset)
                return mem.read(1)[0]
    raise AssertionError(f"{symbol} of {library} is not mapped by {pid}")


def mapped_libc(pid: int) -> str:
    """The glibc the process maps, by its real path."""
    for line in open(f"/proc/{pid}/maps"):
        fields = line.split()
        if len(fields) == 6 and os.path.basename(fields[5]).startswith("libc.so"):
            return os.path.realpath(fields[5])
    raise AssertionError(f"pid {pid} maps no glibc")


def private_copy(tmp_path: Path, libcudart: Path) -> tuple[str, dict]:
    """A libcudart of the test's own, and the environment that loads it: no other
    tracer on this machine (system-wide, on the toolkit's copy) has breakpoints in it."""
    copy = tmp_path / "lib" / "libcudart.so.13"
    copy.parent.mkdir()
    shutil.copy(libcudart, copy)
    return str(copy), {**os.environ, "LD_LIBRARY_PATH": str(copy.parent)}


def test_pid_puts_breakpoints_in_that_process_only(tmp_path, libcudart):
    exe = build_loop("shared")
    libcudart, env = private_copy(tmp_path, libcudart)
    traced, other = Loop([exe, "5"], env=env), Loop([exe, "5"], env=env)
    traced.wait_iter(2)
    other.wait_iter(2)
    assert first_byte(other.pid, libcudart, "cudaMalloc") != INT3
    tracing = Tracing(tmp_path, "--pid", str(traced.pid))
    tracing.wait_for("attached to")
    traced.wait_iter(first_traced_iteration(tracing.output, traced.pid) + 3)
    other.wait_iter(other.iteration + 3)
    assert first_byte(traced.pid, libcudart, "cudaMalloc") == INT3
    assert first_byte(other.pid, libcudart, "cudaMalloc") != INT3
    # the fork hold (its children held as fork returns in them): in the traced
    # process's glibc alone, though both map the same file
    libc = mapped_libc(traced.pid)
    assert mapped_libc(other.pid) == libc
    assert first_byte(traced.pid, libc, "_Fork") == INT3
    assert first_byte(other.pid, libc, "_Fork") != INT3
    last = traced.stop()
    other.stop()
    calls, summary, _err = tracing.finish()
    check_iterations(calls, last)
    assert {c["pid"] for c in calls} == {traced.pid}
    assert summary["lost_total"] == 0


def test_command_and_its_children_are_traced_and_nothing_else(tmp_path, libcudart):
    exe = build_loop("shared")
    copy, env = private_copy(tmp_path, libcudart)
    other = Loop([exe, "5"], env=env)
    other.wait_iter(2)
    output = tmp_path / "calls.jsonl"
    # the loop is a child of the command (sh forks it: `; true` follows), held at
    # its open of libcudart until its own links are in
    run = Loop([*cudaprobe_cmd("trace", "-o", str(output), "--", "sh", "-c",
                               f"sleep 0.5; {exe} 5; true")])
    child = run.pid
    # its calls are traced from its first (docs/attach.md); 20 iterations more
    first = first_traced_iteration(output, child)
    assert first == 0
    assert first_byte(child, str(libcudart), "cudaMalloc") == INT3
    run.wait_iter(first + 20)
    assert first_byte(other.pid, copy, "cudaMalloc") != INT3
    last = run.stop()
    other.stop()
    calls, summary = read_jsonl(output)
    assert {c["pid"] for c in calls} == {child}
    assert check_iterations(calls, last) == 0 and last >= 20
    assert summary["lost_total"] == 0


def test_comm_puts_breakpoints_in_processes_of_that_name_only(tmp_path, libcudart):
    """--comm: the processes of the name, running at the start or exec'd later,
    get links of their own; one of another name mapping the very same library
    file carries no breakpoint."""
    copy, env = private_copy(tmp_path, libcudart)
    named, stranger = tmp_path / unique_name("ppn"), tmp_path / unique_name("ppo")
    shutil.copy(build_loop("shared"), named)
    shutil.copy(build_loop("shared"), stranger)
    present, other = Loop([named, "5"], env=env), Loop([stranger, "5"], env=env)
    present.wait_iter(2)
    other.wait_iter(2)
    tracing = Tracing(tmp_path, "--comm", named.name, "--lib", copy)
    tracing.wait_for("following every process named")
    future = Loop([named, "5"], env=env)
    for loop in (present, future):
        loop.wait_iter(first_traced_iteration(tracing.output, loop.pid) + 3)
        assert first_byte(loop.pid, copy, "cudaMalloc") == INT3
    other.wait_iter(other.iteration + 3)
    assert first_byte(other.pid, copy, "cudaMalloc") != INT3
    for loop in (present, future, other):
        loop.stop()
    calls, summary, _err = tracing.interrupt()
    assert {c["pid"] for c in calls} == {present.pid, future.pid}
    assert summary["lost_total"] == 0
