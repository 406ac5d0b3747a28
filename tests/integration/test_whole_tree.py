"""-- COMMAND traces every process the command starts, from its first call:
wrapper shells, loops, Python's subprocess, a double fork whose grandchild
outlives its parent, exec without fork, posix_spawn (vfork). A child is held
at its open of the probed library until its own probes are in
(cudaprobe/probe/opengate.py), so runtime_calls, which calls at once and
exits within milliseconds, is whole however soon it runs; a process outside
the tree that opens the same file takes no breakpoint.

Each count is compared with what the workloads printed about their calls."""

from __future__ import annotations

import collections
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ..conftest import (
    CUDA_HOME,
    HANG_S,
    WORKLOAD_BIN,
    WORKLOADS,
    build_once,
    build_workload,
    cudaprobe_cmd,
    unique_name,
)
from .conftest import expected_calls, trace_jsonl
from .running import (
    LOOP_ORDER,
    Lines,
    Loop,
    Tracing,
    build_loop,
    check_iterations,
    read_jsonl,
    started,
    wait_state,
)
from .test_per_process import INT3, first_byte, private_copy
from .test_stats import stats_json
from .test_trace_nccl import nccl_calls

PYTHON = sys.executable


def shapes(app: str, lib: str = "lib") -> dict[str, tuple[list[str], int]]:
    """Each command, and how many runs of `app` (1 iteration, 1 thread) it makes
    (`lib`: the probed library, which some parents map before they start it)."""
    run = f"{app} 1 1"
    mapping = "import ctypes, os, subprocess, sys; ctypes.CDLL(sys.argv[2]); a = sys.argv[1]; "
    return {
        "sh -c 'app; true'": (["sh", "-c", f"{run}; true"], 1),
        "bash loop": (["bash", "-c", f"for i in 1 2 3; do {run}; done"], 3),
        "python subprocess.run": (
            [PYTHON, "-c", "import subprocess, sys; subprocess.run([sys.argv[1], '1', '1'])",
             app], 1),
        # the subshell exits at once; its child, app, runs on after it
        "double fork": (["sh", "-c", f"( {run} & ); sleep 0.01; true"], 1),
        "exec without fork": (["sh", "-c", f"exec {run}"], 1),
        "posix_spawn": (
            [PYTHON, "-c", "import os, sys; a = sys.argv[1]; "
             "os.waitpid(os.posix_spawn(a, [a, '1', '1'], os.environ), 0)", app], 1),
        "make-like nesting": (["sh", "-c", f"sh -c '{run}' && bash -c '{run}; {run}'"], 3),
        # a parent that maps the library (as torchrun's agent, which imports torch,
        # does): its vfork children run nothing before their exec, held by the gate
        "subprocess.run from a process mapping CUDA": (
            [PYTHON, "-c", mapping + "[subprocess.run([a, '1', '1']) for _ in range(3)]", app,
             lib], 3),
        "posix_spawn from a process mapping CUDA": (
            [PYTHON, "-c", mapping + "[os.waitpid(os.posix_spawn(a, [a, '1', '1'], os.environ), 0)"
             " for _ in range(3)]", app, lib], 3),
    }


SHAPES = list(shapes("app"))


@pytest.mark.parametrize("shape", SHAPES)
def test_every_call_of_every_descendant_from_its_first(tmp_path, libcudart, shape):
    app = str(build_workload("runtime_calls.c"))
    command, runs = shapes(app, str(libcudart))[shape]
    calls, summary, proc = trace_jsonl(tmp_path, "--lib", str(libcudart), command=command)
    assert proc.returncode == 0, proc.stderr
    truth = expected_calls(proc.stdout)
    assert len(truth) == 10 * runs
    assert collections.Counter(c["event"] for c in calls) == collections.Counter(
        t["event"] for t in truth), proc.stderr
    assert len({c["pid"] for c in calls}) == runs
    assert summary["lost_total"] == 0 and summary["untraced"] == [], proc.stderr
    assert summary["processes_traced"] >= runs + (shape != "exec without fork")
    assert "made no CUDA call" not in proc.stderr


