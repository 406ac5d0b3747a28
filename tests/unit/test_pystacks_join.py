"""decode/pystacks.py: side records in, each call's stack out, never garbage."""

from __future__ import annotations

from cudaprobe.decode import pystacks as ps
from cudaprobe.decode.pystacks import PENDING_PER_THREAD, PyStacks
from cudaprobe.probe import pyrecords as pr
from cudaprobe.targets.pyoffsets import LAYOUTS

V312 = ((3, 12), LAYOUTS[(3, 12)])
ASCII = (1 << 2) | (1 << 5) | (1 << 6)  # kind 1, compact, ascii


def code_record(code: int, name: str, first: int, table: bytes, gen: int = 7, ident: int = 1,
                file: str = "f.py") -> bytes:
    head = pr.CODE_HEAD.pack(0, pr.SIDE_CODE, 1, gen, code, first, len(table), 0, ASCII,
                             len(file), len(name), ASCII, ident)
    fname = file.encode()[:pr.STR_MAX + pr.STR_SLACK].ljust(pr.STR_MAX + pr.STR_SLACK, b"\0")
    fn = name.encode()[:pr.NAME_MAX + pr.STR_SLACK].ljust(pr.NAME_MAX + pr.STR_SLACK, b"\0")
    return head + fname + fn + table.ljust(pr.TABLE_MAX, b"\0")


def stack_record(tid: int, ts: int, frames: list[tuple], flags: int = 0, gen: int = 7,
                 lender: int = 0, waiting: int = 0, kind: int = pr.SIDE_STACK,
                 node: tuple[int, int] | None = None) -> bytes:
    """frames: (code, instr, ident, kind) each; node: (node_seq, node_thread)"""
    kinds = bytes(f[3] for f in frames).ljust(pr.MAX_FRAMES, b"\0")
    body = b"".join(pr.FRAME.pack(*f[:3]) for f in frames)
    seq, thread = node or (0, 0)
    head = pr.STACK_HEAD.pack(0, kind, tid, ts, gen, 1, len(frames),
                              flags | (pr.NODE if node else 0), lender, waiting, seq, thread)
    return head + kinds + body.ljust(pr.MAX_FRAMES * pr.FRAME.size, b"\0")


# one location entry of 8 code units at line first + 2
TABLE = bytes([0x80 | (13 << 3) | 7, 4])
AT = LAYOUTS[(3, 12)].code_adaptive  # instruction offsets are from the code object's start


def test_frames_innermost_first_with_lines_shims_left_out():
    s = PyStacks([V312])
    s.add([code_record(0x100, "inner", 10, TABLE), code_record(0x200, "outer", 20, TABLE)])
    s.add([stack_record(5, 99, [(0x100, AT + 2, 1, pr.CODE), (0x300, 0, 0, pr.SHIM),
                                (0x200, AT + 4, 1, pr.CODE)], flags=pr.CUT)])
    stack = s.pop(5, 99)
    assert stack.frames == [{"file": "f.py", "line": 12, "function": "inner"},
                            {"file": "f.py", "line": 22, "function": "outer"}]
    assert stack.cut
    assert s.pop(5, 99) is None  # once


def test_a_frame_not_a_code_object_or_unnamed_hides_the_stack_and_says_why():
    s = PyStacks([V312])
    s.add([code_record(0x100, "inner", 10, TABLE)])
    s.add([stack_record(5, 1, [(0x100, AT, 1, pr.CODE), (0x400, 0, 0, pr.NOT_CODE)]),
           stack_record(5, 2, [(0x100, AT, 1, pr.CODE), (0x500, AT, 1, pr.CODE)]),
           stack_record(5, 3, [(0x100, AT, 1, pr.CODE)], gen=8)])  # another image of pid 1
    assert [s.pop(5, ts).missing for ts in (1, 2, 3)] == [ps.NOT_CODE, ps.NOT_NAMED, ps.NOT_NAMED]
    assert s.pop(5, 1) is None  # once
    assert s.missing == {ps.NOT_CODE: 1, ps.NOT_NAMED: 2}  # said at the end


