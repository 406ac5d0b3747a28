"""--py-stacks in each output: JSONL/JSON rows, CSV's last columns, the table's
PYTHON column (the program's own innermost frame), Chrome's slice args, and
the rows of `stats --by line`; a stack borrowed from a waiting thread marked
so in each."""

from __future__ import annotations

import csv
import io
import json

from rich.console import Console

from cudaprobe.analysis.by_line import NO_LENDER, FoldedStacks, GpuByLine, line_of, user_frame
from cudaprobe.analysis.stats import KernelTally
from cudaprobe.decode.calls import Call
from cudaprobe.decode.gputime import GpuWork
from cudaprobe.decode.pystacks import BEFORE, HANDED, LENDERS_MANY, ONLY, PyStack
from cudaprobe.output.chrome import ChromeReporter
from cudaprobe.output.csv import CsvReporter
from cudaprobe.output.jsonl import JsonlReporter
from cudaprobe.output.stats_view import render_gpu_stats
from cudaprobe.output.table import TableReporter

FRAMES = [
    {"file": "/venv/lib/python3.12/site-packages/torch/optim/adam.py", "line": 547,
     "function": "_single_tensor_adam"},
    {"file": "/usr/lib/python3.12/threading.py", "line": 10, "function": "run"},
    {"file": "/home/me/train.py", "line": 54, "function": "main"},
    {"file": "/home/me/train.py", "line": 90, "function": "<module>"},
]


def call(stack: bool = True) -> Call:
    c = Call(1.5, 1500, 7, 8, "python", "cudaLaunchKernel", "runtime", "kernel", 900, 0,
             "cudaSuccess", {}, "")
    c.py_stack = PyStack(FRAMES, cut=False) if stack else None
    return c


def test_the_users_frame_is_outside_libraries_and_the_standard_library():
    assert user_frame(FRAMES) == FRAMES[2]
    assert user_frame(FRAMES[:2]) == FRAMES[0]  # none of the program's own: the innermost
    assert line_of(call()) == "/home/me/train.py:54 (main)"
    assert line_of(call(stack=False)) == "(no Python frame)"
    tally = KernelTally(line_of)
    tally.add([call(), call(), call(stack=False)])
    assert {s.event: s.count for s in tally.functions} == {
        "/home/me/train.py:54 (main)": 2, "(no Python frame)": 1}


def test_jsonl_csv_chrome_table():
    out = io.StringIO()
    JsonlReporter(out).calls([call(), call(stack=False)])
    rows = [json.loads(line) for line in out.getvalue().splitlines()]
    assert rows[0]["py_stack"] == FRAMES and "py_stack" not in rows[1]

    out = io.StringIO()
    r = CsvReporter(out, py_stacks=True)
    r.start()
    r.calls([call()])
    header, row = list(csv.reader(io.StringIO(out.getvalue())))
    assert header[-3:] == ["py_stack", "py_stack_borrowed", "py_stack_forward"]
    assert json.loads(row[-3]) == FRAMES and row[-2] == row[-1] == ""

    out = io.StringIO()
    r = ChromeReporter(out)
    r.start()
    r.calls([call()])
    assert '"/home/me/train.py:54 main"' in out.getvalue()

    out = io.StringIO()
    r = TableReporter(out, py_stacks=True)
    r.start()
    r.calls([call(), call(stack=False)])
    header, with_stack, without = out.getvalue().splitlines()[:3]
    assert "PYTHON" in header and "/home/me/train.py:54" in with_stack
    assert "train.py" not in without


MISSING = "the interpreter's list of threads changed while it was read"


def missing_call() -> Call:
    c = call(stack=False)
    c.py_stack = PyStack([], cut=False, missing=MISSING)
    return c


def test_a_stack_not_read_says_why_in_each_output():
    out = io.StringIO()
    JsonlReporter(out).calls([missing_call()])
    row = json.loads(out.getvalue())
    assert row["py_stack_missing"] == MISSING and "py_stack" not in row
    assert missing_call().to_dict()["py_stack_missing"] == MISSING

    out = io.StringIO()
    r = CsvReporter(out, py_stacks=True)
    r.start()
    r.calls([missing_call()])
    _header, row = list(csv.reader(io.StringIO(out.getvalue())))
    assert json.loads(row[-3]) == {"missing": MISSING} and row[-2] == ""

    out = io.StringIO()
    r = ChromeReporter(out)
    r.start()
    r.calls([missing_call()])
    assert "py_stack_missing" in out.getvalue() and MISSING in out.getvalue()

    out = io.StringIO()
    r = TableReporter(out, py_stacks=True)
    r.start()
    r.calls([missing_call()])
    assert "(not read)" in out.getvalue().splitlines()[1]

    assert line_of(missing_call()) == f"(Python stack not read: {MISSING})"


