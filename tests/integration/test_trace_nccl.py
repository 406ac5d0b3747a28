"""cudaprobe trace on NCCL: the real libnccl.so.2 of the nvidia-nccl-cu13 wheel
(scripts/setup unpacks it), called by nccl_calls.c with known arguments.

No GPU: ncclGetVersion succeeds, ncclCommInitRank fails (no device) and the
collectives refuse the communicator they are given; the probes fire on the
real code with the real arguments all the same, and each decoded argument is
compared with what the workload printed that it passed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cudaprobe.catalogue.generated import ENUMS

from ..conftest import NCCL_HOME, build_workload
from .conftest import expected_calls, trace_jsonl

SIZES = {"ncclInt8": 1, "ncclUint8": 1, "ncclInt64": 8, "ncclFloat16": 2, "ncclFloat32": 4,
         "ncclFloat64": 8, "ncclBfloat16": 2}


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
    return calls, summary, expected_calls(proc.stdout)


def test_every_call_is_traced_in_order(traced):
    calls, summary, truth = traced
    assert [c["event"] for c in calls] == [t["event"] for t in truth]
    assert summary["lost_total"] == 0
    results = ENUMS["ncclResult_t"]
    for call, t in zip(calls, truth):
        assert call["api"] == "nccl" and call["process"] == "nccl_calls"
        assert call["ret"] == t["ret"] and call["ret_name"] == results[t["ret"]], call
    by_event = {c["event"]: c for c in calls}
    assert by_event["ncclGetVersion"]["ret_name"] == "ncclSuccess"
    assert by_event["ncclAllReduce"]["ret_name"] == "ncclInvalidArgument"
    assert by_event["ncclAllReduce"]["category"] == "collective"
    assert by_event["ncclSend"]["category"] == "p2p"
    assert by_event["ncclGroupStart"]["category"] == "group"


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
        if "datatype" not in t:
            assert args == {}  # the group calls take nothing
            continue
        for key in ("sendbuff", "recvbuff", "comm", "stream"):
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
    assert checked == 7
