"""Lost events are never silent: counted, said live, in the summary and the
JSONL trailer, and an error with --strict.

A one-page ring buffer (--ringbuf-pages 1: 4 KiB, 15 events) and a workload
calling as fast as it can make the kernel drop events for certain.
"""

from __future__ import annotations

import re

from .steady import trace_steady, trailer

EVENTS = "cudaGetDeviceCount,cudaMalloc,cudaFree"


def test_every_call_is_traced_or_counted_as_lost(tmp_path, libcudart):
    loops = 300_000
    proc, out = trace_steady(tmp_path, libcudart, loops, "-e", EVENTS, "--ringbuf-pages", "1")
    assert proc.returncode == 0, proc.stderr  # the command's status: no --strict
    s = trailer(out)
    assert s["lost"]["ringbuf_full"] > 0
    assert s["lost_total"] == sum(s["lost"].values())
    # nothing vanishes: each of the 3 calls per loop is a row or a count
    assert s["calls"] + s["lost"]["ringbuf_full"] + s["lost"]["pairing_map_full"] == 3 * loops
    assert s["calls"] == len(out.read_text().splitlines()) - 1
    # live, while tracing: the status line, with counts that only grow
    live = [int(n) for n in re.findall(r"cudaprobe: (\d+) events lost so far \(ringbuf_full=",
                                       proc.stderr)]
    assert live and live == sorted(live) and live[-1] <= s["lost_total"]
    # and in the human summary at the end
    assert f"{s['lost_total']} lost (ringbuf_full={s['lost']['ringbuf_full']})" in proc.stderr


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
    assert s["lost_total"] == 0 and s["calls"] == 300
    assert "events lost" not in proc.stderr


def test_csv_has_the_losses_in_the_summary_on_stderr(tmp_path, libcudart):
    proc, out = trace_steady(tmp_path, libcudart, 100_000, "-e", EVENTS, "--ringbuf-pages", "1",
                             output="calls.csv")
    assert proc.returncode == 0, proc.stderr
    rows = out.read_text().splitlines()
    assert rows[0].startswith("time_ms,")
    m = re.search(r"(\d+) calls in [\d.]+s, 0 still in flight, (\d+) lost \(ringbuf_full=(\d+)\)",
                  proc.stderr)
    assert m and int(m.group(1)) == len(rows) - 1
    assert int(m.group(1)) + int(m.group(3)) == 300_000
