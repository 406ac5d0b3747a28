"""Lost events are never silent: counted, said live, in the summary and the
JSONL trailer, and an error with --strict. The summary's calls are still
exact: the kernel counts every call before the ring can drop its row.

A one-page ring buffer (--ringbuf-pages 1: 4 KiB, 15 events) and a workload
calling as fast as it can make the kernel drop events for certain.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time

from cudaprobe.catalogue.enums import error_name

from ..conftest import HANG_S, build_workload, cudaprobe_cmd
from .running import host_pid_of
from .steady import steady_trace_argv, trace_steady, trailer

EVENTS = "cudaGetDeviceCount,cudaMalloc,cudaFree"


def test_every_call_is_traced_or_counted_as_lost(tmp_path, libcudart):
    """The workload calls until the live line has been said twice (seen
    however fast or slow the machine), then is stopped (SIGINT: it ends the
    loop it is in and prints how many it made): every call of those loops is
    a row or counted as lost."""
    out, err = tmp_path / "calls.jsonl", tmp_path / "err"
    with open(err, "w") as errors:
        proc = subprocess.Popen(steady_trace_argv(out, libcudart, 0, "-e", EVENTS,
                                                  "--ringbuf-pages", "1"),
                                stdout=subprocess.PIPE, stderr=errors, text=True)
    try:
        deadline = time.monotonic() + HANG_S
        while len(LIVE.findall(err.read_text())) < 2:
            assert proc.poll() is None and time.monotonic() < deadline, err.read_text()
            time.sleep(0.05)
        workload = host_pid_of(proc.pid, "steady_calls")
        os.kill(workload, signal.SIGINT)
        stdout, _ = proc.communicate(timeout=HANG_S)
    finally:
        if proc.poll() is None:
            proc.kill()
    stderr = err.read_text()
    assert proc.returncode == 0, stderr  # the command's status: no --strict
    loops = int(re.search(r"^loops=(\d+)$", stdout, re.M).group(1))
    s = trailer(out)
    assert s["lost"]["ringbuf_full"] > 0
    assert s["lost_total"] == sum(s["lost"].values())
    # nothing vanishes: each of the 3 calls per loop is a row or a count
    assert s["rows"] + s["lost"]["ringbuf_full"] + s["lost"]["pairing_map_full"] == 3 * loops
    assert s["rows"] == len(out.read_text().splitlines()) - 1
    # and the calls, counted in the kernel, are all of them
    assert s["calls"] == 3 * loops
    assert {name: c["calls"] for name, c in s["by_event"].items()} == dict.fromkeys(
        EVENTS.split(","), loops)
    # live, while tracing: the status line, with counts that only grow
    live = [int(n) for n in LIVE.findall(stderr)]
    assert len(live) >= 2 and live == sorted(live) and live[-1] <= s["lost_total"]
    # and in the human summary at the end
    assert f"{s['lost_total']} lost (ringbuf_full={s['lost']['ringbuf_full']})" in stderr


LIVE = re.compile(r"cudaprobe: (\d+) events lost so far \(ringbuf_full=")


def test_strict_exits_3_when_events_were_lost(tmp_path, libcudart):
    proc, out = trace_steady(tmp_path, libcudart, 100_000, "-e", EVENTS, "--ringbuf-pages", "1",
                             "--strict")
    assert proc.returncode == 3, proc.stderr
    lost = trailer(out)["lost_total"]
    assert lost > 0
    assert proc.stderr.splitlines()[-1] == f"cudaprobe: {lost} events lost: exit 3 (--strict)"


def test_strict_keeps_the_commands_status_when_nothing_was_lost(tmp_path, libcudart):
    proc, out = trace_steady(tmp_path, libcudart, 100, "-e", EVENTS, "--strict")
    assert proc.returncode == 0, proc.stderr
    s = trailer(out)
    assert s["lost_total"] == 0 and s["calls"] == s["rows"] == 300
    assert "events lost" not in proc.stderr


def test_csv_has_the_losses_in_the_summary_on_stderr(tmp_path, libcudart):
    proc, out = trace_steady(tmp_path, libcudart, 100_000, "-e", EVENTS, "--ringbuf-pages", "1",
                             output="calls.csv")
    assert proc.returncode == 0, proc.stderr
    rows = out.read_text().splitlines()
    assert rows[0].startswith("time_ms,")
    m = re.search(r"(\d+) calls in [\d.]+s, (\d+) as rows, 0 still in flight, (\d+) lost "
                  r"\(ringbuf_full=(\d+)\)", proc.stderr)
    assert m and int(m.group(1)) == 300_000 and int(m.group(2)) == len(rows) - 1
    assert int(m.group(2)) + int(m.group(4)) == 300_000


def test_summary_counts_every_call_when_rows_are_lost(tmp_path, libcudart):
    """4 threads make 400,000 calls into a 15-record ring: most rows drop, yet
    each function's calls, errors and latency in the summary are those of
    every call, as the workload counted them; the rows lost are beside."""
    exe = build_workload("threaded_calls.c")
    out = tmp_path / "calls.jsonl"
    proc = subprocess.run(cudaprobe_cmd("trace", "--lib", str(libcudart), "-o", str(out), "-e",
                                        "cudaMalloc,cudaFree", "--ringbuf-pages", "1", "--",
                                        str(exe), "4", "50000"),
                          capture_output=True, text=True, timeout=HANG_S)
    assert proc.returncode == 0, proc.stderr
    made = json.loads(proc.stdout)
    s = trailer(out)
    lines = out.read_text().splitlines()[:-1]
    for name in ("cudaMalloc", "cudaFree"):
        counted = s["by_event"][name]
        assert counted["calls"] == made[name]["calls"] == 200_000
        assert counted["errors"] == {error_name("runtime", int(code)): n
                                     for code, n in made[name]["errors"].items()}
        row_ns = [c["duration_ns"] for c in map(json.loads, lines) if c["event"] == name]
        assert counted["total_ns"] > sum(row_ns) > 0
    assert s["calls"] == 400_000
    assert s["lost"]["ringbuf_full"] > 0
    assert s["rows"] == len(lines) == 400_000 - s["lost_total"]
    assert ("400000 calls in " in proc.stderr
            and f"{s['rows']} as rows, 0 still in flight, {s['lost_total']} lost" in proc.stderr)
