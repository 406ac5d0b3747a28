"""cudaprobe memory with real uprobes: on the toolkit's libcudart, where no
allocation succeeds without a GPU, and on the memstub libraries, where they
do, so that frees, leaks, call sites, nesting and implicit frees show."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

from cudaprobe.probe.ringbuf import READER_NAME

from ..conftest import HANG_S, build_workload, cudaprobe_cmd
from .conftest import expected_calls, probed_for_pid, run_cudaprobe
from .memstub import build_memstub, stub_env
from .running import Lines, host_pid_of, started

LINGER_MS = "0"  # it exits at once: names come from what the probe recorded


def memory_json(tmp_path: Path, *args: str, command: list[str], env=None) -> tuple[dict, object]:
    out = tmp_path / "memory.json"
    proc = run_cudaprobe("memory", "-o", str(out), *args, *(["--", *command] if command else []),
                         env=env)
    assert out.exists(), proc.stderr
    return json.loads(out.read_text()), proc


def test_real_library_failed_calls_allocate_nothing(tmp_path, libcudart):
    exe = build_workload("runtime_calls.c")
    report, proc = memory_json(tmp_path, "--lib", str(libcudart), command=[str(exe), "7", "2"])
    assert proc.returncode == 0, proc.stderr
    assert report["cudaprobe"] == "memory" and report["lost_total"] == 0
    [p] = report["processes"]
    assert p["process"] == "runtime_calls" and p["exited"]
    # each loop: cudaMalloc and cudaFree(0x8000), both failing with 35
    assert (p["failed_allocations"], p["failed_frees"]) == (14, 14)
    assert p["bytes_failed"] == 14 << 20
    assert (p["allocations"], p["frees"], p["unknown_frees"]) == (0, 0, 0)
    assert p["leaks"] == [] and p["peak_bytes"]["total"] == 0 and p["timeline"] == []


def test_leak_report_names_the_leaked_allocations(tmp_path):
    stub = build_memstub()
    exe = build_workload("leak_two.cu", extra=["-cudart=shared", "-Xcompiler",
                                               "-fno-omit-frame-pointer"])
    report, proc = memory_json(tmp_path, "--lib", str(stub), "--stacks",
                               command=[str(exe), LINGER_MS], env=stub_env())
    assert proc.returncode == 0, proc.stderr
    truth = {t["site"]: t for t in expected_calls(proc.stdout)}
    [p] = report["processes"]
    assert p["exited"] and report["lost_total"] == 0
    assert (p["allocations"], p["frees"]) == (3, 1)
    assert (p["failed_allocations"], p["failed_frees"], p["unknown_frees"]) == (1, 1, 0)
    # both layers probed: cudaMalloc's own cuMemAlloc_v2 and so on counted once
    assert p["nested_driver_calls"] == 6
    assert p["peak_bytes"]["total"] == sum(t["size"] for t in truth.values())
    leaks = [(g["site"][0].split("(")[0], g["event"], g["kind"], g["ended_by"],
              [(a["ptr"], a["size"]) for a in g["allocations"]]) for g in p["leaks"]]
    assert leaks == [  # biggest first
        ("alloc_weights", "cudaMalloc", "device", "process exit",
         [(truth["alloc_weights"]["ptr"], 3 << 20)]),
        ("alloc_staging", "cudaMallocHost", "host-pinned", "process exit",
         [(truth["alloc_staging"]["ptr"], 256 << 10)]),
    ]
    for g in p["leaks"]:
        assert g["site"][0].endswith(f" ({exe.name})")
        assert g["site"][1].startswith("main+0x")  # --stacks: the caller's caller
    assert "2 allocations never freed, 3.2 MiB" in proc.stdout
    assert "alloc_weights(unsigned long)+0x" in proc.stdout


def test_every_kind_both_layers_and_implicit_frees(tmp_path):
    stub = build_memstub()
    exe = build_workload("memory_mix.c", extra=[f"-L{stub}", "-l:libcuda.so.1"])
    report, proc = memory_json(tmp_path, "--lib", str(stub), command=[str(exe), LINGER_MS],
                               env=stub_env())
    assert proc.returncode == 0, proc.stderr
    truth = expected_calls(proc.stdout)
    [p] = report["processes"]
    assert (p["allocations"], p["frees"], p["failed_allocations"], p["failed_frees"]) == (7, 3,
                                                                                         1, 1)
    # every runtime call here is served by one driver call; cuMemAlloc_v2 is the program's own
    assert p["nested_driver_calls"] == 12
    assert p["bytes_allocated"] == sum(t["size"] for t in truth)
    reset_victims = [t for t in truth if t["call"] in ("cuMemAlloc_v2", "cudaMallocManaged",
                                                       "cudaMallocPitch")]
    [reset] = p["implicit_frees"]
    assert (reset["by"], reset["allocations"]) == ("cudaDeviceReset", 3)
    assert reset["bytes"] == sum(t["size"] for t in reset_victims) == (6 << 20) + 10240
    ended = {a["ptr"]: (g["ended_by"], g["kind"], g["event"], a["size"])
             for g in p["leaks"] for a in g["allocations"]}
    last = truth[-1]
    assert ended == {
        **{t["ptr"]: ("cudaDeviceReset", t["kind"], t["call"], t["size"]) for t in reset_victims},
        last["ptr"]: ("process exit", "device", "cudaMalloc", 64 << 10)}
    # live bytes over time: the peak is before the reset, and it ends at zero
    a, d, m, s, pitched, h, _z = (t["size"] for t in truth)
    assert p["peak_bytes"]["total"] == a + d + m + max(s, pitched + h)
    assert p["peak_bytes"]["async-pool"] == s and p["peak_bytes"]["managed"] == m
    assert p["timeline"][-1][1] == 0 and p["timeline"][-2][1] == 64 << 10
    assert "cudaDeviceReset at" in proc.stdout and "freed 3 allocations" in proc.stdout


def test_runtime_only_counts_the_runtime_calls(tmp_path):
    stub = build_memstub()
    exe = build_workload("memory_mix.c", extra=[f"-L{stub}", "-l:libcuda.so.1"])
    report, proc = memory_json(tmp_path, "--lib", str(stub / "libcudart.so.13"), "--api",
                               "runtime", command=[str(exe), LINGER_MS], env=stub_env())
    assert proc.returncode == 0, proc.stderr
    [p] = report["processes"]
    # the direct cuMemAlloc_v2 is not seen, so the reset frees two allocations
    assert p["nested_driver_calls"] == 0 and p["allocations"] == 6
    assert [(f["by"], f["allocations"]) for f in p["implicit_frees"]] == [("cudaDeviceReset", 2)]


def test_attach_to_a_running_process(tmp_path):
    stub = build_memstub()
    exe = build_workload("leak_two.cu", extra=["-cudart=shared", "-Xcompiler",
                                               "-fno-omit-frame-pointer"])
    # it waits before its first call until cudaprobe has attached
    app = started(subprocess.Popen([str(exe), LINGER_MS, "-"], env=stub_env(), text=True,
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE))
    out_json = tmp_path / "memory.json"
    assert app.stdout.readline() == "waiting\n"
    memory = started(subprocess.Popen(cudaprobe_cmd("memory", "-o", str(out_json), "--pid",
                                                    str(app.pid)),
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                      text=True))
    err = Lines(memory.stderr)
    err.wait_for(lambda s: f"attached to pid {app.pid}" in s, "the attach")
    out, _ = app.communicate("go\n", timeout=HANG_S)
    assert memory.wait(timeout=HANG_S) == 0, err.text()
    err.wait_for(lambda s: "every traced pid has exited" in s, "the end")
    report = json.loads(out_json.read_text())
    # no --lib: what the process maps (the memstub libraries) is probed, and the
    # usual places for its children; it stops by itself
    assert sorted(report["libraries"]) == probed_for_pid(
        str(stub / "libcuda.so.1"), str(stub / "libcudart.so.13"), apis=("runtime", "driver"))
    [p] = report["processes"]
    truth = {t["site"]: t for t in expected_calls(out)}
    assert p["pid"] == app.pid and p["exited"] and p["nested_driver_calls"] == 6
    assert sorted((a["ptr"], a["size"]) for g in p["leaks"] for a in g["allocations"]) == sorted(
        (t["ptr"], t["size"]) for t in truth.values() if not t["freed"])


def test_sigint_detaches_and_reports_what_is_live(tmp_path):
    stub = build_memstub()
    exe = build_workload("leak_two.cu", extra=["-cudart=shared", "-Xcompiler",
                                               "-fno-omit-frame-pointer"])
    out, log, err = (tmp_path / n for n in ("memory.json", "stdout.txt", "stderr.txt"))
    # the program lingers after its calls (until killed, below: 20 s could pass on a
    # loaded machine); SIGINT to cudaprobe alone. Files, not
    # pipes: the program keeps cudaprobe's stdout open after cudaprobe has exited
    with open(log, "w") as stdout, open(err, "w") as stderr:
        proc = subprocess.Popen(cudaprobe_cmd("memory", "--lib", str(stub), "-o", str(out),
                                              "--", str(exe), str(HANG_S * 1000)),
                                env=stub_env(), stdout=stdout, stderr=stderr)
    try:
        deadline = time.monotonic() + HANG_S
        while '"alloc_staging"' not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)  # the stop reads what the probes recorded until then
        proc.wait(timeout=HANG_S)
    finally:
        proc.kill()
    running = re.search(r"stopped by SIGINT: \S+ \(pid (\d+)\) keeps running", err.read_text())
    assert running, err.read_text()
    os.kill(int(running.group(1)), signal.SIGKILL)  # the program cudaprobe left running
    assert proc.returncode == 130, err.read_text()
    [p] = json.loads(out.read_text())["processes"]
    # still running: nothing leaked, two allocations live
    assert not p["exited"] and p["leaks"] == []
    assert sorted(a["size"] for g in p["live"] for a in g["allocations"]) == [256 << 10, 3 << 20]
    assert p["live_bytes"]["total"] == (3 << 20) + (256 << 10)


def vmm_workload() -> Path:
    return build_workload("memory_vmm.c", extra=[f"-L{build_memstub()}", "-l:libcuda.so.1"])


def test_virtual_memory_pools_and_registered_host_memory(tmp_path):
    """memory_vmm.c on the memstub libraries: physical memory counted from
    cuMemCreate until released and unmapped, pool and registered memory at both
    layers counted once, and the leaks named with what kept them."""
    stub = build_memstub()
    exe = vmm_workload()
    report, proc = memory_json(tmp_path, "--lib", str(stub), command=[str(exe), LINGER_MS],
                               env=stub_env())
    assert proc.returncode == 0, proc.stderr
    truth = expected_calls(proc.stdout)
    made = [t for t in truth if "kind" in t and t["ret"] == 0]
    [p] = report["processes"]
    assert report["lost_total"] == 0 and p["exited"]
    assert (p["allocations"], p["frees"], p["failed_allocations"], p["failed_frees"]) == (
        len(made), 6, 1, 0) == (10, 6, 1, 0)
    assert p["bytes_allocated"] == sum(t["size"] for t in made) and p["bytes_failed"] == 1 << 50
    # cudaMallocFromPoolAsync, cudaFreeAsync, cudaHostRegister, cudaHostUnregister: each
    # served by its driver call
    assert p["nested_driver_calls"] == 4 and p["unknown_frees"] == 0
    # four 2 MiB chunks, two of them released; the 4 MiB one, released but mapped, and
    # the last 2 MiB one, before the 4 MiB one is unmapped
    assert p["peak_bytes"]["vmm"] == 10 << 20
    # the runtime's pool allocation and registration are undone before the driver's
    assert p["peak_bytes"]["async-pool"] == 128 << 10
    assert p["peak_bytes"]["host-registered"] == 1 << 20
    assert p["peak_bytes"]["device"] == 0 and p["timeline"][-1][1] == 0
    leaks = sorted((g["kind"], a["ptr"], a["size"], g["outstanding"] or "", g["ended_by"])
                   for g in p["leaks"] for a in g["allocations"])
    assert leaks == sorted((t["leak"], t["ptr"], t["size"], t["outstanding"], "process exit")
                           for t in truth if "leak" in t)
    assert "cuMemCreate (not released, mapped at 1 address)" in proc.stdout
    header = next(line for line in proc.stdout.splitlines() if "PID" in line)
    assert "VMM" in header and "HOST-REGISTERED" in header


def test_virtual_memory_on_the_real_libraries_fails_and_allocates_nothing(tmp_path, libcudart,
                                                                          libcuda):
    """Without a GPU every call of memory_vmm.c fails on the toolkit's libcudart
    (35) and Debian's libcuda (3): all counted failed, nothing allocated."""
    exe = vmm_workload()
    report, proc = memory_json(tmp_path, "--lib", str(libcudart), "--lib", str(libcuda),
                               command=[str(exe)],
                               env={**os.environ, "LD_LIBRARY_PATH": str(libcuda.parent)})
    assert proc.returncode == 0, proc.stderr
    truth = [t for t in expected_calls(proc.stdout) if "call" in t]
    assert truth and all(t["ret"] != 0 for t in truth)
    [p] = report["processes"]
    calls = [t["call"] for t in truth]
    assert p["failed_allocations"] == sum("kind" in t for t in truth) == 11
    assert p["failed_frees"] == sum(c in ("cuMemRelease", "cudaFreeAsync", "cudaHostUnregister")
                                    for c in calls) == 6
    assert p["failed_maps"] == sum(c in ("cuMemMap", "cuMemUnmap") for c in calls) == 8
    assert (p["allocations"], p["frees"], p["leaks"], p["peak_bytes"]["total"]) == (0, 0, [], 0)


