"""Attaching to processes already running: --pid, --comm, static runtimes,
several libcudart copies, late dlopen, mount and pid namespaces.

The workload (tests/workloads/cuda_loop.c) passes its iteration number in
the arguments, so each test checks that the trace holds whole iterations, in
order, each once, from where it attached to the last one the workload ran.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
from elftools.elf.elffile import ELFFile

from ..conftest import HANG_S, build_workload, cudaprobe_cmd, unique_name
from .conftest import expected_calls, probed_for_pid, run_cudaprobe
from .running import (
    Loop,
    Tracing,
    build_loop,
    check_iterations,
    first_traced_iteration,
    host_pid_of,
    read_jsonl,
    wait_state,
)

MORE = 20  # iterations the workload runs once cudaprobe said it is attached
PERIOD_S = 0.005  # the loops' period ("5"): an iteration takes at least that
TICK_S = 0.02  # /proc's process start times are in clock ticks (10 ms): spans may round up


def traced_since_attach(calls: list[dict], last: int) -> int:
    """check_iterations, and that all MORE iterations after the attach are there
    (the one under way when cudaprobe said so may be its first)."""
    first = check_iterations(calls, last)
    assert last - first >= MORE - 1, (first, last)
    return first


def by_pid(calls: list[dict]) -> dict[int, list[dict]]:
    out: dict[int, list[dict]] = {}
    for c in calls:
        out.setdefault(c["pid"], []).append(c)
    return out


def attach_and_run(tmp_path, loops: list[Loop], *args: str,
                   pids: list[int] | None = None) -> tuple[Tracing, list[int]]:
    """Attach with `trace ARGS` once every loop has run a few iterations, let
    each run MORE more from its first call traced, and stop them; returns
    cudaprobe, still running, and the last iteration of each loop. `pids`: the
    loops' pids as seen here, where they differ from their own."""
    for loop in loops:
        loop.wait_iter(3)
    tracing = Tracing(tmp_path, *args)
    tracing.wait_for("attached to")
    for loop, pid in zip(loops, pids or [loop.pid for loop in loops]):
        loop.wait_iter(first_traced_iteration(tracing.output, pid) + MORE)
    return tracing, [loop.stop() for loop in loops]


def test_pid_attaches_mid_run_and_ends_with_the_process(tmp_path, libcudart):
    loop = Loop([build_loop("shared"), "5"])
    tracing, (last,) = attach_and_run(tmp_path, [loop], "--pid", str(loop.pid))
    calls, summary, err = tracing.finish()
    first = traced_since_attach(calls, last)
    assert first >= 3
    assert summary["calls"] == len(calls) and summary["lost_total"] == 0
    # the iterations before the attach are said not to be in the trace, and when
    [span] = summary["untraced"]
    assert (span["pid"], span["process"], span["before"]) == (loop.pid, "loop_shared",
                                                              "the attach")
    assert first * PERIOD_S <= span["up_to_s"] <= loop.age_s() + TICK_S
    assert "calls made before the attach, or under way at it, are not included" in err
    assert f"not traced: pid {loop.pid} (loop_shared) ran " in err
    assert summary["libraries"] == [str(libcudart)]
    assert {(c["pid"], c["tid"], c["process"]) for c in calls} == {(loop.pid, loop.pid,
                                                                   "loop_shared")}
    assert f"pid {loop.pid} (loop_shared) exited" in err
    assert "every traced pid has exited: stopping" in err


def test_static_runtime_found_in_the_executable_by_pid(tmp_path):
    exe = build_loop("static")
    with open(exe, "rb") as f:  # nvcc's static runtime: the symbols are in .symtab only
        dynsym = ELFFile(f).get_section_by_name(".dynsym")
        assert dynsym is None or not dynsym.get_symbol_by_name("cudaMalloc")
    loop = Loop([exe, "5"])
    tracing, (last,) = attach_and_run(tmp_path, [loop], "--pid", str(loop.pid))
    calls, summary, err = tracing.finish()
    traced_since_attach(calls, last)
    assert summary["libraries"] == probed_for_pid(str(exe))
    assert str(exe) in err.splitlines()[0]
    assert all(c["ret_name"] == "cudaErrorInsufficientDriver" for c in calls)


@pytest.mark.parametrize("lib_arg", [False, True], ids=["found", "--lib"])
def test_static_runtime_with_command_traced_from_its_first_call(tmp_path, lib_arg):
    exe = build_loop("static")
    args = ["--lib", str(exe)] if lib_arg else []
    output = tmp_path / "calls.jsonl"
    loop = Loop([*cudaprobe_cmd("trace", "-o", str(output)), *args, "--", exe, "2"])
    loop.wait_iter(30)
    last = loop.stop()
    calls, summary = read_jsonl(output)
    assert check_iterations(calls, last) == 0
    assert calls[0]["event"] == "cudaGetDeviceCount"
    assert str(exe) in summary["libraries"]


