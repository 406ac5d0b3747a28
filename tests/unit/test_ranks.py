"""Each process's rank in its job (decode/ranks.py), and where rows show it."""

from __future__ import annotations

import io
import json

from cudaprobe.decode.calls import Call
from cudaprobe.decode.ranks import Ranks, launcher_rank
from cudaprobe.output.chrome import ChromeReporter
from cudaprobe.output.jsonl import JsonlReporter
from cudaprobe.output.table import process_label


def environ(**env: str) -> bytes:
    return b"".join(f"{k}={v}\0".encode() for k, v in env.items())


def test_the_launchers_variables_give_the_rank():
    assert launcher_rank(environ(PATH="/bin", RANK="1", WORLD_SIZE="2")) == (1, 2)
    assert launcher_rank(environ(RANK="3")) == (3, None)
    assert launcher_rank(environ(OMPI_COMM_WORLD_RANK="5", OMPI_COMM_WORLD_SIZE="8")) == (5, 8)
    assert launcher_rank(environ(PMI_RANK="0", PMI_SIZE="4")) == (0, 4)
    # torchrun's first
    assert launcher_rank(environ(PMI_RANK="0", RANK="2", WORLD_SIZE="4")) == (2, 4)
    # no rank, or none that is one: none, not a guess
    for env in ({}, {"LOCAL_RANK": "0"}, {"RANK": "x"}, {"RANK": "-1"},
                {"RANK": "2", "WORLD_SIZE": "2"}, {"RANK": ""}):
        assert launcher_rank(environ(**env)) is None, env


def test_the_environment_comes_first_then_the_first_communicator():
    environs = {10: (1, 2), 11: None, 12: None}
    read = []
    ranks = Ranks(lambda pid: read.append(pid) or environs[pid])
    for pid in (10, 11, 12, 10, 11):
        ranks.see(pid)
    assert read == [10, 11, 12]  # once per process
    ranks.communicator(10, 0, 8)  # a subgroup of rank 1's: its launcher's rank stays
    ranks.communicator(11, None, 4)  # not known whole: no rank
    ranks.communicator(12, 3, 4)
    ranks.communicator(12, 0, 2)  # a later communicator changes nothing
    assert ranks.of(10) == (1, 2) and ranks.of(11) == (None, None) and ranks.of(12) == (3, 4)
    assert ranks.json == {10: ',"rank":1,"world_size":2', 12: ',"rank":3,"world_size":4'}
    ranks.communicator(11, 4, 4)  # no rank of 4
    assert ranks.of(11) == (None, None)


def call(pid: int, rank: int | None = None, size: int | None = None) -> Call:
    c = Call(1.0, 1000, pid, pid, "python", "cudaMalloc", "runtime", "memory", 5, 0,
             "cudaSuccess", {"size": 4}, "size=4 B")
    c.rank, c.world_size = rank, size
    return c


def test_rows_say_the_rank_where_known():
    out = io.StringIO()
    JsonlReporter(out).calls([call(1, 1, 2), call(2)])
    ranked, unranked = map(json.loads, out.getvalue().splitlines())
    assert (ranked["rank"], ranked["world_size"]) == (1, 2)
    assert list(ranked)[-2:] == ["rank", "world_size"]
    assert "rank" not in unranked and "world_size" not in unranked
    assert process_label(call(1, 1, 2)) == "python[r1]" and process_label(call(2)) == "python"


def test_chrome_names_each_process_with_its_rank_once_known():
    out = io.StringIO()
    chrome = ChromeReporter(out)
    chrome.start()
    # a process's rank learned from its communicator, after its first calls
    chrome.calls([call(1), call(1), call(1, 0, 2), call(1, 0, 2)])
    names = [e["args"]["name"] for e in json.loads(out.getvalue() + "]")
             if e.get("name") == "process_name"]
    assert names == ["python", "python (rank 0)"]
