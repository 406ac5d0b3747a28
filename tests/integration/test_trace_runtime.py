"""cudaprobe trace on the toolkit's real libcudart, with workloads built here.

Without a GPU every runtime call returns cudaErrorInsufficientDriver (35), but
the probes fire on the real library with real arguments, which is what these
tests check against what the workload itself printed.
"""

from __future__ import annotations

import collections
import csv
import gzip
import io
import json
import os

import pytest

from cudaprobe.catalogue.enums import error_name

from ..conftest import build_workload
from .conftest import expected_calls, run_cudaprobe, trace_jsonl
from .memstub import build_memstub, stub_env


def test_every_call_decoded_as_the_workload_made_it(tmp_path, libcudart):
    exe = build_workload("runtime_calls.c")
    calls, summary, proc = trace_jsonl(tmp_path, "--lib", str(libcudart),
                                       command=[str(exe), "3"])
    assert proc.returncode == 0, proc.stderr
    truth = expected_calls(proc.stdout)
    assert [c["event"] for c in calls] == [t["event"] for t in truth]
    assert summary["calls"] == len(truth) == 30
    assert summary["lost_total"] == 0
    assert len({c["pid"] for c in calls}) == 1
    # all from the workload's one worker thread, not its main thread
    tids = {c["tid"] for c in calls}
    assert len(tids) == 1 and tids != {calls[0]["pid"]}
    for call, t in zip(calls, truth):
        assert call["ret"] == t["ret"]
        expected = "cudaSuccess" if t["ret"] == 0 else "cudaErrorInsufficientDriver"
        assert call["ret_name"] == expected
        assert call["api"] == "runtime"
        assert call["duration_ns"] > 0
        assert call["process"] == "runtime_calls"
    by_event = {c["event"]: c for c in calls[:10]}
    first = {t["event"]: t for t in truth[:10]}

    def written(event: str, key: str):
        """An out-parameter is read when the call succeeded; a failed call's is null
        (here, without a GPU, all of them: test_out_parameters_read_when_... reads them)."""
        t = first[event]
        return t[key] if t["ret"] == 0 else None

    assert by_event["cudaMalloc"]["args"] == {"devPtr": written("cudaMalloc", "devPtr"),
                                              "size": 1 << 20}
    if first["cudaMalloc"]["ret"]:  # not what was left in memory (the workload's 0xdead0000)
        assert by_event["cudaMalloc"]["details"] == "devPtr=- size=1.0 MiB"
    assert by_event["cudaMalloc"]["category"] == "memory"
    assert by_event["cudaGetDeviceCount"]["args"] == {
        "count": written("cudaGetDeviceCount", "count")}
    assert by_event["cudaMemcpy"]["args"] == {"dst": "0x1000", "src": "0x2000", "count": 4096,
                                              "kind": "HostToDevice"}
    assert by_event["cudaMemcpy"]["details"] == (
        "dst=0x1000 src=0x2000 count=4.0 KiB kind=HostToDevice")
    assert by_event["cudaMemcpyAsync"]["args"] == {
        "dst": "0x3000", "src": "0x4000", "count": 123, "kind": "DeviceToHost",
        "stream": "0x5000"}
    assert by_event["cudaMemset"]["args"] == {"devPtr": "0x6000", "value": 7, "count": 256}
    launch = by_event["cudaLaunchKernel"]["args"]
    assert launch["func"] == first["cudaLaunchKernel"]["func"]
    assert launch["args"] == first["cudaLaunchKernel"]["args"]  # on the thread's stack
    assert launch["gridDim"] == [4, 2, 1] and launch["blockDim"] == [256, 1, 1]
    # sharedMem and stream are the 7th and 8th argument words: read from the stack
    assert launch["sharedMem"] == 1024 and launch["stream"] == "0x7000"
    assert by_event["cudaStreamCreate"]["args"] == {
        "pStream": written("cudaStreamCreate", "pStream")}
    assert by_event["cudaEventElapsedTime"]["args"] == {
        "ms": written("cudaEventElapsedTime", "ms"), "start": "0xe1", "end": "0xe2"}
    assert by_event["cudaFree"]["args"] == {"devPtr": "0x8000"}


# memory_mix's runtime allocations -> the argument that gets the pointer
POINTER_ARG = {"cudaMalloc": "devPtr", "cudaMallocManaged": "devPtr", "cudaMallocAsync": "devPtr",
               "cudaMallocPitch": "devPtr", "cudaHostAlloc": "pHost"}