def test_a_thousand_short_processes_are_each_counted(tmp_path, libcudart):
    """A shell loop of 1,000 runs, each making its 10 calls within milliseconds
    of its exec: 10,000 calls, from 1,000 processes."""
    app = str(build_workload("runtime_calls.c"))
    calls, summary, proc = trace_jsonl(
        tmp_path, "--lib", str(libcudart),
        command=["bash", "-c", f"for i in $(seq 1000); do {app} 1 1 > /dev/null; done"],
        timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert len(calls) == 10_000 and len({c["pid"] for c in calls}) == 1000
    assert collections.Counter(c["event"] for c in calls)["cudaMalloc"] == 1000
    assert summary["lost_total"] == 0 and summary["untraced"] == []


def test_a_process_outside_the_tree_takes_no_breakpoint(tmp_path, libcudart):
    """While `sh -c 'loop; true'` is traced, a loop started beside it (not a
    descendant) opens and maps the same library file: the gate lets its open go
    without links, and its copy of cudaMalloc keeps its first byte; the
    descendant's has the breakpoint, and all its iterations are traced."""
    copy, env = private_copy(tmp_path, libcudart)
    exe = build_loop("shared")
    output = tmp_path / "calls.jsonl"
    run = Loop([*cudaprobe_cmd("trace", "-o", str(output), "--lib", copy, "--", "sh", "-c",
                               f"{exe} 5; true")], env=env)
    run.wait_iter(3)
    bystander = Loop([exe, "5"], env=env)
    bystander.wait_iter(3)
    assert first_byte(run.pid, copy, "cudaMalloc") == INT3
    assert first_byte(bystander.pid, copy, "cudaMalloc") != INT3
    bystander.stop()
    last = run.stop()
    calls, summary = read_jsonl(output)
    assert {c["pid"] for c in calls} == {run.pid}
    assert check_iterations(calls, last) == 0  # from its first call
    assert summary["lost_total"] == 0 and summary["untraced"] == []


def test_a_threaded_descendant_is_one_process_running_on(tmp_path, libcudart):
    """`sh -c 'python & exit 5'`: sh exits at once, its child runs on with three
    threads; the line about it names one process, never a thread id, and the
    trace ends with the child."""
    child = ("import os, threading, time; print(os.getpid(), flush=True); "
             "ts = [threading.Thread(target=time.sleep, args=(1,)) for _ in range(2)]; "
             "[t.start() for t in ts]; [t.join() for t in ts]")
    _calls, _summary, proc = trace_jsonl(
        tmp_path, "--lib", str(libcudart),
        command=["sh", "-c", f"{PYTHON} -c '{child}' & exit 5"])
    assert proc.returncode == 5, proc.stderr
    pid = int(proc.stdout.split()[0])
    [line] = [s for s in proc.stderr.splitlines() if "of its descendants runs on" in s]
    assert f"1 of its descendants runs on (pid {pid})" in line, line


def test_the_tree_cannot_tell_it_is_traced(tmp_path, libcudart):
    """tree_cannot_tell.py, untraced and under `cudaprobe trace --`: the same
    wait statuses (WUNTRACED | WCONTINUED: no stop, no continue), the same
    SIGCHLD count, a debugger's PTRACE_SEIZE of a child that loaded
    libcudart succeeds, the same exit status; and each child's call traced."""
    argv = [PYTHON, str(Path(__file__).with_name("tree_cannot_tell.py")), str(libcudart)]
    alone = subprocess.run(argv, capture_output=True, text=True, timeout=HANG_S)
    calls, summary, traced = trace_jsonl(tmp_path, "--lib", str(libcudart), command=argv)
    assert alone.returncode == traced.returncode == 6, traced.stderr
    assert traced.stdout == alone.stdout
    report = json.loads(alone.stdout)
    assert report["ptrace seize"] == "ok"
    assert [report[f"child {n}"] for n in (3, 4, 5)] == [["exited 3"], ["exited 4"],
                                                        ["exited 5"]]
    counts = collections.Counter((c["pid"], c["event"]) for c in calls)
    assert sorted(counts.values()) == [1, 1, 1] and len(counts) == 3
    assert summary["lost_total"] == 0 and summary["untraced"] == []


def opens(library: str) -> subprocess.Popen:
    """A process outside the tree that says "opening", opens (dlopen)
    `library`, then exits."""
    return subprocess.Popen([PYTHON, "-c", "import ctypes, sys; print('opening', flush=True); "
                             "ctypes.CDLL(sys.argv[1])", library],
                            stdout=subprocess.PIPE, text=True)


def test_ctrl_z_lets_every_open_go_and_the_gate_opens_again_after(tmp_path, libcudart):
    """SIGTSTP (Ctrl-Z) to cudaprobe: it lets go of the probed files before it
    stops, so a process opening one meanwhile does not wait on it; after
    SIGCONT, a child the tree starts is held again and traced from its first
    call."""
    copy, env = private_copy(tmp_path, libcudart)
    app = str(build_workload("runtime_calls.c"))
    output = tmp_path / "calls.jsonl"
    tracer = started(subprocess.Popen(
        cudaprobe_cmd("trace", "-o", str(output), "--lib", copy, "--", "sh", "-c",
                      f"echo started; read go; {app} 1 1; true"),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=env, process_group=0))  # as a shell's job: a stop signal is not discarded
    err = Lines(tracer.stderr)
    # the command runs once every probe is in and the gate is open
    assert tracer.stdout.readline() == "started\n", err.text()
    os.kill(tracer.pid, signal.SIGTSTP)
    wait_state(tracer.pid, "T")
    bystander = opens(copy)
    assert bystander.wait(timeout=HANG_S) == 0  # it never waited on the stopped cudaprobe
    os.kill(tracer.pid, signal.SIGCONT)
    err.wait_for(lambda s: "continued: children are held" in s, "the gate open again")
    tracer.stdin.write("go\n")
    tracer.stdin.close()
    assert tracer.wait(timeout=HANG_S) == 0, err.text()
    calls, summary = read_jsonl(output)
    assert len(calls) == 10 and summary["untraced"] == [] and summary["lost_total"] == 0


def keepers(tracer_pid: int) -> list[int]:
    """The gate keepers (cudaprobe/probe/gatekeeper.py) of that cudaprobe."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(a.endswith(b"gatekeeper.py") for a in argv) and str(tracer_pid).encode() in argv:
            found.append(int(entry.name))
    return found


def test_a_stopped_cudaprobe_holds_no_open_or_exec_and_kill_9_leaves_no_keeper(
        tmp_path, libcudart):
    """SIGSTOP cannot be caught: while cudaprobe is stopped, its gate keeper (a
    process of its own) answers for it, so a process opening a probed file, and
    one exec'ing a program, go on at once. Killed with SIGKILL, cudaprobe leaves
    no keeper behind, and nothing held."""
    copy, env = private_copy(tmp_path, libcudart)
    tracer = started(subprocess.Popen(
        cudaprobe_cmd("trace", "-o", str(tmp_path / "calls.jsonl"), "--lib", copy, "--",
                      "sh", "-c", "echo started; exec sleep 600"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        start_new_session=True))
    err = Lines(tracer.stderr)
    assert tracer.stdout.readline() == "started\n", err.text()  # the gate is open
    assert len(keepers(tracer.pid)) == 1
    os.kill(tracer.pid, signal.SIGSTOP)
    wait_state(tracer.pid, "T")
    bystander = started(opens(copy))
    assert bystander.stdout.readline() == "opening\n"
    assert bystander.wait(timeout=HANG_S) == 0  # never held for the stopped cudaprobe
    assert subprocess.run(["/bin/true"], timeout=HANG_S).returncode == 0
    tracer.kill()
    tracer.wait(timeout=HANG_S)
    deadline = time.monotonic() + HANG_S
    while keepers(tracer.pid):  # it sees cudaprobe's exit through a pidfd: an event
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert opens(copy).wait(timeout=HANG_S) == 0
    os.killpg(tracer.pid, signal.SIGKILL)  # and the sleep it started


def test_stats_counts_every_call_of_a_wrapper_scripts_processes(tmp_path, libcudart):
    """`stats -- bash -c 'app; app'`: the in-kernel counts are the two runs'."""
    app = str(build_workload("runtime_calls.c"))
    report, proc = stats_json(tmp_path, "s.json", "--lib", str(libcudart),
                              command=["bash", "-c", f"{app} 2 1; {app} 1 2; true"])
    assert proc.returncode == 0, proc.stderr
    truth = collections.Counter(t["event"] for t in expected_calls(proc.stdout))
    assert sum(truth.values()) == 40
    assert {f["event"]: f["count"] for f in report["functions"]} == dict(truth)
    assert report["lost_total"] == 0 and report["processes_traced"] == 3
    assert report["untraced"] == []


def test_nccl_calls_of_a_program_a_shell_execs_after_a_while(tmp_path, libnccl):
    """`trace --api nccl -- sh -c 'sleep 0.3; exec nccl_calls'`: every NCCL
    call the program says it made (its libnccl is opened, and held, after
    the exec)."""
    exe = nccl_calls(libnccl)
    calls, summary, proc = trace_jsonl(
        tmp_path, "--api", "nccl", "--lib", str(libnccl.parent), "-e", "all",
        command=["sh", "-c", f"sleep 0.3; exec {exe}"])
    assert proc.returncode == 0, proc.stderr
    truth = expected_calls(proc.stdout)
    made = [c["event"] for c in calls  # but the ncclBroadcast that ncclBcast makes
            if not (c["event"] == "ncclBroadcast" and c["depth"] == 1)]
    assert made == [t["event"] for t in truth]
    assert summary["lost_total"] == 0 and summary["untraced"] == []


def static_runtime_calls() -> str:
    """runtime_calls with the CUDA runtime linked in (libcudart_static.a, as
    nvcc links by default): the program itself is the file to probe, and no
    probed library is opened before its first call."""
    src, lib64 = WORKLOADS / "runtime_calls.c", CUDA_HOME / "lib64"
    return str(build_once(WORKLOAD_BIN / "runtime_calls_static", [src], lambda to: [
        "gcc", "-O1", "-g", f"-I{CUDA_HOME}/include", "-o", str(to), str(src), f"-L{lib64}",
        "-l:libcudart_static.a", "-lpthread", "-ldl", "-lrt"]))


@pytest.mark.parametrize("shape", ["sh -c 'app; true'", "exec without fork"])
def test_a_program_with_the_runtime_linked_in_is_probed_at_its_exec(tmp_path, shape):
    """A descendant that execs a program with the CUDA runtime linked in (a file
    nothing probed yet): the gate holds the exec, the program is probed and the
    process linked before it runs, so its calls from the first are traced."""
    app = static_runtime_calls()
    command, runs = shapes(app)[shape]
    calls, summary, proc = trace_jsonl(tmp_path, command=command)
    assert proc.returncode == 0, proc.stderr
    truth = expected_calls(proc.stdout)
    assert len(truth) == 10
    assert [c["event"] for c in calls] == [t["event"] for t in truth], proc.stderr
    assert summary["lost_total"] == 0 and summary["untraced"] == [], proc.stderr
    assert f"execs {app}, which has CUDA linked in" in proc.stderr


@pytest.mark.parametrize("via", ["file", "symlink"])
def test_a_process_the_name_scan_finds_before_its_open_is_said_once(tmp_path, libcudart, via):
    """--comm NAME, and a process exec'd under that name that opens libcudart
    only later (dlopen, as `import torch` does), the scan of names (each
    COMM_RESCAN_S) meeting it meanwhile: traced from its first call, and said as
    started under the name once. Exec'd through a symbolic link of that name
    (the file has another: `python3` and `python3.11`), its exec is not told as
    one under the name; the scan links it, and said nothing before."""
    from cudaprobe.sessions.follow import COMM_RESCAN_S  # noqa: PLC0415
    libcudart, env = private_copy(tmp_path, libcudart)
    named = tmp_path / unique_name("ln")
    if via == "file":
        shutil.copy(build_loop("dlopen"), named)
    else:
        shutil.copy(build_loop("dlopen"), tmp_path / "the_loop")
        named.symlink_to(tmp_path / "the_loop")
    tracing = Tracing(tmp_path, "--comm", named.name, "--lib", libcudart)
    tracing.wait_for("following every process named")
    app = started(subprocess.Popen([str(named), "0", "2", libcudart], stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, text=True, env=env))
    said = f"pid {app.pid} ({named.name}) started under the name: traced from its first call"
    try:
        assert json.loads(app.stdout.readline()) == {"pid": app.pid}
        time.sleep(3 * COMM_RESCAN_S)  # the scan of names meets it before its open
        app.stdin.write("load\n")
        app.stdin.flush()
        assert json.loads(app.stdout.readline()) == {"loaded": libcudart}
        tracing.wait_for(said)
        app.stdin.write("go\n")  # two iterations, then it exits
        app.stdin.flush()
        assert app.wait(timeout=HANG_S) == 0
    finally:
        app.kill()
        app.wait()
    calls, summary, err = tracing.interrupt()
    assert err.count(said) == 1 and summary["untraced"] == [], err
    assert [c["event"] for c in calls if c["pid"] == app.pid] == LOOP_ORDER * 2, err


def test_a_program_with_the_runtime_linked_in_started_under_the_comm_name(tmp_path):
    """--comm NAME, and a program with the CUDA runtime linked in exec'd under
    that name later: held at its exec, probed and linked before it runs, so its
    calls from the first are traced, and said as started under the name."""
    named = tmp_path / unique_name("st")  # (a name within 15 bytes, as comm keeps it)
    shutil.copy(static_runtime_calls(), named)
    tracing = Tracing(tmp_path, "--comm", named.name)
    tracing.wait_for("following every process named")
    run = subprocess.run([str(named), "1", "1"], capture_output=True, text=True,
                         timeout=HANG_S)
    assert run.returncode == 0
    tracing.wait_for(f"({named.name}) started under the name: traced from its first call")
    calls, summary, err = tracing.interrupt()
    truth = expected_calls(run.stdout)
    assert [c["event"] for c in calls] == [t["event"] for t in truth], err
    assert summary["lost_total"] == 0 and summary["untraced"] == [], err