def test_code_in_reused_memory_is_decoded_by_its_own_identity():
    """Two code objects at one address, one after the other, each with its
    record: each frame is named by the record of its identity, not the first."""
    s = PyStacks([V312])
    s.add([code_record(0x100, "<module>", 1, TABLE, ident=41, file="cell_0.py")])
    s.add([stack_record(5, 1, [(0x100, AT, 41, pr.CODE)])])
    s.add([code_record(0x100, "<module>", 1, bytes([0x80 | (13 << 3) | 7, 0]), ident=42,
                       file="cell_1.py")])
    s.add([stack_record(5, 2, [(0x100, AT, 42, pr.CODE)]),
           stack_record(5, 3, [(0x100, AT, 41, pr.CODE)])])
    assert s.pop(5, 1).frames == [{"file": "cell_0.py", "line": 3, "function": "<module>"}]
    assert s.pop(5, 2).frames == [{"file": "cell_1.py", "line": 1, "function": "<module>"}]
    assert s.pop(5, 3).frames[0]["file"] == "cell_0.py"  # both kept: records come first


def test_a_thread_not_told_says_why():
    s = PyStacks([V312])
    s.add([stack_record(5, 1, [], flags=pr.LIST_CHANGED),
           stack_record(5, 2, [], flags=pr.TOO_MANY)])
    first, second = s.pop(5, 1), s.pop(5, 2)
    assert (first.frames, first.missing) == ([], ps.LIST_CHANGED)
    assert second.missing == ps.TOO_MANY
    assert first.fields() == {"py_stack_missing": ps.LIST_CHANGED}
    assert s.missing == {ps.LIST_CHANGED: 1, ps.TOO_MANY: 1}  # said at the end


def test_long_names_are_cut_marked_and_the_stack_kept():
    s = PyStacks([V312])
    long_file, long_name = "/" + "d" * 400 + ".py", "f" * 300
    s.add([code_record(0x100, long_name, 10, TABLE, file=long_file),
           code_record(0x200, "outer", 20, TABLE)])
    s.add([stack_record(5, 1, [(0x100, AT, 1, pr.CODE), (0x200, AT, 1, pr.CODE)])])
    inner, outer = s.pop(5, 1).frames
    assert inner["file"] == long_file[:pr.STR_MAX + pr.STR_SLACK] + "…"
    assert inner["function"] == long_name[:pr.NAME_MAX + pr.STR_SLACK] + "…"
    assert inner["truncated"] is True and inner["line"] == 12
    assert outer == {"file": "f.py", "line": 22, "function": "outer"}


def test_stacks_waiting_per_thread_are_bounded():
    s = PyStacks([V312])
    s.add([stack_record(5, ts, []) for ts in range(20000)])
    assert len(s._pending[5]) == PENDING_PER_THREAD
    assert s.pop(5, 19999) is None and 0 not in s._pending[5]  # the oldest went first


def test_a_borrowed_stack_says_whose_and_why_and_several_lenders_say_none():
    s = PyStacks([V312])
    s.add([code_record(0x100, "waits", 10, TABLE)])
    frame = [(0x100, AT + 2, 1, pr.CODE)]
    s.add([stack_record(9, 1, frame, flags=pr.HANDED, lender=4242, waiting=2),
           stack_record(9, 2, frame, flags=pr.ONLY, waiting=1),  # 3.9/3.10: tid not known
           stack_record(9, 3, [], flags=pr.LENDERS_MANY, waiting=3),
           stack_record(9, 4, frame)])
    lent = s.pop(9, 1)
    assert lent.frames == [{"file": "f.py", "line": 12, "function": "waits"}]
    assert lent.borrowed == {"tid": 4242, "because": ps.HANDED}
    assert s.pop(9, 2).borrowed == {"tid": None, "because": ps.ONLY}
    none = s.pop(9, 3)
    assert none.missing == ps.LENDERS_MANY and not none.frames and none.borrowed is None
    assert s.pop(9, 4).borrowed is None  # its own
    assert (s.borrowed, s.missing) == (2, {ps.LENDERS_MANY: 1})  # said at the end


