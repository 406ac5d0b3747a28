"""cudaprobe stats on the toolkit's real libcudart: in-kernel counts, errors and
histograms against what the workload did. Without a GPU every call fails with
cudaErrorInsufficientDriver (35), which is the error histogram to check."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess

import pytest

from cudaprobe.catalogue.enums import error_name

from ..conftest import build_workload, cudaprobe_cmd
from .conftest import run_cudaprobe
from .memstub import build_memstub, stub_env
from .running import WAIT_S, Lines

LOOP = ["cudaGetDeviceCount", "cudaMalloc", "cudaMemcpy", "cudaMemcpyAsync", "cudaMemset",
        "cudaLaunchKernel", "cudaStreamCreate", "cudaEventElapsedTime", "cudaFree",
        "cudaDeviceSynchronize"]


def stats_json(tmp_path, name: str, *args: str, command: list[str],
               env=None) -> tuple[dict, subprocess.CompletedProcess]:
    out = tmp_path / name
    proc = run_cudaprobe("stats", "-o", str(out), *args, "--", *command, env=env)
    assert out.exists(), proc.stderr
    return json.loads(out.read_text()), proc


def check_histogram(f: dict) -> None:
    """The kernel's buckets agree with its own count, min, max and sums."""
    hist = f["histogram"]
    assert sum(b["count"] for b in hist) == f["count"]
    assert sum(b["total_ns"] for b in hist) == f["total_ns"]
    for b in hist:
        assert b["hi_ns"] == 2 * max(b["lo_ns"], 1)
        assert b["lo_ns"] * b["count"] <= b["total_ns"] < b["hi_ns"] * b["count"]
    assert hist[0]["lo_ns"] <= f["min_ns"] < hist[0]["hi_ns"]
    assert hist[-1]["lo_ns"] <= f["max_ns"] < hist[-1]["hi_ns"]
    assert f["min_ns"] <= f["p50_ns"] <= f["p95_ns"] <= f["p99_ns"] <= f["max_ns"]
    assert f["min_ns"] <= f["avg_ns"] <= f["max_ns"] and f["min_ns"] > 0


def test_exact_counts_errors_and_histograms(tmp_path, libcudart):
    exe = build_workload("runtime_calls.c")
    report, proc = stats_json(tmp_path, "stats.json", "--lib", str(libcudart),
                              command=[str(exe), "25", "3"])
    assert proc.returncode == 0, proc.stderr
    assert report["cudaprobe"] == "stats" and report["schema"] == 1
    assert report["lost_total"] == 0 and report["in_flight"] == 0
    by_event = {f["event"]: f for f in report["functions"]}
    assert set(by_event) == set(LOOP)
    assert report["calls"] == 25 * 3 * len(LOOP)
    for name, f in by_event.items():
        assert f["count"] == 75, name
        assert f["api"] == "runtime"
        assert f["errors"] == {"cudaErrorInsufficientDriver": 75} and f["failed"] == 75
        check_histogram(f)
    # sorted by total time, largest first
    totals = [f["total_ns"] for f in report["functions"]]
    assert totals == sorted(totals, reverse=True)
    # the table went to stdout, after the workload's own lines
    assert "cudaErrorInsufficientDriver x75" in proc.stdout and "P99" in proc.stdout


def test_events_filter_sort_and_exit_status(tmp_path, libcudart):
    exe = build_workload("runtime_calls.c")
    report, proc = stats_json(tmp_path, "mem.json", "--lib", str(libcudart), "-e",
                              "cudaMalloc,cudaFree", "--sort", "name", command=[str(exe), "4"])
    assert proc.returncode == 0, proc.stderr
    assert [(f["event"], f["count"]) for f in report["functions"]] == [("cudaFree", 4),
                                                                      ("cudaMalloc", 4)]
    proc = run_cudaprobe("stats", "--lib", str(libcudart), "--", "sh", "-c", "exit 7")
    assert proc.returncode == 7, proc.stderr