def test_a_truncated_frame_keeps_its_mark_in_jsonl_and_csv():
    cut = {"file": "/home/me/" + "d" * 40 + "…", "line": 3, "function": "f", "truncated": True}
    c = call()
    c.py_stack = PyStack([cut], cut=False)
    out = io.StringIO()
    JsonlReporter(out).calls([c])
    assert json.loads(out.getvalue())["py_stack"] == [cut]
    out = io.StringIO()
    r = CsvReporter(out, py_stacks=True)
    r.start()
    r.calls([c])
    assert json.loads(list(csv.reader(io.StringIO(out.getvalue())))[1][-3]) == [cut]


def lent_call(tid: int | None = 4242, because: str = HANDED) -> Call:
    c = call()
    c.tid = 9  # a thread with no Python frame of its own
    c.py_stack = PyStack(FRAMES, cut=False, borrowed={"tid": tid, "because": because})
    return c


def test_a_borrowed_stack_is_marked_with_its_lender_and_why_in_each_output():
    out = io.StringIO()
    JsonlReporter(out).calls([lent_call()])
    row = json.loads(out.getvalue())
    assert row["py_stack"] == FRAMES
    assert row["py_stack_borrowed"] == {"tid": 4242, "because": "handed"}
    assert lent_call().to_dict()["py_stack_borrowed"] == {"tid": 4242, "because": "handed"}

    out = io.StringIO()
    r = CsvReporter(out, py_stacks=True)
    r.start()
    r.calls([lent_call(), call()])
    _header, lent, own = list(csv.reader(io.StringIO(out.getvalue())))
    assert json.loads(lent[-3]) == FRAMES
    assert json.loads(lent[-2]) == {"tid": 4242, "because": "handed"} and own[-2] == ""

    out = io.StringIO()
    r = ChromeReporter(out)
    r.start()
    r.calls([lent_call(), lent_call(None, ONLY)])
    text = out.getvalue()
    assert "borrowed from tid 4242: it woke this thread last (it handed the work over)" in text
    assert ("borrowed from a thread whose tid is not known: the only Python thread waiting "
            "in a C call") in text

    out = io.StringIO()
    r = TableReporter(out, py_stacks=True)
    r.start()
    r.calls([lent_call(), lent_call(None, ONLY), call()])
    lines = out.getvalue().splitlines()
    assert "train.py:54 (lent by 4242)" in lines[1]  # its start cut, the mark kept
    assert "train.py:54 (lent)" in lines[2]
    assert "lent" not in lines[3]

    assert line_of(lent_call()) == "/home/me/train.py:54 (main)"  # counted on the line


def test_no_lender_among_several_says_so_in_each_output():
    c = call(stack=False)
    c.py_stack = PyStack([], cut=False, missing=LENDERS_MANY)
    out = io.StringIO()
    JsonlReporter(out).calls([c])
    row = json.loads(out.getvalue())
    assert row["py_stack_missing"] == LENDERS_MANY and "py_stack" not in row
    out = io.StringIO()
    r = TableReporter(out, py_stacks=True)
    r.start()
    r.calls([c])
    assert "(no lender)" in out.getvalue().splitlines()[1]
    assert line_of(c) == NO_LENDER


FORWARD = [
    {"file": "/venv/lib/python3.12/site-packages/torch/nn/modules/linear.py", "line": 125,
     "function": "Linear.forward"},
    {"file": "/home/me/model.py", "line": 31, "function": "Block.forward"},
    {"file": "/home/me/train.py", "line": 50, "function": "main"},
]


def backward_call(forward: list[dict] | None = FORWARD, kernel_ns: int = 700) -> Call:
    """A launch of autograd's device thread: backward()'s stack lent, node 41's
    forward op made on model.py:31"""
    c = call()
    c.py_stack = PyStack(FRAMES, cut=False, borrowed={"tid": 4242, "because": HANDED},
                         node=41, forward=forward,
                         forward_missing=None if forward else BEFORE)
    c.gpu = [GpuWork(7, "kernel", 1000, 1000 + kernel_ns, 0, 1, 7, 1, "_Z6matmulv")]
    return c