def test_two_processes_with_their_own_libcudart(tmp_path, libcudart):
    copy = tmp_path / "copy"
    copy.mkdir()
    shutil.copy(libcudart, copy / "libcudart.so.13")
    exe = build_loop("shared")
    a = Loop([exe, "5"], env={**os.environ, "LD_LIBRARY_PATH": str(copy)})
    b = Loop([exe, "5"])
    assert str(copy / "libcudart.so.13") in open(f"/proc/{a.pid}/maps").read()
    tracing, lasts = attach_and_run(tmp_path, [a, b], "--pid", str(a.pid), "--pid", str(b.pid))
    calls, summary, err = tracing.finish()
    per_pid = by_pid(calls)
    assert set(per_pid) == {a.pid, b.pid}
    for loop, last in zip((a, b), lasts):
        traced_since_attach(per_pid[loop.pid], last)
    assert summary["libraries"] == sorted([str(copy / "libcudart.so.13"), str(libcudart)])
    assert summary["lost_total"] == 0
    assert "they have exited" in err and err.count(" exited") >= 2


def private_libcudart(tmp_path, libcudart) -> str:
    """A copy no default search finds: only the process's own dlopen() names it."""
    path = tmp_path / "private" / "libcudart.so.13"
    path.parent.mkdir()
    shutil.copy(libcudart, path)
    return str(path)


def load_late_and_run(loop: Loop, tracing: Tracing, lib: str) -> tuple[int, str]:
    """Let a `dlopen` loop load `lib`; once cudaprobe has attached it (the loop
    waits: the probes of a library found late start one by one, docs/attach.md),
    let it run MORE iterations and stop. Returns the last iteration and
    cudaprobe's line about it."""
    loop.send("go")
    line = tracing.wait_for(f"maps {lib}: ")
    loop.send("go on")
    loop.wait_iter(MORE)
    return loop.stop(), line


def test_pid_not_using_cuda_yet_is_an_error_and_wait_picks_up_dlopen(tmp_path, libcudart):
    lib = private_libcudart(tmp_path, libcudart)
    loop = Loop([build_loop("dlopen"), "5", "1000000", lib])
    refused = run_cudaprobe("trace", "--pid", str(loop.pid), timeout=HANG_S)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1
    assert f"pid {loop.pid} (loop_dlopen) is not using CUDA" in refused.stderr
    assert "cudaLaunchKernel" in refused.stderr and "--wait" in refused.stderr

    tracing = Tracing(tmp_path, "--pid", str(loop.pid), "--wait")
    tracing.wait_for("attached to")
    last, _line = load_late_and_run(loop, tracing, lib)
    calls, summary, _err = tracing.finish()
    assert traced_since_attach(calls, last) == 0  # from its first call
    assert summary["libraries"] == probed_for_pid(lib)


def test_comm_traces_present_and_future_processes_of_that_name_only(tmp_path):
    exe = build_loop("shared")
    # names of this run's own: a suite running beside this one has its loops too
    named, other = tmp_path / unique_name("cpc"), tmp_path / unique_name("cpo")
    shutil.copy(exe, named)
    shutil.copy(exe, other)
    present = Loop([named, "5"])
    present.wait_iter(3)
    tracing = Tracing(tmp_path, "--comm", named.name)
    tracing.wait_for(f"following every process named '{named.name}'")
    future, stranger = Loop([named, "5"]), Loop([other, "5"])
    for loop in (present, future):
        loop.wait_iter(first_traced_iteration(tracing.output, loop.pid) + MORE)
    stranger.wait_iter(MORE)
    lasts = [loop.stop() for loop in (present, future, stranger)]
    calls, _summary, _err = tracing.interrupt()
    per_pid = by_pid(calls)
    assert set(per_pid) == {present.pid, future.pid}
    assert traced_since_attach(per_pid[present.pid], lasts[0]) >= 3
    # the one running at the start ran untraced before the attach; the later one
    # was held at its open of libcudart until its own probes were in (links per
    # process: the stranger takes no trap), and is traced from its first call
    assert [(u["pid"], u["before"]) for u in _summary["untraced"]] == [
        (present.pid, "the attach")]
    assert check_iterations(per_pid[future.pid], lasts[1]) == 0


def test_comm_picks_up_a_library_loaded_after_attach(tmp_path, libcudart):
    lib = private_libcudart(tmp_path, libcudart)
    named = tmp_path / unique_name("cpl")
    shutil.copy(build_loop("dlopen"), named)
    tracing = Tracing(tmp_path, "--comm", named.name)
    tracing.wait_for("following every process named")
    loop = Loop([named, "5", "1000000", lib])  # like `import torch` in a python traced by name
    last, line = load_late_and_run(loop, tracing, lib)
    assert line.startswith(f"cudaprobe: pid {loop.pid} ({named.name}) maps {lib}: ")
    assert "its calls there in the up to " in line and line.endswith("s before are not included")
    calls, summary, _err = tracing.interrupt()
    first = traced_since_attach(calls, last)
    assert first == 0  # from its first call
    assert lib in summary["libraries"]
    # it mapped no probed library before: its own probes came with the one it
    # loaded, the one span not traced
    [span] = summary["untraced"]
    assert (span["pid"], span["before"]) == (loop.pid, lib)
    assert first * PERIOD_S <= span["up_to_s"] <= loop.age_s() + TICK_S