def test_compare_flags_moved_counts(tmp_path, libcudart):
    exe = build_workload("runtime_calls.c")
    base, proc = stats_json(tmp_path, "base.json", "--lib", str(libcudart), "-e", "memory",
                            command=[str(exe), "10"])
    assert proc.returncode == 0, proc.stderr
    # same workload: nothing moved (p50 left out: its noise is not what this tests)
    _same, proc = stats_json(tmp_path, "same.json", "--lib", str(libcudart), "-e", "memory",
                             "--compare", str(tmp_path / "base.json"), "--min-calls", "1000000",
                             command=[str(exe), "10"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "no count or p50 moved" in proc.stdout
    # 13 loops instead of 10: every count moved by 30%
    moved, proc = stats_json(tmp_path, "moved.json", "--lib", str(libcudart), "-e", "memory",
                             "--compare", str(tmp_path / "base.json"), "--min-calls", "1000000",
                             command=[str(exe), "13"])
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert moved["compare"]["moved"] == [
        {"event": e, "metric": "count", "before": 10, "after": 13, "percent": 30.0}
        for e in ("cudaFree", "cudaMalloc", "cudaMemset")]
    assert moved["compare"]["threshold_percent"] == 20
    _loose, proc = stats_json(tmp_path, "loose.json", "--lib", str(libcudart), "-e", "memory",
                              "--compare", str(tmp_path / "base.json"), "--threshold", "30",
                              "--min-calls", "1000000", command=[str(exe), "13"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert base["calls"] == 30


def test_interval_prints_cumulative_tables(tmp_path, libcudart):
    exe = build_workload("runtime_calls.c")
    # the workload sleeps 1.5 s before its calls: the first tables are empty
    proc = run_cudaprobe("stats", "--lib", str(libcudart), "-e", "cudaMalloc", "--interval",
                         "0.5", "--", str(exe), "3", "1", "1500")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("cudaprobe stats, ") >= 2
    assert proc.stdout.count("cudaprobe stats: ") == 1  # the final table
    assert proc.stdout.rstrip().endswith("0 lost")
    assert "cudaMalloc │     3" in proc.stdout.split("cudaprobe stats: ")[1]


def test_latency_buckets_of_calls_of_known_length(tmp_path):
    """On the memstub runtime cudaStreamSynchronize sleeps as long as it is told:
    100 calls of at least 700 us and 10 of at least 20 ms. Lower bounds only:
    how much longer a sleep takes is up to the machine."""
    stub = build_memstub()
    exe = build_workload("sync_sleeps.c")
    report, proc = stats_json(tmp_path, "sleeps.json", "--lib", str(stub / "libcudart.so.13"),
                              "-e", "cudaStreamSynchronize",
                              command=[str(exe), "700", "100", "20000", "10"], env=stub_env())
    assert proc.returncode == 0, proc.stderr
    [f] = report["functions"]
    assert f["count"] == 110 and f["failed"] == 0 and f["errors"] == {}
    check_histogram(f)
    short, long = 700_000, 20_000_000
    assert f["min_ns"] >= short and f["max_ns"] >= long
    assert sum(b["count"] for b in f["histogram"] if b["hi_ns"] > long) >= 10
    assert f["histogram"][0]["lo_ns"] >= 1 << (short.bit_length() - 1)  # slot of 700 us
    assert short <= f["p50_ns"] and long <= f["p95_ns"] <= f["p99_ns"]
    assert f["total_ns"] >= 100 * short + 10 * long


def test_attach_to_a_running_process(tmp_path, libcudart):
    exe = build_workload("runtime_calls.c")
    # 4 loops, begun once cudaprobe says it has attached
    app = subprocess.Popen([str(exe), "4", "1", "-"], stdin=subprocess.PIPE,
                           stdout=subprocess.DEVNULL)
    out = tmp_path / "pid.json"
    stats = subprocess.Popen(cudaprobe_cmd("stats", "--pid", str(app.pid), "--lib",
                                           str(libcudart), "-o", str(out)),
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        err = Lines(stats.stderr)
        err.wait_for(lambda s: f"attached to pid {app.pid}" in s, "the attach")
        app.stdin.close()  # go
        assert app.wait(timeout=WAIT_S) == 0
        assert stats.wait(timeout=WAIT_S) == 0, err.text()
    finally:
        app.kill()
        stats.kill()
    assert "every traced pid has exited" in err.text()
    report = json.loads(out.read_text())
    assert {f["event"]: f["count"] for f in report["functions"]} == dict.fromkeys(LOOP, 4)


def test_duration_over_leaves_the_command_running(libcudart, tmp_path):
    # as trace does: never harm the command; say so, and exit 124 as timeout(1).
    # Files, not pipes: the command left running holds them (and is killed after)
    out, err = tmp_path / "stdout.txt", tmp_path / "stderr.txt"
    with open(out, "w") as stdout, open(err, "w") as stderr:
        rc = subprocess.run(cudaprobe_cmd("stats", "--lib", str(libcudart), "-d", "0.5", "--",
                                          "sleep", "infinity"),
                            stdout=stdout, stderr=stderr, timeout=WAIT_S).returncode
    said = err.read_text()
    running = re.search(r"--duration is over: sleep \(pid (\d+)\) keeps running", said)
    if running:
        os.kill(int(running[1]), signal.SIGKILL)
    assert rc == 124, said
    assert running, said
    assert "0 calls in" in out.read_text()


def test_every_return_code_counted_past_the_codes_a_record_holds(tmp_path):
    """Six error codes of one function: the first four met are counted in the
    probe's own per-CPU record, the other two in the `error_codes` hash."""
    exe = build_workload("error_codes.c")
    report, proc = stats_json(tmp_path, "stats.json", "--lib", str(exe),
                              command=[str(exe), "70", "7"])
    assert proc.returncode == 0, proc.stderr
    made = {t["code"]: t["calls"] for t in map(json.loads, proc.stdout.splitlines()[:7])}
    assert made == dict.fromkeys(range(7), 10)
    [f] = report["functions"]
    assert f["count"] == 70 and f["failed"] == 60
    assert f["errors"] == {error_name("runtime", code): 10 for code in range(1, 7)}


@pytest.mark.parametrize("command", ["stats", "memory"])
def test_a_json_report_never_shares_stdout_with_the_command_unasked(tmp_path, libcudart, command):
    """`stats -f json -- CMD | jq` would read the command's output and the report
    together: refused in one line before anything runs; with -o - (asked for),
    both go to stdout, the report after the command's line."""
    refused = run_cudaprobe(command, "-f", "json", "--lib", str(libcudart), "--", "sh", "-c",
                            "echo RAN")
    assert refused.returncode == 2 and refused.stdout == ""
    (line,) = refused.stderr.splitlines()
    assert line.startswith("cudaprobe: the JSON report would share stdout") and "-o FILE" in line
    asked = run_cudaprobe(command, "-f", "json", "-o", "-", "--lib", str(libcudart), "--", "sh",
                          "-c", "echo RAN")
    assert asked.returncode == 0, asked.stderr
    first, _, report = asked.stdout.partition("\n")
    assert first == "RAN" and json.loads(report)["cudaprobe"] == command