def node_record(tid: int, ts: int, seq: int, frames: list[tuple], gen: int = 7) -> bytes:
    """a forward op made autograd node `seq` on thread `tid`"""
    return stack_record(tid, ts, frames, gen=gen, kind=pr.SIDE_NODE, node=(seq, 0))


def test_a_backward_call_carries_the_stack_of_the_forward_op_that_made_its_node():
    s = PyStacks([V312])
    # the probe reserves a stack's record before it sends the code records in it
    s.add([node_record(5, 1, 41, [(0x100, AT + 2, 1, pr.CODE), (0x200, AT, 1, pr.CODE)]),
           code_record(0x100, "forward", 10, TABLE), code_record(0x200, "step", 20, TABLE),
           node_record(5, 2, 42, [(0x200, AT + 4, 1, pr.CODE)])])
    # the device thread 9: no frame of its own, borrowing main's backward() line
    s.add([stack_record(9, 10, [(0x200, AT + 6, 1, pr.CODE)], flags=pr.HANDED, lender=5,
                        node=(41, 1)),
           stack_record(9, 11, [], node=(42, 1))])
    first, second = s.pop(9, 10), s.pop(9, 11)
    assert first.frames[0]["line"] == 22 and first.borrowed == {"tid": 5, "because": "handed"}
    assert first.node == 41
    assert first.forward == [{"file": "f.py", "line": 12, "function": "forward"},
                             {"file": "f.py", "line": 22, "function": "step"}]
    assert second.frames == [] and second.forward[0]["line"] == 22
    assert second.fields() == {"autograd_node": 42, "py_stack_forward": second.forward}
    assert s.forward == 2 and not s.no_forward
    assert s.stacks == 1  # the node records are no calls: not counted as stacks


def test_a_backward_call_whose_forward_is_not_known_says_why_and_never_guesses():
    s = PyStacks([V312])
    s.add([code_record(0x100, "forward", 10, TABLE), code_record(0x200, "other", 30, TABLE)])
    frames = [(0x100, AT, 1, pr.CODE)]
    # node 7 made by two threads (each counts its own): told apart by the thread
    # PyTorch numbers, once another of its nodes showed which tid that is
    s.add([node_record(5, 1, 6, frames), node_record(5, 2, 7, frames),
           node_record(6, 3, 7, [(0x200, AT, 1, pr.CODE)])])
    s.add([stack_record(9, 10, [], node=(7, 1)),      # before thread 1 is known: none
           stack_record(9, 11, [], node=(6, 1)),      # thread 1 made node 6 alone: it is tid 5
           stack_record(9, 12, [], node=(7, 1)),      # now node 7 of thread 1: tid 5's
           stack_record(9, 13, [], node=(3, 1)),      # made before the trace
           stack_record(9, 14, [], node=(ps.NO_FORWARD_OP, 1))])  # AccumulateGrad
    calls = [s.pop(9, ts) for ts in range(10, 15)]
    assert [c.forward is not None for c in calls] == [False, True, True, False, False]
    assert calls[2].forward[0]["function"] == "forward"  # tid 5's, not tid 6's
    assert [c.forward_missing for c in calls] == [ps.THREADS, None, None, ps.BEFORE, ps.LEAF]
    assert s.no_forward == {ps.THREADS: 1, ps.BEFORE: 1, ps.LEAF: 1}
    assert calls[3].fields() == {"autograd_node": 3, "py_stack_forward_missing": ps.BEFORE}


def test_forward_ops_kept_are_bounded():
    s = PyStacks([V312])
    s.add([code_record(0x100, "forward", 10, TABLE)])
    s.add([node_record(5, i, i, [(0x100, AT, 1, pr.CODE)]) for i in range(ps.NODES_KEPT + 10)])
    s.add([stack_record(9, 1, [], node=(0, 1)), stack_record(9, 2, [], node=(20, 1))])
    assert s.pop(9, 1).forward is None and s.pop(9, 2).forward is not None