def test_command_child_with_its_own_libcudart_says_how_long_it_went_untraced(tmp_path,
                                                                             libcudart):
    # env execs the loop with a libcudart no search finds up front: probed from
    # the next rescan of its maps, and the summary says how long that took at most
    lib = private_libcudart(tmp_path, libcudart)
    out = tmp_path / "calls.jsonl"
    loop = Loop(cudaprobe_cmd("trace", "-o", str(out), "--", "env",
                              f"LD_LIBRARY_PATH={os.path.dirname(lib)}", build_loop("shared"), "5"))
    # however long the rescan takes to come: MORE iterations from its first call traced
    loop.wait_iter(first_traced_iteration(out, loop.pid) + MORE)
    last = loop.stop()
    calls, summary = read_jsonl(out)
    first = check_iterations(calls, last)
    assert lib in summary["libraries"]
    [span] = summary["untraced"]
    assert (span["pid"], span["process"], span["before"]) == (loop.pid, "loop_shared", lib)
    # what was missed, `first` iterations of 5 ms at least, fits in the span said
    assert first * PERIOD_S <= span["up_to_s"] <= loop.age_s() + TICK_S


def test_process_in_other_mount_and_pid_namespaces(tmp_path, libcudart):
    hidden = tmp_path / "ns"  # a tmpfs there, seen only inside the namespace
    hidden.mkdir()
    script = (f"mount -t tmpfs none {hidden} && cp {libcudart} {hidden}/ && "
              f"LD_LIBRARY_PATH={hidden} exec {build_loop('shared')} 5")
    loop = Loop(["unshare", "-m", "-p", "--fork", "--mount-proc", "sh", "-c", script])
    host_pid = host_pid_of(loop.proc.pid, "loop_shared")
    assert loop.pid == 1 and host_pid != 1
    assert not (hidden / "libcudart.so.13").exists()
    tracing, (last,) = attach_and_run(tmp_path, [loop], "--pid", str(host_pid), pids=[host_pid])
    calls, summary, err = tracing.finish()
    traced_since_attach(calls, last)
    assert {c["pid"] for c in calls} == {host_pid}  # host pids, not the namespace's
    assert summary["libraries"] == probed_for_pid(
        f"/proc/{host_pid}/root{hidden}/libcudart.so.13")
    assert f"pid {host_pid} (loop_shared) exited" in err


def test_pid_that_does_not_exist_is_one_line(tmp_path):
    pid = int(open("/proc/sys/kernel/pid_max").read()) - 1
    while os.path.exists(f"/proc/{pid}"):
        pid -= 1
    p = run_cudaprobe("trace", "--pid", str(pid))
    assert p.returncode == 2
    assert p.stderr == f"cudaprobe: pid {pid}: no such process\n"


def test_pid_with_command_is_a_usage_error():
    p = run_cudaprobe("trace", "--pid", "1", "--", "true")
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "--pid" in p.stderr


def test_comm_with_a_newline_is_echoed_escaped_once():
    """--comm $'a\\nb': the name is said as given, its newline shown as \\n (one
    backslash), on one line."""
    proc = run_cudaprobe("trace", "--comm", "a\nb", "-d", "0.3")
    assert proc.returncode == 0, proc.stderr
    assert "following every process named 'a\\nb', present and future" in proc.stderr


@pytest.mark.parametrize("select", ["pid", "comm"])
def test_a_process_whose_main_thread_exited_is_traced_through_its_threads(tmp_path, libcudart,
                                                                          select):
    """leader_exit's main thread calls pthread_exit: /proc/PID/maps is empty, the
    process's memory is found through its live thread, and the calls that
    thread makes after the attach are all traced (the kernel gives such a
    process no per-process link: its library is probed whole, said once)."""
    named = tmp_path / unique_name("lx")
    shutil.copy(build_workload("leader_exit.c"), named)
    app = subprocess.Popen([str(named), "50"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                           text=True)
    try:
        assert app.stdout.readline() == '{"ready":1}\n'
        wait_state(app.pid, "Z")  # its main thread: gone, the worker waits on stdin
        target = ["--pid", str(app.pid)] if select == "pid" else ["--comm", named.name]
        tracing = Tracing(tmp_path, "--lib", str(libcudart), *target)
        tracing.wait_for(f"pid {app.pid}: its main thread has exited (pthread_exit)")
        tracing.wait_for("attached to" if select == "pid" else "following every process")
        app.stdin.write("go\n")
        app.stdin.flush()
        lines = []
        while (line := app.stdout.readline()) != '{"done":1}\n':
            lines.append(line)
        calls, summary, err = tracing.interrupt()
    finally:
        app.stdin.close()
        assert app.wait(timeout=HANG_S) == 0
    assert len(expected_calls("".join(lines))) == 50
    assert [c["event"] for c in calls] == ["cudaGetDeviceCount"] * 50, err
    assert {c["pid"] for c in calls} == {app.pid} and summary["lost_total"] == 0
