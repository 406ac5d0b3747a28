"""A trace's NCCL calls as the GPU checks read them (check-nccl.sh,
check-descendants.sh): the outer calls in time order, and the GPU time of
each, its own or its group's."""

from __future__ import annotations

import json
from pathlib import Path


def rows(path: Path) -> tuple[list[dict], dict]:
    """The trace's NCCL calls, but those made inside another of their thread
    (ncclBcast's ncclBroadcast), in time order; and its summary."""
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    calls, last = [], {}
    for c in sorted(lines[:-1], key=lambda c: c["ts_ns"]):
        outer = last.get((c["pid"], c["tid"]))
        end = c["ts_ns"] + (c["duration_ns"] or 0)
        if outer is not None and outer[0] <= c["ts_ns"] and end <= outer[1]:
            continue
        last[(c["pid"], c["tid"])] = (c["ts_ns"], end)
        calls.append(c)
    return calls, lines[-1]["summary"]


def gpu_ns(calls: list[dict]) -> dict[int, int]:
    """index in `calls` -> GPU ns: its own, or its group's where it is a group's one call."""
    out, depth, members = {}, {}, {}
    for i, c in enumerate(calls):
        key = (c["pid"], c["tid"])
        if c["event"] == "ncclGroupStart":
            depth[key] = depth.get(key, 0) + 1
        elif c["event"] == "ncclGroupEnd" and depth.get(key):
            depth[key] -= 1
            group = members.pop(key, []) if depth[key] == 0 else []
            if c.get("gpu") and len(group) == 1:
                out[group[0]] = c["gpu"]["duration_ns"]
        elif c["category"] in ("collective", "p2p"):
            if c.get("gpu"):
                out[i] = c["gpu"]["duration_ns"]
            if depth.get(key):
                members.setdefault(key, []).append(i)
    return out
