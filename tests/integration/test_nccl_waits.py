"""stats --by collective --gpu-time on two ranks, with real uprobes: the
per-size table and the waits, from GPU records joined to the NCCL calls
that queued them.

Without a GPU the real libnccl refuses every communicator, so that none of
its collectives queues work to time: the ranks here call the stand-in
libnccl of tests/workloads/nccl_stub.c, whose calls succeed as on a GPU and
read their CPU interval inside the call, as CUPTI's callbacks do, and
tests/workloads/nccl_fake_gpu.c writes for each operation what the GPU-time
library would have written: the launch's API record and the NCCL kernel's,
on a timeline the program chose and printed (rank 1's kernel starting
30 ms late in each iteration, rank 0's host coming late to every call). The
real libnccl's calls are decoded into the same table in test_trace_nccl.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ..conftest import CUDA_HOME, NCCL_HOME, REPO, WORKLOAD_BIN, WORKLOADS, build_once
from .conftest import expected_calls, run_cudaprobe
from .memstub import STUB_CC

STUB_DIR = WORKLOAD_BIN / "ncclstub"
ITERS, LATE_US = 6, 30_000
# nccl-tests' busbw / algbw on n ranks, per its test
BUS = {"all_reduce": lambda n: 2 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n,
       "reduce_scatter": lambda n: (n - 1) / n, "alltoall": lambda n: (n - 1) / n,
       "broadcast": lambda n: 1.0, "sendrecv": lambda n: 1.0}
ELEMENT = {"float": 4, "bfloat16": 2}


def fake_ranks() -> Path:
    """nccl_fake_gpu on the stand-in libnccl.so.2 (found through its DT_RPATH)."""
    inc = [f"-I{NCCL_HOME / 'include'}", f"-I{CUDA_HOME}/include"]
    stub = WORKLOADS / "nccl_stub.c"
    lib = build_once(STUB_DIR / "libnccl.so.2", [stub], lambda to: [
        *STUB_CC, *inc, "-Wl,-soname,libnccl.so.2", "-o", str(to), str(stub)])
    src = WORKLOADS / "nccl_fake_gpu.c"
    return build_once(STUB_DIR / "nccl_fake_gpu", [src, lib], lambda to: [
        "gcc", "-O1", "-g", *inc, f"-I{REPO / 'cupti'}", "-o", str(to), str(src),
        f"-L{STUB_DIR}", "-l:libnccl.so.2", "-Wl,--disable-new-dtags", f"-Wl,-rpath,{STUB_DIR}"])


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """One traced run of the two ranks: (report, stderr, what the program printed)."""
    if not (NCCL_HOME / "include" / "nccl.h").is_file():
        pytest.skip("NCCL's header not unpacked: run scripts/setup")
    exe = fake_ranks()
    out = tmp_path_factory.mktemp("ncclwaits") / "stats.json"
    proc = run_cudaprobe("stats", "--by", "collective", "--gpu-time", "--lib", str(STUB_DIR),
                         "-o", str(out), "--", str(exe), str(ITERS), str(LATE_US))
    assert proc.returncode == 0, proc.stderr
    printed = expected_calls(proc.stdout)
    return json.loads(out.read_text()), proc.stderr, printed


def group_name(events: list[str]) -> str:
    counts: dict[str, int] = {}
    for e in events:
        counts[e] = counts.get(e, 0) + 1
    return "ncclGroup[" + "+".join(f"{n} {e}" if n > 1 else e for e, n in counts.items()) + "]"


def test_each_operation_size_and_rank_as_nccl_tests_reports_it(run):
    """Every operation kind the ranks made, on each rank: a row with
    nccl-tests' size, count and type, every call timed on the GPU from the
    last rank's kernel start (the transfer the program chose, rank 0's waits
    left out), and nccl-tests' algbw and busbw from it."""
    report, _, printed = run
    assert report["lost_total"] == 0
    ranks = {p["rank"]: p["pid"] for p in printed if "pid" in p}
    kinds = [p for p in printed if "nccl_tests" in p]
    assert len(ranks) == 2 and len(kinds) == 10
    rows = report["nccl"]["collectives"]
    assert len(rows) == len(kinds) * 2  # nothing else: a row per kind and rank
    by_key = {(r["nccl_tests"], r["rank"], r["size"]): r for r in rows}
    for kind in kinds:
        events = kind["events"]
        for rank, pid in ranks.items():
            row = by_key[(kind["nccl_tests"], rank, kind["size"])]
            algbw = kind["size"] / kind["transfer_ns"]
            late = kind["late_ns"] if rank == 0 else 0
            assert row == {
                "operation": events[0] if len(events) == 1 else group_name(events),
                "nccl_tests": kind["nccl_tests"], "pid": pid, "rank": rank, "nranks": 2,
                "bytes": kind["bytes"], "size": kind["size"],
                "count": kind["size"] // ELEMENT[kind["type"]],
                "type": kind["type"], "calls": kind["times"], "failed": 0,
                "timed_by": "gpu", "timed_calls": kind["times"],
                "time_ns": kind["transfer_ns"], "kernel_avg_ns": kind["transfer_ns"] + late,
                "host_avg_ns": row["host_avg_ns"],
                "algbw_gbps": round(algbw, 3),
                "busbw_gbps": round(algbw * BUS[kind["nccl_tests"]](2), 3),
                "bus_factor": row["bus_factor"]}, (kind, row)
            assert row["host_avg_ns"] > 0