def test_out_parameters_read_when_the_call_succeeded(tmp_path):
    """On the memstub libraries allocations succeed: each pointer (and the pitch)
    in the trace is the one the workload got. Its one failing allocation (1 << 50
    bytes) has devPtr null: a failed call's out-parameters are not read."""
    stub = build_memstub()
    exe = build_workload("memory_mix.c", extra=[f"-L{stub}", "-l:libcuda.so.1"])
    calls, summary, proc = trace_jsonl(tmp_path, "--lib", str(stub), "--api", "runtime",
                                       "-e", ",".join(POINTER_ARG),
                                       command=[str(exe), "300"], env=stub_env())
    assert proc.returncode == 0, proc.stderr
    assert summary["lost_total"] == 0
    truth = [t for t in expected_calls(proc.stdout) if t["call"] in POINTER_ARG]
    done = [c for c in calls if c["ret"] == 0]
    assert [c["event"] for c in done] == [t["call"] for t in truth]
    assert len(truth) == 6
    for call, t in zip(done, truth):
        name = POINTER_ARG[t["call"]]
        assert call["args"][name] == hex(int(t["ptr"], 16)), call
        assert call["details"].startswith(f"{name}={call['args'][name]} "), call
    pitched = next(c for c in done if c["event"] == "cudaMallocPitch")
    assert pitched["args"]["pitch"] * 10 == next(
        t["size"] for t in truth if t["call"] == "cudaMallocPitch")
    [failed] = [c for c in calls if c["ret"] != 0]
    assert failed["event"] == "cudaMalloc" and failed["ret_name"] == "cudaErrorMemoryAllocation"
    assert failed["args"] == {"devPtr": None, "size": 1 << 50}
    assert failed["details"] == "devPtr=- size=1024.0 TiB"


# "slots": each thread pairs its calls in a slot of its own; "hash": one slot
# (CUDAPROBE_PAIR_THREADS=1), so three of the four threads pair in the hash
@pytest.mark.parametrize("pair_threads", ["64", "1"], ids=["slots", "hash"])
def test_threads_pair_entry_and_exit_correctly(tmp_path, libcudart, pair_threads):
    exe = build_workload("runtime_calls.c")
    calls, summary, proc = trace_jsonl(tmp_path, "--lib", str(libcudart),
                                       command=[str(exe), "200", "4"],
                                       env={**os.environ, "CUDAPROBE_PAIR_THREADS": pair_threads})
    assert proc.returncode == 0, proc.stderr
    assert summary["lost_total"] == 0
    per_tid = collections.defaultdict(list)
    for c in calls:
        per_tid[c["tid"]].append(c)
    assert len(per_tid) == 4
    order = ["cudaGetDeviceCount", "cudaMalloc", "cudaMemcpy", "cudaMemcpyAsync", "cudaMemset",
             "cudaLaunchKernel", "cudaStreamCreate", "cudaEventElapsedTime", "cudaFree",
             "cudaDeviceSynchronize"]
    for tid_calls in per_tid.values():
        assert len(tid_calls) == 2000
        # each thread's sequence is exactly the workload's loop, with its own arguments
        assert [c["event"] for c in tid_calls] == order * 200
        mallocs = [c for c in tid_calls if c["event"] == "cudaMalloc"]
        assert all(c["args"]["size"] == 1 << 20 for c in mallocs)
        assert all(c["ts_ns"] < n["ts_ns"] for c, n in zip(tid_calls, tid_calls[1:]))


def test_events_filter_and_exit_status(tmp_path, libcudart):
    exe = build_workload("runtime_calls.c")
    calls, _summary, proc = trace_jsonl(tmp_path, "--lib", str(libcudart), "-e",
                                        "transfer,cudaFree", command=[str(exe), "2"])
    assert proc.returncode == 0, proc.stderr
    assert collections.Counter(c["event"] for c in calls) == {
        "cudaMemcpy": 2, "cudaMemcpyAsync": 2, "cudaFree": 2}


@pytest.mark.parametrize("pair_threads", ["64", "1"], ids=["slots", "hash"])
def test_process_names_follow_renames_and_exec(tmp_path, libcudart, pair_threads):
    """A thread's name is kept with its pairing slot (not read at every call):
    renames by the thread itself, by another thread, and by exec show in the
    next call, as the thread's name was when it made it."""
    exe = build_workload("renames.c")
    calls, summary, proc = trace_jsonl(tmp_path, "--lib", str(libcudart),
                                       "-e", "cudaGetDeviceCount", command=[str(exe)],
                                       env={**os.environ, "CUDAPROBE_PAIR_THREADS": pair_threads})
    assert proc.returncode == 0, proc.stderr
    truth = expected_calls(proc.stdout)
    assert [t["comm"] for t in truth] == ["renames", "renamed", "renamed", "other", "renames"]
    assert summary["lost_total"] == 0
    assert [(c["tid"], c["process"]) for c in calls] == [(t["tid"], t["comm"]) for t in truth]


