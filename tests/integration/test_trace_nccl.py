"""cudaprobe trace on NCCL: the real libnccl.so.2 of the nvidia-nccl-cu13 wheel
(scripts/setup unpacks it), called by nccl_calls.c with known arguments.

No GPU: ncclGetVersion succeeds, ncclCommInitRank fails (no device) and the
collectives refuse the communicator they are given; the probes fire on the
real code with the real arguments all the same, and each decoded argument is
compared with what the workload printed that it passed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from cudaprobe.catalogue.generated import ENUMS
from cudaprobe.targets.nccl_comm import comm_layout

from ..conftest import NCCL_HOME, build_workload, cudaprobe_cmd
from .conftest import expected_calls, run_cudaprobe, trace_jsonl
from .running import WAIT_S, Lines, Tracing, started

SIZES = {"ncclInt8": 1, "ncclUint8": 1, "ncclInt32": 4, "ncclUint32": 4, "ncclInt64": 8,
         "ncclUint64": 8, "ncclFloat16": 2, "ncclFloat32": 4, "ncclFloat64": 8,
         "ncclBfloat16": 2, "ncclFloat8e4m3": 1}


def nccl_calls(libnccl: Path) -> Path:
    d = str(libnccl.parent)
    return build_workload("nccl_calls.c", extra=[f"-I{NCCL_HOME / 'include'}", f"-L{d}",
                                                 "-l:libnccl.so.2", f"-Wl,-rpath,{d}"])


@pytest.fixture(scope="module")
def traced(tmp_path_factory, libnccl):
    exe = nccl_calls(libnccl)
    # --lib names the wheel's lib directory: libnccl is found in it
    calls, summary, proc = trace_jsonl(tmp_path_factory.mktemp("nccl"), "--api", "nccl",
                                       "--lib", str(libnccl.parent), "-e", "all",
                                       command=[str(exe)])
    assert proc.returncode == 0, proc.stderr
    # ncclBcast calls ncclBroadcast, probed too: with the ncclBcast's arguments,
    # inside its interval, and under it
    at = next(i for i, c in enumerate(calls) if c["event"] == "ncclBcast")
    outer, inner = calls[at], calls[at + 1]
    assert inner["event"] == "ncclBroadcast" and inner["tid"] == outer["tid"]
    assert (outer["depth"], outer["parent"]) == (0, None)
    assert (inner["depth"], inner["parent"]) == (1, outer["ts_ns"])
    assert outer["ts_ns"] < inner["ts_ns"]
    assert inner["ts_ns"] + inner["duration_ns"] <= outer["ts_ns"] + outer["duration_ns"]
    buff = outer["args"]["buff"]
    assert inner["args"] | {"sendbuff": buff, "recvbuff": buff} == inner["args"]
    assert {k: inner["args"][k] for k in ("count", "datatype", "root", "comm", "stream")} == {
        k: outer["args"][k] for k in ("count", "datatype", "root", "comm", "stream")}
    del calls[at + 1]
    return calls, summary, expected_calls(proc.stdout)


def test_every_call_is_traced_in_order(traced):
    calls, summary, truth = traced
    assert [c["event"] for c in calls] == [t["event"] for t in truth]
    assert summary["lost_total"] == 0
    results = ENUMS["ncclResult_t"]
    for call, t in zip(calls, truth):
        assert call["api"] == "nccl" and call["process"] == "nccl_calls"
        assert call["ret"] == t["ret"] and call["ret_name"] == results[t["ret"]], call
    # no launcher, no communicator made (no GPU): no rank, rather than a guess
    assert not any("rank" in c or "world_size" in c for c in calls)
    by_event = {c["event"]: c for c in calls}
    assert by_event["ncclGetVersion"]["ret_name"] == "ncclSuccess"
    assert by_event["ncclAllReduce"]["ret_name"] == "ncclInvalidArgument"
    assert by_event["ncclAllReduce"]["category"] == "collective"
    assert by_event["ncclSend"]["category"] == "p2p"
    assert by_event["ncclGroupStart"]["category"] == "group"
    # the all-reduce made in the group comes under its ncclGroupStart; the rest at the top
    depths = {c["event"]: (c["depth"], c["parent"]) for c in calls}
    assert depths["ncclAllReduce"] == (1, by_event["ncclGroupStart"]["ts_ns"])
    assert depths["ncclGroupEnd"] == depths["ncclGroupStart"] == depths["ncclSend"] == (0, None)


def test_the_calls_nccl_makes_come_under_the_nccl_call(tmp_path, libnccl, libcuda):
    """ncclCommInitRank calls the runtime (libnccl's own copy of it), which
    loads libcuda and calls the driver, then fails (no GPU): every call made on
    its thread inside its interval comes under it, the runtime's one level
    down and the driver's under that, however the ring delivered them."""
    exe = nccl_calls(libnccl)
    calls, summary, proc = trace_jsonl(
        tmp_path, "-e", "all", "--lib", str(libnccl.parent), "--lib", str(libcuda),
        command=[str(exe)], env={**os.environ, "LD_LIBRARY_PATH": str(libcuda.parent)})
    assert proc.returncode == 0, proc.stderr
    assert summary["lost_total"] == 0
    init = next(c for c in calls if c["event"] == "ncclCommInitRank")
    assert (init["depth"], init["parent"]) == (0, None)
    start, end = init["ts_ns"], init["ts_ns"] + init["duration_ns"]
    inside = [c for c in calls if c["tid"] == init["tid"] and start < c["ts_ns"] < end]
    by_ts = {c["ts_ns"]: c for c in calls if c["tid"] == init["tid"]}
    apis = set()
    for c in inside:
        apis.add(c["api"])
        chain = [c]
        while chain[-1]["parent"] is not None:
            chain.append(by_ts[chain[-1]["parent"]])
        assert chain[-1] is init, c  # under it, at any depth
        assert c["depth"] == len(chain) - 1 >= (1 if c["api"] == "runtime" else 2), c
        assert calls.index(c) > calls.index(init)  # and after it, in call order
    assert apis == {"runtime", "driver"}  # the runtime (cudaGetDevice) and the driver it loaded
    # the program's NCCL calls after it are at the top again
    assert [c["depth"] for c in calls if c["event"] in ("ncclAllGather", "ncclCommSplit")] == [0, 0]


def test_every_argument_is_decoded_as_passed(traced):
    calls, _, truth = traced
    names = ENUMS["ncclDataType_t"]
    ops = ENUMS["ncclRedOp_t"]
    checked = 0
    for call, t in zip(calls, truth):
        args = call["args"]
        if call["event"] == "ncclGetVersion":
            assert args == {"version": t["version"]}  # read at exit: it succeeded
            continue
        if call["event"] == "ncclCommInitRank":
            # failed: the communicator it would have written is not read
            assert args == {"comm": None, "nranks": t["nranks"], "commId": None,
                            "rank": t["rank"]}
            assert "comm=-" in call["details"].split()
            continue
        if call["event"] == "ncclCommSplit":
            # refused: the new communicator is not read; the one split is no known one
            assert args == {"comm": t["comm"], "color": 7, "key": 2, "newcomm": None,
                            "config": "0x0", "rank": None, "nranks": None}
            continue
        if call["event"] == "ncclCommCount":
            assert args == {"comm": t["comm"], "count": None, "rank": None, "nranks": None}
            continue
        if "datatype" not in t:
            assert args == {}  # the group calls take nothing
            continue
        for key in ("sendbuff", "recvbuff", "buff", "comm", "stream"):
            if key in t:
                assert args[key] == hex(int(t[key], 16)), (call, key)
        count_key = next(k for k in ("count", "sendcount", "recvcount") if k in t)
        assert args[count_key] == t[count_key]
        datatype = names[t["datatype"]]
        assert args["datatype"] == datatype
        assert args["bytes"] == t[count_key] * SIZES[datatype]
        for key in ("root", "peer"):
            if key in t:
                assert args[key] == t[key]
        if "op" in t:
            assert args["op"] == ops[t["op"]]
        # the communicator was made by no traced call, and is no real one
        assert args["rank"] is None and args["nranks"] is None
        assert f"comm={args['comm']} (rank unknown)" in call["details"]
        assert f"datatype={datatype} bytes=" in call["details"]
        checked += 1
    assert checked == 11


def test_a_communicator_made_before_the_attach_is_read_from_memory(tmp_path, libnccl):
    """--pid: nccl_comm.c's communicator was made before cudaprobe attached, so no
    traced call says its rank; it is read from the process's memory, at the
    offsets this libnccl's code gives (targets/nccl_comm.py), and only where it
    starts with NCCL's magic. The workload runs until cudaprobe has stopped: a
    communicator is read while its process lives."""
    layout = comm_layout(str(libnccl))
    assert layout is not None
    d = str(libnccl.parent)
    exe = build_workload("nccl_comm.c", extra=[f"-I{NCCL_HOME / 'include'}", f"-L{d}",
                                               "-l:libnccl.so.2", f"-Wl,-rpath,{d}"])
    workload = subprocess.Popen([str(exe), str(layout.rank_offset), str(layout.nranks_offset)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        out = Lines(workload.stdout)
        made = json.loads(out.wait_for(lambda s: s.startswith('{"pid"'), "its pid"))
        tracing = Tracing(tmp_path, "--api", "nccl", "--pid", str(made["pid"]))
        tracing.wait_for(f"attached to pid {made['pid']}")
        workload.stdin.write("go\n")
        workload.stdin.flush()
        out.wait_for(lambda s: s.startswith('{"done"'), "done")
        calls, summary, _ = tracing.interrupt()
        workload.stdin.close()
        assert workload.wait(timeout=WAIT_S) == 0
    finally:
        workload.kill()
        workload.wait()
    assert summary["lost_total"] == 0
    assert [c["event"] for c in calls] == ["ncclCommCuDevice", "ncclAllReduce"] * 2
    for call, comm, said in zip(calls, [made["comm"]] * 2 + [made["zeroed"]] * 2,
                                ["(rank 2 of 5)"] * 2 + ["(rank unknown)"] * 2):
        assert call["args"]["comm"] == hex(int(comm, 16))
        assert f"comm={call['args']['comm']} {said}" in call["details"], call
        known = said != "(rank unknown)"
        assert (call["args"]["rank"], call["args"]["nranks"]) == ((2, 5) if known else
                                                                  (None, None))
        assert call["ret_name"] == "ncclInvalidArgument"  # NCCL refused both: no GPU
        # started by no launcher: the process's rank is its communicator's, on
        # every row from the first that used it
        assert (call["rank"], call["world_size"]) == (2, 5)


# nccl-tests' size of an operation on n ranks, from the bytes its calls
# passed: (its name in nccl-tests, the size)
def nccl_tests_size(calls: list[dict], nbytes: list[int], n: int) -> tuple[str | None, int]:
    events = [c["event"] for c in calls]
    if len(calls) == 1:
        times_n = {"ncclAllGather": "all_gather", "ncclReduceScatter": "reduce_scatter",
                   "ncclAlltoAll": "alltoall", "ncclGather": "gather"}
        alone = {"ncclAllReduce": "all_reduce", "ncclBcast": "broadcast", "ncclSend": "send",
                 "ncclRecv": "recv"}
        if events[0] in times_n:
            return times_n[events[0]], nbytes[0] * n
        return alone[events[0]], nbytes[0]
    if events == ["ncclSend", "ncclRecv"]:
        return "sendrecv", nbytes[0]
    if set(events) == {"ncclSend", "ncclRecv"}:  # one of each with every rank
        return "alltoall", nbytes[0] * n
    assert set(events) == {"ncclAllReduce"}
    return "all_reduce", sum(nbytes)


TEST_TYPES = {"ncclFloat32": "float", "ncclBfloat16": "bfloat16", "ncclInt64": "int64",
              "ncclInt8": "int8", "ncclFloat64": "double", "ncclInt32": "int32",
              "ncclFloat16": "half"}


def group_name(events: list[str]) -> str:
    counts: dict[str, int] = {}
    for e in events:
        counts[e] = counts.get(e, 0) + 1
    return "ncclGroup[" + "+".join(f"{n} {e}" if n > 1 else e for e, n in counts.items()) + "]"


def test_stats_by_collective_a_row_per_operation_and_size(tmp_path, libnccl):
    """--pid on nccl_sizes.c: collectives of several sizes and datatypes,
    alone and in groups, on a communicator of rank 1 of 4 (read from the
    process's memory): a row per operation, size and datatype with the bytes
    the calls passed, nccl-tests' size, count and type, as many calls as the
    program made. NCCL refused every one (no GPU): all failed, no time, no
    bandwidth."""
    layout = comm_layout(str(libnccl))
    assert layout is not None
    d = str(libnccl.parent)
    exe = build_workload("nccl_sizes.c", extra=[f"-I{NCCL_HOME / 'include'}", f"-L{d}",
                                                "-l:libnccl.so.2", f"-Wl,-rpath,{d}"])
    workload = started(subprocess.Popen([str(exe), str(layout.rank_offset),
                                         str(layout.nranks_offset)], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True))
    out = Lines(workload.stdout)
    made = json.loads(out.wait_for(lambda s: s.startswith('{"pid"'), "its pid"))
    report = tmp_path / "stats.json"
    stats = started(subprocess.Popen(cudaprobe_cmd(
        "stats", "--by", "collective", "--pid", str(made["pid"]), "-o", str(report)),
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
    err = Lines(stats.stderr)
    err.wait_for(lambda s: f"attached to pid {made['pid']}" in s, "the attach")
    workload.stdin.write("go\n")
    workload.stdin.flush()
    out.wait_for(lambda s: s.startswith('{"done"'), "done")
    stats.send_signal(signal.SIGINT)
    assert stats.wait(timeout=WAIT_S) == 0, err.text()
    workload.stdin.close()
    assert workload.wait(timeout=WAIT_S) == 0
    document = json.loads(report.read_text())
    assert document["lost_total"] == 0
    names = ENUMS["ncclDataType_t"]
    kinds = [k for k in expected_calls(out.text()) if "times" in k]
    rows = document["nccl"]["collectives"]
    assert len(rows) == len(kinds) == 11
    by_key = {(r["operation"], r["bytes"], r["type"]): r for r in rows}
    for kind in kinds:
        calls = kind["calls"]
        datatype = names[calls[0]["datatype"]]
        nbytes = [c["count"] * SIZES[names[c["datatype"]]] for c in calls]
        test, size = nccl_tests_size(calls, nbytes, made["nranks"])
        events = [c["event"] for c in calls]
        name = events[0] if len(events) == 1 else group_name(events)
        row = by_key[(name, sum(nbytes), TEST_TYPES[datatype])]
        assert row == {
            "operation": name, "nccl_tests": test, "pid": made["pid"], "rank": made["rank"],
            "nranks": made["nranks"], "bytes": sum(nbytes), "size": size,
            "count": size // SIZES[datatype], "type": TEST_TYPES[datatype],
            "calls": kind["times"], "failed": kind["times"], "timed_by": "host",
            "timed_calls": 0, "time_ns": None, "kernel_avg_ns": None, "host_avg_ns": None,
            "algbw_gbps": None, "busbw_gbps": None, "bus_factor": row["bus_factor"]}, row
    assert document["nccl"]["waits"] == []  # one process


def test_stats_by_collective_without_the_number_of_ranks(tmp_path, libnccl):
    """nccl_calls.c's communicator is no known one: each collective is a row
    with the bytes its call passed, and nccl-tests' size where it does not
    depend on the number of ranks."""
    exe = nccl_calls(libnccl)
    out = tmp_path / "stats.json"
    proc = run_cudaprobe("stats", "--by", "collective", "-o", str(out), "--lib", str(libnccl),
                         "--", str(exe))
    assert proc.returncode == 0, proc.stderr
    report = json.loads(out.read_text())
    names = ENUMS["ncclDataType_t"]
    truth = [t for t in expected_calls(proc.stdout) if "datatype" in t]
    rows = {r["operation"]: r for r in report["nccl"]["collectives"]}
    assert set(rows) == {t["event"] for t in truth}
    times_n = {"ncclAllGather", "ncclReduceScatter", "ncclAlltoAll", "ncclGather", "ncclScatter"}
    for t in truth:
        row = rows[t["event"]]
        count = next(t[k] for k in ("count", "sendcount", "recvcount") if k in t)
        nbytes = count * SIZES[names[t["datatype"]]]
        # every one failed (no GPU): counted, but no time
        assert (row["calls"], row["failed"], row["time_ns"]) == (1, 1, None), row
        assert (row["rank"], row["nranks"], row["bytes"]) == (None, None, nbytes)
        assert row["size"] == (None if t["event"] in times_n else nbytes), row
    assert report["nccl"]["waits"] == []  # one process
    assert report["lost_total"] == 0
    assert {f["event"] for f in report["functions"]} >= {"ncclCommInitRank", "ncclAllReduce"}
    refused = run_cudaprobe("stats", "--by", "collective", "--api", "runtime", "--", "true")
    assert refused.returncode == 2 and "--api must include nccl" in refused.stderr
