"""Finding CUDA code in processes and files, without root or BPF: procmaps,
elfsyms' quick look, targets, and probe ids planned for libraries found later."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cudaprobe.catalogue.functions import FUNCTIONS, RUNTIME
from cudaprobe.errors import CudaNotMapped, ProcessGone, SeccompHazard
from cudaprobe.probe.plan import attachments_in, plan_probes
from cudaprobe.targets import elf, elfsyms, procmaps
from cudaprobe.targets.openfile import open_node_file
from cudaprobe.targets.selection import Targets

from ..conftest import HANG_S, as_not_root, build_workload, cudaprobe_cmd

RUNTIME_SYMBOLS = [s for f in FUNCTIONS if f.api == RUNTIME for s in f.symbols]
PATTERN = elfsyms.name_pattern(RUNTIME_SYMBOLS)


def test_defines_any_tells_definitions_from_imports(libcudart):
    exe = build_workload("cuda_loop.c", "loop_shared")  # imports cudaMalloc, defines none
    assert elfsyms.defines_any(str(libcudart), PATTERN)
    assert not elfsyms.defines_any(str(exe), PATTERN)
    assert not elfsyms.defines_any(sys.executable, PATTERN)
    assert not elfsyms.defines_any(__file__, PATTERN)  # not ELF
    assert not elfsyms.defines_any("/nonexistent", PATTERN)


def test_defines_any_finds_local_symbols_of_a_static_runtime(tmp_path):
    src = tmp_path / "static.c"
    # a local (static) function named like a runtime entry point: .symtab only
    src.write_text("static int cudaMalloc(void **p, unsigned long n) { return (int)n; }\n"
                   "int main(void) { return cudaMalloc(0, 0); }\n")
    exe = tmp_path / "static"
    subprocess.run(["gcc", "-O0", "-o", str(exe), str(src)], check=True)
    assert elfsyms.defines_any(str(exe), PATTERN)
    subprocess.run(["strip", str(exe)], check=True)
    assert not elfsyms.defines_any(str(exe), PATTERN)


ALL_SYMBOLS = sorted({s for f in FUNCTIONS for s in f.symbols})
ALL_PATTERN = elfsyms.name_pattern(ALL_SYMBOLS)


def plain_starts(table: bytes, names: list[str]) -> set[int]:
    """Where any name starts as an entry's tail, by bytes.find: the oracle."""
    starts = set()
    for name in names:
        needle, at = name.encode() + b"\0", table.find(name.encode() + b"\0")
        while at >= 0:
            starts.add(at)
            at = table.find(needle, at + 1)
    return starts


@given(st.lists(st.sampled_from(ALL_SYMBOLS) | st.text("cudaMlocFreNCCLv_2p\0", max_size=12),
                max_size=40),
       st.lists(st.sampled_from(["", "_", "p", "__wrap_", "cu", "nccl", "x"]), max_size=40))
def test_name_pattern_finds_every_name_start_a_plain_search_finds(parts, prefixes):
    # entries, some of them names behind a prefix (a merged tail), some junk
    table = b"\0" + b"".join((pre + part).encode() + b"\0"
                             for pre, part in zip(prefixes + [""] * len(parts), parts))
    found = ALL_PATTERN.starts(table, 0, len(table))
    assert found == plain_starts(table, ALL_SYMBOLS)


def test_name_pattern_finds_a_name_inside_another_wanted_name():
    pattern = elfsyms.name_pattern(["ncclAllReduce", "pncclAllReduce", "cudaFree", "cudaFreeHost"])
    table = b"\0pncclAllReduce\0__wrap_cudaFree\0cudaFreeHost\0"
    starts = pattern.starts(table, 0, len(table))
    assert starts == {1, 2, 23, 32}  # pncclAllReduce, ncclAllReduce, cudaFree, cudaFreeHost


def test_interpreter_of_executables_only(libcudart):
    assert "ld-linux" in elf.interpreter(os.path.realpath(sys.executable))
    assert elf.interpreter(str(libcudart)) is None
    assert elf.interpreter(__file__) is None


def test_read_maps_of_self_has_the_interpreter_once():
    files = procmaps.read_maps(os.getpid())
    python = os.stat(os.path.realpath(sys.executable))
    mine = [f for f in files if f.identity == (python.st_dev, python.st_ino)]
    assert len(mine) == 1 and mine[0].host_path == mine[0].path  # same mount namespace
    assert len({f.identity for f in files}) == len(files)