def test_summary_counts_every_call_by_its_code_with_errors_only(tmp_path):
    """One function returning 0 and six error codes, traced --errors-only: the
    rows are the failed calls; the summary, counted in the kernel, has every
    call and each code (four kept in the probe's per-CPU record, two in the
    `error_codes` hash)."""
    exe = build_workload("error_codes.c")
    calls, summary, proc = trace_jsonl(tmp_path, "--lib", str(exe), "--errors-only",
                                       command=[str(exe), "70", "7"])
    assert proc.returncode == 0, proc.stderr
    made = {t["code"]: t["calls"] for t in expected_calls(proc.stdout)}
    assert made == dict.fromkeys(range(7), 10)
    assert len(calls) == summary["rows"] == 60 and all(c["ret"] for c in calls)
    counted = summary["by_event"]["cudaGetDeviceCount"]
    assert summary["calls"] == counted["calls"] == 70
    assert counted["errors"] == {error_name("runtime", code): 10 for code in range(1, 7)}
    assert counted["total_ns"] > sum(c["duration_ns"] for c in calls) > 0


STRING_CALLS = """import ctypes, sys
rt = ctypes.CDLL(sys.argv[1])
rt.cudaGetErrorName.restype = rt.cudaGetErrorString.restype = ctypes.c_char_p
for code in (35, 2, 0, 100, 999):
    print(rt.cudaGetErrorName(code).decode(), rt.cudaGetErrorString(code).decode()[:20])
"""


def test_a_function_that_returns_a_string_never_counts_as_an_error(tmp_path, libcudart):
    """cudaGetErrorName and cudaGetErrorString return a const char *, not a
    status: its pointer is not an error code (it was: `cudaError(-1716983984)
    x22` in ERRORS, and rows under --errors-only). The call is counted, its
    result is empty, and --errors-only leaves it out."""
    script = tmp_path / "names.py"
    script.write_text(STRING_CALLS)
    command = ["/usr/bin/python3", str(script), str(libcudart)]
    events = "cudaGetErrorName,cudaGetErrorString"
    calls, summary, proc = trace_jsonl(tmp_path, "--lib", str(libcudart), "-e", events,
                                       command=command)
    assert proc.returncode == 0, proc.stderr
    assert "cudaErrorInsufficientDriver" in proc.stdout  # it named the codes
    assert len(calls) == 10 and {c["event"] for c in calls} == set(events.split(","))
    assert all(c["ret"] == 0 and c["ret_name"] == "" for c in calls)
    assert [c["args"]["error"] for c in calls[::2]] == [
        "cudaErrorInsufficientDriver", "cudaErrorMemoryAllocation", "cudaSuccess",
        "cudaErrorNoDevice", "cudaErrorUnknown"]
    assert all(f["errors"] == {} for f in summary["by_event"].values())
    (tmp_path / "e").mkdir()
    errors_only, _, proc = trace_jsonl(tmp_path / "e", "--lib", str(libcudart), "-e", events,
                                       "--errors-only", command=command)
    assert proc.returncode == 0 and errors_only == [], proc.stderr
    out = tmp_path / "stats.json"
    proc = run_cudaprobe("stats", "-o", str(out), "--lib", str(libcudart), "-e", events,
                         "--", *command)
    stats = json.loads(out.read_text())
    counted = {f["event"]: (f["count"], f["errors"]) for f in stats["functions"]}
    assert counted == {"cudaGetErrorName": (5, {}), "cudaGetErrorString": (5, {})}, proc.stderr


@pytest.mark.parametrize("name", ["calls.jsonl.gz", "run.chrome.json.gz", "calls.csv.gz"])
def test_a_trace_written_to_a_gz_file_is_the_trace_compressed(tmp_path, libcudart, name):
    """-o FILE.gz: the format its name picks before `.gz`, gzip-compressed;
    every call the workload made is in it, in the order it made them."""
    exe = build_workload("runtime_calls.c")
    out = tmp_path / name
    proc = run_cudaprobe("trace", "--lib", str(libcudart), "-o", str(out), "--", str(exe), "3")
    assert proc.returncode == 0, proc.stderr
    truth = [t["event"] for t in expected_calls(proc.stdout)]
    text = gzip.decompress(out.read_bytes()).decode()
    if name.endswith(".jsonl.gz"):
        lines = [json.loads(line) for line in text.splitlines()]
        events = [row["event"] for row in lines[:-1]]
        assert lines[-1]["summary"]["calls"] == 30
    elif name.endswith(".chrome.json.gz"):  # what Perfetto opens, gzipped as it takes it
        # a launch's slice is named by its kernel (by its function where not named)
        events = [e["name"].replace("fake_kernel", "cudaLaunchKernel")
                  for e in json.loads(text) if e.get("ph") == "X"]
    else:
        rows = list(csv.DictReader(io.StringIO(text)))
        events = [row["event"] for row in rows]
    assert events == truth and len(truth) == 30
