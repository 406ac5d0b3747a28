"""decode/pystacks.py: side records in, each call's stack out, never garbage."""

from __future__ import annotations

from cudaprobe.decode.pystacks import PENDING_PER_THREAD, PyStacks
from cudaprobe.probe import pyrecords as pr
from cudaprobe.targets.pyoffsets import LAYOUTS

V312 = ((3, 12), LAYOUTS[(3, 12)])
ASCII = (1 << 2) | (1 << 5) | (1 << 6)  # kind 1, compact, ascii


def code_record(code: int, name: str, first: int, table: bytes, gen: int = 7) -> bytes:
    head = pr.CODE_HEAD.pack(0, pr.SIDE_CODE, 1, gen, code, first, len(table), 0, ASCII,
                             len("f.py"), len(name), ASCII, 0)
    fname = b"f.py".ljust(pr.STR_MAX + pr.STR_SLACK, b"\0")
    fn = name.encode().ljust(pr.NAME_MAX + pr.STR_SLACK, b"\0")
    return head + fname + fn + table.ljust(pr.TABLE_MAX, b"\0")


def stack_record(tid: int, ts: int, frames: list[tuple], flags: int = 0, gen: int = 7) -> bytes:
    body = b"".join(pr.FRAME.pack(*f) for f in frames)
    head = pr.STACK_HEAD.pack(0, pr.SIDE_STACK, tid, ts, gen, 1, len(frames), flags)
    return head + body.ljust(pr.MAX_FRAMES * pr.FRAME.size, b"\0")


# one location entry of 8 code units at line first + 2
TABLE = bytes([0x80 | (13 << 3) | 7, 4])
AT = LAYOUTS[(3, 12)].code_adaptive  # instruction offsets are from the code object's start


def test_frames_innermost_first_with_lines_shims_left_out():
    s = PyStacks([V312])
    s.add([code_record(0x100, "inner", 10, TABLE), code_record(0x200, "outer", 20, TABLE)])
    s.add([stack_record(5, 99, [(0x100, AT + 2, 10, pr.CODE), (0x300, 0, 0, pr.SHIM),
                                (0x200, AT + 4, 20, pr.CODE)], flags=pr.CUT)])
    stack = s.pop(5, 99)
    assert stack.frames == [{"file": "f.py", "line": 12, "function": "inner"},
                            {"file": "f.py", "line": 22, "function": "outer"}]
    assert stack.cut
    assert s.pop(5, 99) is None  # once


def test_a_frame_not_a_code_object_or_unnamed_hides_the_stack():
    s = PyStacks([V312])
    s.add([code_record(0x100, "inner", 10, TABLE)])
    s.add([stack_record(5, 1, [(0x100, AT, 10, pr.CODE), (0x400, 0, 0, pr.NOT_CODE)]),
           stack_record(5, 2, [(0x100, AT, 10, pr.CODE), (0x500, AT, 3, pr.CODE)]),
           stack_record(5, 3, [(0x100, AT, 10, pr.CODE)], gen=8)])  # another image of pid 1
    assert s.pop(5, 1) is None and s.pop(5, 2) is None and s.pop(5, 3) is None
    assert s.unreadable == 3


def test_stacks_waiting_per_thread_are_bounded():
    s = PyStacks([V312])
    s.add([stack_record(5, ts, []) for ts in range(20000)])
    assert len(s._pending[5]) == PENDING_PER_THREAD
    assert s.pop(5, 19999) is None and 0 not in s._pending[5]  # the oldest went first