def test_threads_belong_to_their_process():
    ready, done = threading.Event(), threading.Event()
    tid = []

    def worker() -> None:
        tid.append(threading.get_native_id())
        ready.set()
        done.wait()

    t = threading.Thread(target=worker)
    t.start()
    ready.wait()
    try:
        assert procmaps.thread_group(tid[0]) == os.getpid() != tid[0]
    finally:
        done.set()
        t.join()
    assert os.getpid() in procmaps.pids_named(procmaps.process_name(os.getpid()))


def test_gone_process_is_process_gone():
    p = subprocess.Popen(["true"])
    p.wait()
    with pytest.raises(ProcessGone):
        procmaps.read_maps(p.pid)
    with pytest.raises(ProcessGone, match=f"pid {p.pid}: no such process"):
        Targets(RUNTIME_SYMBOLS, [p.pid])


def test_targets_find_the_runtime_a_process_maps_once(libcudart):
    exe = build_workload("cuda_loop.c", "loop_shared")
    started = time.monotonic()  # before the process exists, however long Popen takes
    loop = subprocess.Popen([str(exe), "20"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    try:
        loop.stdout.readline()  # {"pid": ...}: libraries are mapped
        targets = Targets(RUNTIME_SYMBOLS, [loop.pid])
        found, gone = targets.scan([loop.pid])
        assert [o.file.name for o in found] == [str(libcudart)] and gone == []
        assert found[0].where == str(libcudart)
        # never scanned before: it may have been mapped since the process started
        # (clock ticks: 10 ms)
        assert started - 0.02 <= found[0].mapped_since <= time.monotonic()
        assert 0 <= procmaps.process_age_s(loop.pid) < time.monotonic() - started + 0.02
        assert targets.scan([loop.pid]) == ([], [])  # probed already
        assert targets.exited() == []
    finally:
        loop.stdin.close()
        loop.wait()
    assert targets.exited() == [loop.pid]
    assert targets.scan([loop.pid]) == ([], [loop.pid])
    targets.close()


def test_command_objects_are_the_static_runtime_or_the_linked_library(libcudart, tmp_path):
    shared = build_workload("cuda_loop.c", "loop_shared")
    found = Targets(RUNTIME_SYMBOLS).command_objects(str(shared))
    assert [f.name for f in found] == [str(libcudart)]
    targets = Targets(RUNTIME_SYMBOLS)
    targets.attached_up_front([open_node_file(str(libcudart))])
    assert targets.command_objects(str(shared)) == []
    assert Targets(RUNTIME_SYMBOLS).command_objects("no-such-command") == []


def test_not_mapped_error_is_one_line_naming_what_was_looked_for():
    with subprocess.Popen(["sleep", "10"]) as sleeper:
        while procmaps.process_name(sleeper.pid) != "sleep":  # vfork: Popen may return first
            time.sleep(0.01)
        try:
            targets = Targets(RUNTIME_SYMBOLS, [sleeper.pid])
            assert targets.scan([sleeper.pid])[0] == []
            err = targets.not_mapped_error()
        finally:
            sleeper.kill()
    assert isinstance(err, CudaNotMapped)
    text = str(err)
    assert "\n" not in text
    assert text.startswith(f"pid {sleeper.pid} (sleep) is not using CUDA: none of the ")
    assert "cudaLaunchKernel, cudaMalloc" in text and f"{len(set(RUNTIME_SYMBOLS))}" in text
    assert text.endswith("(add --wait to attach when it loads CUDA)")


def test_every_symbol_plan_numbers_probes_for_libraries_found_later(libcudart):
    functions = [f for f in FUNCTIONS if f.api == RUNTIME]
    found_only = plan_probes(functions, [str(libcudart)])
    every = plan_probes(functions, [str(libcudart)], every_symbol=True)
    assert [p.symbol for p in every.probes] == [s for f in functions for s in f.symbols]
    assert [p.func_id for p in every.probes] == list(range(len(every.probes)))
    assert {a.probe.symbol for a in every.attachments} == {p.symbol for p in found_only.probes}
    assert len(every.attachments) == len(found_only.attachments)
    empty = plan_probes(functions, [], every_symbol=True)  # --comm, nothing running yet
    assert empty.attachments == [] and len(empty.probes) == len(every.probes)
    later = attachments_in(empty.probes, str(libcudart))
    assert [(a.probe.func_id, a.offset) for a in later] == [
        (a.probe.func_id, a.offset) for a in every.attachments]


def test_another_users_process_without_root_is_one_line():
    p = subprocess.run(as_not_root(cudaprobe_cmd("trace", "--dump-bpf", "--pid", "1")),
                       capture_output=True, text=True, timeout=HANG_S)
    assert p.returncode == 2
    assert p.stderr == ("cudaprobe: pid 1: cannot read /proc/1/ns/mnt: permission denied "
                        "(run it with sudo)\n")


def test_pid_under_seccomp_is_refused_where_uretprobes_would_kill_it(monkeypatch):
    """Linux 6.11-6.13: a uretprobe kills a process under a seccomp filter with
    SIGSYS; such a --pid target is refused before anything is attached."""
    from cudaprobe.targets import selection as targets_module  # noqa: PLC0415 - patched here

    proc = subprocess.Popen(["sleep", "30"])
    try:
        deadline = time.monotonic() + 5
        while procmaps.process_name(proc.pid) != "sleep" and time.monotonic() < deadline:
            time.sleep(0.01)  # until it has exec'd: the message names it
        monkeypatch.setattr(targets_module, "seccomp_filtered", lambda pid: pid == proc.pid)
        Targets(["cudaMalloc"], pids=[proc.pid]).close()  # this kernel: not affected
        monkeypatch.setattr(targets_module, "uretprobes_kill_filtered", lambda: True)
        with pytest.raises(SeccompHazard, match=rf"pid {proc.pid} \(sleep\) runs under a "
                                                r"seccomp filter.*SIGSYS.*not traced"):
            Targets(["cudaMalloc"], pids=[proc.pid])
    finally:
        proc.kill()
        proc.wait()


def test_a_process_root_may_not_inspect_is_not_told_to_use_sudo(monkeypatch):
    """-p 1 in a container, as root: /proc/1/ns/mnt refuses root too (another user
    namespace's init), and "run it with sudo" would be no help."""
    monkeypatch.setattr(procmaps.os, "geteuid", lambda: 0)
    said = str(procmaps._not_ours(1, "ns/mnt"))
    assert said.startswith("pid 1: cannot read /proc/1/ns/mnt: permission denied even to root")
    assert "sudo" not in said
    monkeypatch.setattr(procmaps.os, "geteuid", lambda: 1000)
    assert str(procmaps._not_ours(1, "ns/mnt")).endswith("(run it with sudo)")


def test_a_refused_read_of_a_process_that_has_exited_is_its_exit():
    """The kernel refuses some /proc files of a process between its exit and
    its reaping: that is the process gone, not a process protected from root."""
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    try:
        while procmaps.process_alive(pid):  # until it is a zombie
            time.sleep(0.01)
        assert isinstance(procmaps._not_ours(pid, "ns/mnt"), ProcessGone)
    finally:
        os.waitpid(pid, 0)
    assert isinstance(procmaps._not_ours(pid, "ns/mnt"), ProcessGone)  # reaped
    refused = procmaps._not_ours(os.getpid(), "ns/mnt")  # alive: a refusal
    assert not isinstance(refused, ProcessGone) and "permission denied" in str(refused)


def test_threads_gone_only_once_no_thread_of_the_process_runs():
    """A process whose main thread has exited (pthread_exit) while another runs
    can still call; once that one exits too, a zombie or reaped, it cannot."""
    code = ("import ctypes, sys, threading\n"
            "threading.Thread(target=sys.stdin.read).start()\n"
            "ctypes.CDLL(None).pthread_exit(None)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE)
    try:
        deadline = time.monotonic() + HANG_S

        def state() -> bytes:
            with open(f"/proc/{proc.pid}/stat", "rb") as f:
                return f.read().rsplit(b")", 1)[1].split()[0]
        while state() != b"Z":  # the main thread has exited
            assert time.monotonic() < deadline, "the main thread never exited"
            time.sleep(0.01)
        assert not procmaps.threads_gone(proc.pid)
        assert not procmaps.threads_gone(os.getpid())
        proc.stdin.close()  # the other thread returns: the process exits
        while len(os.listdir(f"/proc/{proc.pid}/task")) > 1 or not procmaps.threads_gone(
                proc.pid):
            assert time.monotonic() < deadline, "the process never exited"
            time.sleep(0.01)
        assert os.path.exists(f"/proc/{proc.pid}")  # a zombie: not reaped yet
    finally:
        proc.kill()
        proc.wait()
    assert procmaps.threads_gone(proc.pid)  # reaped