def test_waits_are_the_gpu_s_and_name_the_late_rank(run):
    """Rank 1's kernel started 30 ms late in each of the 6 iterations: rank 0
    waited 180 ms, rank 1 nothing, and rank 1 is the straggler, though rank
    0's host came to every call 2 ms after rank 1's. No wait exceeds the run."""
    report, _, printed = run
    (lateness,) = [p for p in printed if "late_rank" in p]
    ranks = {p["rank"]: p["pid"] for p in printed if "pid" in p}
    operations = sum(p["times"] for p in printed if "nccl_tests" in p)
    (waits,) = report["nccl"]["waits"]
    assert (waits["nranks"], waits["ranks_traced"], waits["matched"], waits["measured"]) == (
        2, 2, operations, operations)
    assert waits["straggler"] == lateness["late_rank"] == 1
    waited = lateness["late_ns"] * lateness["late_ops"]
    assert waits["ranks"] == [
        {"rank": 0, "pid": ranks[0], "last": 0, "waited_ns": waited, "caused_ns": 0,
         "max_ns": 0},
        {"rank": 1, "pid": ranks[1], "last": lateness["late_ops"], "waited_ns": 0,
         "caused_ns": waited, "max_ns": lateness["late_ns"]}]
    assert all(r["waited_ns"] <= report["duration_s"] * 1e9 for r in waits["ranks"])


def test_the_table_says_it():
    """The human table: a row per size, the straggler line."""
    exe = fake_ranks()
    proc = run_cudaprobe("stats", "--by", "collective", "--gpu-time", "--lib", str(STUB_DIR),
                         "--", str(exe), "2", "5000")
    assert proc.returncode == 0, proc.stderr
    cells = [[c.strip() for c in line.split("│")] for line in proc.stdout.splitlines()
             if "│" in line]
    (row,) = [c for c in cells if c[:2] == ["ncclAllReduce", "0/2"] and c[3] == "67108864"]
    # size, count, type, calls, failed, time (us), timed by, algbw, busbw
    assert row[3:] == ["67108864", "16777216", "float", "2", "", "300.0", "gpu",
                       f"{(64 << 20) / 300_000:.2f}", f"{(64 << 20) / 300_000:.2f}"]
    assert "straggler: rank 1 (its kernel started last in 2 of 25; the others waited for it " \
           "10.00ms, in all)" in proc.stdout
    assert "Waits on the GPU: communicator of 2 ranks #0, 25 of 25 operations timed on " \
           "every rank" in proc.stdout
