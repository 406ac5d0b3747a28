"""Every row of a process that is one rank of a job carries its rank: two
runtime_calls processes started as a launcher starts its ranks (RANK and
WORLD_SIZE in their environment) and one started without, traced together
with --pid. Each waits on stdin until cudaprobe says it has attached, and
runs on after its calls until cudaprobe has stopped: a process's environment
is read while it runs."""

from __future__ import annotations

import csv
import io
import os
import signal
import subprocess

import pytest

from ..conftest import build_workload, cudaprobe_cmd
from .running import WAIT_S, Lines, read_jsonl

ENVS = [{"RANK": "0", "WORLD_SIZE": "2"}, {"RANK": "1", "WORLD_SIZE": "2"}, {}]


def traced(libcudart, output: str) -> tuple[str, list[int]]:
    """Three held runtime_calls processes (ENVS), traced with --pid into `output`
    (a file, or "-": the table on stdout); returns (stdout, their pids)."""
    exe = build_workload("runtime_calls.c")
    base = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    apps = [subprocess.Popen([str(exe), "1", "1", "-"], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True, env=base | env) for env in ENVS]
    pids = [a.pid for a in apps]
    argv = ["trace", "--api", "runtime", "--lib", str(libcudart), "-o", output]
    for pid in pids:
        argv += ["--pid", str(pid)]
    tracer = subprocess.Popen(cudaprobe_cmd(*argv), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        said, err = Lines(tracer.stdout), Lines(tracer.stderr)
        err.wait_for(lambda s: "attached to pid" in s, "the attach")
        for app in apps:
            app.stdin.write("go\n")
            app.stdin.flush()
        for app in apps:
            Lines(app.stdout).wait_for(lambda s: s == '{"done":1}', "its calls")
        tracer.send_signal(signal.SIGINT)
        assert tracer.wait(timeout=WAIT_S) == 0, err.text()
        for app in apps:
            app.stdin.close()
        assert [app.wait(timeout=WAIT_S) for app in apps] == [0, 0, 0]
    finally:
        for p in (*apps, tracer):
            p.kill()
    said._thread.join(timeout=WAIT_S)
    return said.text(), pids


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "table"])
def test_every_row_of_a_rank_carries_it(tmp_path, libcudart, fmt):
    path = tmp_path / f"calls.{fmt}"
    stdout, pids = traced(libcudart, "-" if fmt == "table" else str(path))
    want = {pids[0]: (0, 2), pids[1]: (1, 2), pids[2]: None}
    if fmt == "jsonl":
        calls, summary = read_jsonl(path)
        assert summary["lost_total"] == 0
        for pid, rank in want.items():
            rows = [c for c in calls if c["pid"] == pid]
            assert len(rows) == 10
            # every row of a rank says it; the other's none (no key, not a guess)
            assert all(((c["rank"], c["world_size"]) if "rank" in c else None) == rank
                       for c in rows), rows
            assert all("world_size" not in c for c in rows if "rank" not in c)
    elif fmt == "csv":
        rows = list(csv.DictReader(io.StringIO(path.read_text())))
        for pid, rank in want.items():
            said = {(r["rank"], r["world_size"]) for r in rows if int(r["pid"]) == pid}
            assert said == {tuple(map(str, rank)) if rank else ("", "")}
    else:
        rows = [line.split() for line in stdout.splitlines() if " cudaMalloc " in line]
        names = {int(cells[2]): cells[1] for cells in rows if cells[3].isdigit()}
        # 15 wide: the name is cut in its middle, the rank kept
        assert names == {pids[0]: "runtime…lls[r0]", pids[1]: "runtime…lls[r1]",
                         pids[2]: "runtime_calls"}, stdout