def test_a_free_read_after_its_process_was_seen_gone_still_counts(tmp_path):
    """The ring's reader held (SIGSTOP) while a process frees its allocation
    and exits, another traced process running on: the session sees it gone
    while its free waits in the ring. Its exit is applied once the records
    are read up to where the ring stood when it was seen gone: the free
    counts, nothing is leaked and no free is of an unknown pointer."""
    build_memstub()
    exe = build_workload("alloc_gate.c")
    apps = [started(subprocess.Popen([str(exe)], env=stub_env(), text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE))
            for _ in range(2)]
    gone, stays = apps
    for app in apps:
        assert app.stdout.readline() == "ready\n"
    out_json = tmp_path / "memory.json"
    memory = started(subprocess.Popen(
        cudaprobe_cmd("memory", "-o", str(out_json), "--pid", str(gone.pid), "--pid",
                      str(stays.pid), "--interval", "0.1"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    err, out = Lines(memory.stderr), Lines(memory.stdout)
    err.wait_for(lambda s: "attached to" in s, "the attach")
    gone.stdin.write("go\n")
    gone.stdin.flush()
    assert gone.stdout.readline() == "allocated\n"
    # the allocation applied: the live table has its process
    out.wait_for(lambda s: re.match(rf"\s*{gone.pid}\s", s) is not None, "its allocation")
    reader = host_pid_of(memory.pid, READER_NAME)
    os.kill(reader, signal.SIGSTOP)
    try:
        gone.stdin.write("go\n")
        gone.stdin.flush()
        assert gone.wait(timeout=HANG_S) == 0
        time.sleep(1)  # ten looks of the session, and more, with the free still in the ring
    finally:
        os.kill(reader, signal.SIGCONT)
    stays.stdin.close()
    stays.wait(timeout=HANG_S)
    assert memory.wait(timeout=HANG_S) == 0, err.text()
    [p] = [p for p in json.loads(out_json.read_text())["processes"] if p["pid"] == gone.pid]
    assert p["exited"] and (p["allocations"], p["frees"], p["unknown_frees"]) == (1, 1, 0), p
    assert p["leaks"] == [], p["leaks"]