def test_a_backward_call_shows_its_forward_line_in_each_output():
    row = backward_call().to_dict()
    assert row["py_stack"] == FRAMES and row["py_stack_forward"] == FORWARD
    assert row["autograd_node"] == 41
    missing = backward_call(None).to_dict()
    assert missing["py_stack_forward_missing"] == BEFORE and "py_stack_forward" not in missing

    out = io.StringIO()
    r = CsvReporter(out, py_stacks=True)
    r.start()
    r.calls([backward_call(), backward_call(None), call()])
    _header, known, unknown, own = list(csv.reader(io.StringIO(out.getvalue())))
    assert json.loads(known[-1]) == {"node": 41, "stack": FORWARD}
    assert json.loads(unknown[-1]) == {"node": 41, "missing": BEFORE} and own[-1] == ""

    out = io.StringIO()
    r = ChromeReporter(out)
    r.start()
    r.calls([backward_call()])
    assert "/home/me/model.py:31 Block.forward" in out.getvalue()

    out = io.StringIO()
    r = TableReporter(out, py_stacks=True)
    r.start()
    r.calls([backward_call(), backward_call(None)])
    lines = out.getvalue().splitlines()
    assert "model.py:31 (backward)" in lines[1]
    assert "train.py:54 (lent by 4242)" in lines[2]  # no forward line: its own (lent) line


def test_stats_by_line_puts_backward_gpu_time_on_the_forward_line_and_folds_it():
    calls = [backward_call(kernel_ns=700), backward_call(None, kernel_ns=300), call()]
    calls[2].gpu = [GpuWork(7, "kernel", 0, 100, 0, 1, 7, 2, "_Z3fwdv")]
    gpu = GpuByLine()
    gpu.add(calls)
    rows = {r.name: r for r in gpu.stats().kernels}
    assert rows["/home/me/model.py:31 (Block.forward)"].total_ns == 700
    assert rows["/home/me/model.py:31 (Block.forward)"].backward_ns == 700
    assert rows["/home/me/train.py:54 (main)"].total_ns == 400  # its own, and the unknown one
    assert rows["/home/me/train.py:54 (main)"].backward_ns == 0
    assert rows["/home/me/model.py:31 (Block.forward)"].to_dict(True)["backward_ns"] == 700
    assert rows["/home/me/model.py:31 (Block.forward)"].to_dict(True)["forward_ns"] == 0
    assert "forward_ns" not in rows["/home/me/train.py:54 (main)"].to_dict(True)
    out = io.StringIO()
    render_gpu_stats(gpu.stats(), Console(file=out, width=200))
    header = next(line for line in out.getvalue().splitlines() if "LINE" in line)
    assert header.index("GPU TOTAL") < header.index("FORWARD") < header.index("BACKWARD")
    model = next(line for line in out.getvalue().splitlines() if "model.py:31" in line)
    assert [c.strip() for c in model.split("│")[2:5]] == ["700ns", "0ns", "700ns"], model

    folded = FoldedStacks()
    folded.add(calls)
    own = ("<module> (/home/me/train.py:90);main (/home/me/train.py:54);run "
           "(/usr/lib/python3.12/threading.py:10);_single_tensor_adam "
           "(/venv/lib/python3.12/site-packages/torch/optim/adam.py:547);")
    assert folded.lines() == [
        own + "fwd() 100\n", own + "matmul() 300\n",  # no forward line: its own
        "main (/home/me/train.py:50);Block.forward (/home/me/model.py:31);Linear.forward "
        "(/venv/lib/python3.12/site-packages/torch/nn/modules/linear.py:125);[backward];"
        "matmul() 700\n"]


def test_folded_stacks_escape_what_the_traced_process_named():
    c = call()
    c.py_stack = PyStack([{"file": "/x;y\n.py", "line": 1, "function": "f\x1b[31m"}],
                         cut=False)
    c.gpu = [GpuWork(7, "kernel", 0, 5, 0, 1, 7, 2, "k;x")]
    folded = FoldedStacks()
    folded.add([c])
    assert folded.lines() == ["f?[31m (/x?y?.py:1);k?x 5\n"]
