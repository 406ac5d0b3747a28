"""--py-stacks against what a hostile user does (pystack_hostile.py), on every
CPython this machine has, each launched under cudaprobe on the toolkit's
libcudart: code whose memory Python reuses for other code, the main thread
behind 1000 others in CPython's list, file and function names longer than
the probe keeps. Every row's py_stack is compared with the stack the
interpreter itself printed for that call: never another code object's
names or lines, never a thread left without its stack, a long name cut and
marked, not the stack dropped. And as on a kernel without may_goto
(CUDAPROBE_MAY_GOTO=0): a thread past the walk's bound says so on its row,
and a CPython whose code objects only a hash tells apart is said, not read."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cudaprobe.decode.pystacks import TOO_MANY

from .conftest import expected_calls, trace_jsonl
from .pythons import PYTHONS

pytestmark = pytest.mark.slow  # tens of seconds: scheduled first (tests/conftest.py)

WORKLOAD = Path(__file__).resolve().parent / "pystack_hostile.py"
EVENTS = ("-e", "cudaRuntimeGetVersion,cudaDriverGetVersion")
CELLS = 3 * 50  # pystack_hostile.py's cells: three runs of 50
THREADS = "1000"  # more than CP_PY_WALK_BOUNDED (512), the walk's bound without may_goto
# what docs/pystacks.md promises to keep of a name, in bytes as CPython holds
# it (1, 2 or 4 a character)
FILE_KEPT, FUNCTION_KEPT = 256, 128


def traced(tmp_path: Path, libcudart: Path, python: str, *mode: str,
           env: dict[str, str] | None = None) -> tuple[list[dict], list[dict], str]:
    """The rows of the workload's calls, what it printed of each, and what
    cudaprobe said on stderr."""
    rows, summary, proc = trace_jsonl(tmp_path, "--py-stacks", *EVENTS, "--lib", str(libcudart),
                                      command=[python, str(WORKLOAD), str(libcudart), *mode],
                                      env=env)
    assert proc.returncode == 0, proc.stderr
    assert summary["lost_total"] == 0
    return rows, expected_calls(proc.stdout), proc.stderr


def version_of(python: str) -> tuple[int, int]:
    major, minor = python.rsplit("python", 1)[1].split(".")
    return int(major), int(minor)


def frames(printed: dict) -> list[dict]:
    return [{"file": f, "line": line, "function": fn} for f, line, fn in printed["stack"]]


def paired(rows: list[dict], printed: list[dict]) -> list[tuple[dict, dict]]:
    """Each row with what the workload printed of the same call: per thread, in order."""
    assert len(rows) == len(printed)
    mine: dict[int, list[dict]] = {}
    for row in rows:
        mine.setdefault(row["tid"], []).append(row)
    pairs = []
    for want in printed:
        row = mine[want["tid"]].pop(0)
        assert row["event"] == want["event"]
        pairs.append((row, want))
    return pairs


@pytest.mark.parametrize("python", PYTHONS)
def test_code_in_reused_memory_has_its_own_file_line_and_function(tmp_path, libcudart, python):
    """150 pieces of code compiled, run once and freed (pystack_hostile.py's
    cells): where a piece took the memory, and has the first line, of one
    before it, its calls still have its own file, line and function."""
    rows, printed, _ = traced(tmp_path, libcudart, python, "cells")
    assert len(printed) == CELLS
    held: dict[tuple[int, int], list] = {}
    reused = sum(held.setdefault(tuple(p["code"]), p["stack"][1]) != p["stack"][1]
                 for p in printed)
    assert reused, "no code took the memory and first line of other code: nothing tested"
    wrong = [(row.get("py_stack"), frames(want)) for row, want in paired(rows, printed)
             if row.get("py_stack") != frames(want)]
    assert not wrong, (f"{len(wrong)} of {CELLS} calls with another stack "
                       f"({reused} in reused memory); the first: {wrong[0]}")


@pytest.mark.parametrize("python", PYTHONS)
def test_every_thread_is_found_however_many(tmp_path, libcudart, python):
    """1000 threads alive, then the main thread (1001st in CPython's list), the
    first thread started (1000th) and the last (1st) each call: each row has
    the stack its thread printed."""
    rows, printed, _ = traced(tmp_path, libcudart, python, "threads", THREADS)
    assert len(printed) == 3 and len({p["tid"] for p in printed}) == 3
    wrong = [f"{'main' if row['tid'] == row['pid'] else 'worker'} thread {row['tid']}: "
             f"{row.get('py_stack')}" for row, want in paired(rows, printed)
             if row.get("py_stack") != frames(want)]
    assert not wrong, wrong


def kept_characters(text: str, kept_bytes: int) -> int:
    """How many characters of `text` fit in `kept_bytes` as CPython holds it."""
    widest = max(map(ord, text))
    return kept_bytes // (1 if widest < 0x100 else 2 if widest < 0x10000 else 4)


@pytest.mark.parametrize("python", PYTHONS)
def test_long_names_are_cut_and_marked_never_the_stack_dropped(tmp_path, libcudart, python):
    """A 299-character file name, an 80-character one with an emoji, a
    200-character function name and a 100-character CJK one: each call has
    its whole stack, every line right; the long name kept at least as far as
    the docs say, ending in "…", its frame marked "truncated"; every other
    name whole and unmarked."""
    rows, printed, _ = traced(tmp_path, libcudart, python, "names")
    assert len(printed) == 4
    cut = []
    for i, (row, want) in enumerate(paired(rows, printed)):
        got = row.get("py_stack")
        assert got is not None and len(got) == len(want["stack"]), \
            (f"call {i}: {got} for {want['stack']}")
        for j, (frame, whole) in enumerate(zip(got, frames(want))):
            assert frame["line"] == whole["line"]
            for key, kept in (("file", FILE_KEPT), ("function", FUNCTION_KEPT)):
                if frame[key] == whole[key]:
                    continue
                text = frame[key]
                assert text.endswith("…") and whole[key].startswith(text[:-1]), (frame, whole)
                assert len(text) - 1 >= kept_characters(whole[key], kept), (frame, whole)
                cut.append((i, j, key))
            assert frame.get("truncated", False) == any(c[:2] == (i, j) for c in cut), frame
    # the cell's own frame (the second, under the helper that calls) of each
    assert cut == [(0, 1, "file"), (1, 1, "file"), (2, 1, "function"), (3, 1, "function")]


@pytest.mark.parametrize("python", PYTHONS)
def test_without_may_goto_what_is_not_read_is_said(tmp_path, libcudart, python):
    """The program an older kernel gets (CUDAPROBE_MAY_GOTO=0): on 3.12+, the
    thread started last (1st in the list) has its stack, and the main thread
    and the first started, past the walk's bound, each say why they have
    none; a CPython before 3.12 is said once on stderr, and no row of it has
    a stack, nor one of another code object."""
    env = {**os.environ, "CUDAPROBE_MAY_GOTO": "0"}
    rows, printed, err = traced(tmp_path, libcudart, python, "threads", THREADS, env=env)
    pairs = paired(rows, printed)
    if version_of(python) < (3, 12):
        assert "needs Linux 6.9 or later (may_goto)" in err, err
        assert all("py_stack" not in row and "py_stack_missing" not in row for row in rows)
        return
    for row, want in pairs:
        # the thread started last (by its name: thread ids wrap at pid_max, so the
        # last started need not have the largest)
        if want["thread"] == f"worker-{int(THREADS) - 1}":
            assert row.get("py_stack") == frames(want), row
        else:
            assert row.get("py_stack_missing") == TOO_MANY and "py_stack" not in row, row
    assert f"--py-stacks: 2 calls without their Python stack: {TOO_MANY}" in err, err
