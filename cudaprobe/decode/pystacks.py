"""Python stacks (--py-stacks): the side records joined with the calls.

The probe sends, at a call's entry, the thread's frames as (code object,
identity, instruction offset), and the first time a process shows a code
object (by address and identity: one that took a freed one's memory is
another), that object's names and line table (bpf/pystacks.h). Here the
frames become [{"file", "line", "function"}], innermost first, and wait for
their call's record, which comes later (at its exit) with the same (tid,
entry time). A name longer than the probe's copy is cut, ends in "…", and
its frame says "truncated": true.

A thread with no Python frame may borrow the stack of a Python thread of its
process that waits in a C call (the probe's rule: bpf/pystacks.bpf.h); its
call then says whose stack it is and why that thread (PyStack.borrowed), and
where several could lend and none handed the work over, that no stack is
given (a `missing` reason, as below).

PyTorch's backward pass (docs/pystacks.md, "Backward on its forward line"):
each autograd node made in the forward pass comes with the stack of the
thread that made it (a SIDE_NODE record, by the node's sequence number), and
a call made while a thread evaluates a node says which (NODE). Such a call
gets the forward op's stack as `forward`: the line whose operation its work
differentiates, the link torch.profiler makes with the same numbers. Where
that stack is not known (the node was made before the trace began, it has
no forward op, several threads numbered nodes alike), it says why instead.

Never garbage: a stack with a frame whose code object failed the probe's
type check, or whose code record never came (the ring was full), is not
shown, and its call says why (PyStack.missing), as does one whose thread
the probe could not tell in the interpreter's list; `missing` counts them
by why, for the session to say at the end.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from dataclasses import dataclass
from typing import Any

from cudaprobe.decode import pylines
from cudaprobe.probe import pyrecords as pr
from cudaprobe.targets.pyoffsets import Layout

# stacks waiting for their call, per thread: a batch of the ring's records is
# all read before its calls are decoded (a thousand stacks and more), and
# nesting.CallOrder holds calls up to MAX_HELD; calls whose record never
# comes (--errors-only, lost) leave theirs until this many newer ones push them out
PENDING_PER_THREAD = 16384
FRAME_KEYS = ("file", "line", "function")


# why a call of a thread running Python has no stack (PyStack.missing)
LIST_CHANGED = "the interpreter's list of threads changed while it was read"
TOO_MANY = "more Python threads than this kernel lets the probe walk (Linux 6.9+ walks all)"
NOT_CODE = "a frame's code object could not be read"
NOT_NAMED = ("a code object's names were not received (the ring buffer was full) or are "
             "held in a form not read")
LENDERS_MANY = ("no Python frame, and several Python threads were waiting in C calls, none "
                "of which had woken this thread: whose work it did is not known")
# forward ops remembered (their nodes), for the backward calls to come: a
# training step makes thousands; a backward pass follows its forward at once
NODES_KEPT = 1 << 16
NO_FORWARD_OP = 2 ** 64 - 1  # a node with no forward op (AccumulateGrad: a leaf's gradient)
# why a backward call has no forward stack (PyStack.forward_missing)
LEAF = "its node has no forward op (a leaf's gradient, accumulated)"
BEFORE = "its node was made before the trace began, or by a thread with no Python stack"
THREADS = "several threads made autograd nodes with its node's number"
# why a borrowed stack is that thread's (PyStack.borrowed["because"])
HANDED = "handed"  # it woke the calling thread last: it handed the work over
ONLY = "only"  # the only Python thread of the process waiting in a C call
BECAUSE = {HANDED: "it woke this thread last (it handed the work over)",
           ONLY: "the only Python thread waiting in a C call"}


@dataclass(frozen=True)
class CodeInfo:
    file: str
    function: str
    firstlineno: int
    table: bytes
    layout: int
    truncated: bool  # the file or function name was cut


@dataclass
class PyStack:
    frames: list[dict]  # innermost first
    cut: bool  # deeper than the probe walks
    missing: str | None = None  # no frames: why
    # another thread's stack, lent to a thread with no Python frame:
    # {"tid": the lender's (None where not known), "because": HANDED or ONLY}
    borrowed: dict | None = None
    # a call of PyTorch's backward pass: the autograd node its thread evaluated,
    # and the stack of the forward op that made it (None: why in forward_missing)
    node: int | None = None
    forward: list[dict] | None = None
    forward_missing: str | None = None

    def fields(self) -> dict[str, Any]:
        """Its keys in a row: py_stack (and py_stack_cut, py_stack_borrowed), or
        py_stack_missing; for a backward call, py_stack_forward (and its node's
        number, autograd_node) or py_stack_forward_missing."""
        d: dict[str, Any] = {}
        if self.missing is not None:
            d["py_stack_missing"] = self.missing
        elif self.frames or self.node is None:
            d["py_stack"] = self.frames
            if self.cut:
                d["py_stack_cut"] = True
            if self.borrowed is not None:
                d["py_stack_borrowed"] = self.borrowed
        if self.node is not None:
            d["autograd_node"] = self.node
            if self.forward is not None:
                d["py_stack_forward"] = self.forward
            else:
                d["py_stack_forward_missing"] = self.forward_missing
        return d

    def borrowed_text(self) -> str | None:
        """`borrowed from tid N: why`, for the formats that say it in words."""
        if self.borrowed is None:
            return None
        tid = self.borrowed["tid"]
        who = f"tid {tid}" if tid is not None else "a thread whose tid is not known"
        return f"borrowed from {who}: {BECAUSE[self.borrowed['because']]}"


class PyStacks:
    """Side records in, each call's stack out (pop)."""

    def __init__(self, layouts: list[tuple[tuple[int, int], Layout]]) -> None:
        self.layouts = layouts  # index in py_layouts -> (version, layout)
        self._codes: dict[tuple[int, int, int], CodeInfo] = {}  # (gen, code, ident)
        self._pending: dict[int, OrderedDict[int, bytes]] = {}
        self._lines: dict[tuple[int, int, int, int], dict] = {}  # (gen, code, ident, instr)
        self.stacks = 0
        self.borrowed = 0  # calls that carry another thread's stack
        self.missing: Counter[str] = Counter()  # calls of a Python thread with no stack, by why
        # forward ops by (gen, node number): {the making thread's tid: its stack's
        # record, or once decoded its frames (None: none)}
        self._nodes: OrderedDict[tuple[int, int], dict[int, Any]] = OrderedDict()
        self._threads: dict[tuple[int, int], int] = {}  # (gen, PyTorch's thread id) -> tid
        self.forward = 0  # backward calls given their forward op's stack
        self.no_forward: Counter[str] = Counter()  # backward calls without it, by why

    def add(self, records: list[bytes]) -> None:
        for rec in records:
            kind = pr.SIDE_HEAD.unpack_from(rec)[1]
            if kind == pr.SIDE_CODE:
                self._add_code(rec)
            elif kind == pr.SIDE_STACK:
                tid, ts = pr.STACK_KEY.unpack_from(rec)
                waiting = self._pending.setdefault(tid, OrderedDict())
                waiting[ts] = rec  # unpacked when its call comes
                if len(waiting) > PENDING_PER_THREAD:
                    waiting.popitem(last=False)
            elif kind == pr.SIDE_NODE:
                self._add_node(rec)

    def _add_node(self, rec: bytes) -> None:
        """A forward op made an autograd node: its stack, kept by the node's number
        (a node's number comes from its making thread's own count)."""
        (_, _, tid, _, gen, _, _, _, _, _, seq, _) = pr.STACK_HEAD.unpack_from(rec)
        key = (gen, seq)
        made = self._nodes.get(key)
        if made is None:
            made = self._nodes[key] = {}
            if len(self._nodes) > NODES_KEPT:
                self._nodes.popitem(last=False)
        made[tid] = rec  # decoded when a backward call asks: its code records come after it

    def _add_code(self, rec: bytes) -> None:
        (_, _, _pid, gen, code, firstlineno, table_len, layout, fstate, flen, nlen, nstate,
         ident) = pr.CODE_HEAD.unpack_from(rec)
        if layout >= len(self.layouts):
            return
        version, lay = self.layouts[layout]
        extra = lay.unicode_compact_size - lay.unicode_ascii_size
        at = pr.CODE_HEAD.size
        fdata = rec[at : at + pr.STR_MAX + pr.STR_SLACK]
        at += pr.STR_MAX + pr.STR_SLACK
        ndata = rec[at : at + pr.NAME_MAX + pr.STR_SLACK]
        at += pr.NAME_MAX + pr.STR_SLACK
        table = rec[at : at + min(table_len, pr.TABLE_MAX)]
        file = pylines.unicode_text(fstate, flen, fdata, extra)
        name = pylines.unicode_text(nstate, nlen, ndata, extra)
        if file is None or name is None:
            return  # not readable: its frames make their stacks unreadable
        self._codes[(gen, code, ident)] = CodeInfo(file[0], name[0], firstlineno, table, layout,
                                                   file[1] or name[1])

    def pop(self, tid: int, ts_ns: int) -> PyStack | None:
        """The stack of the call that thread `tid` entered at `ts_ns`, once; None
        where the probe sent none (a thread with no Python frame)."""
        waiting = self._pending.get(tid)
        rec = waiting.pop(ts_ns, None) if waiting else None
        if rec is None:
            return None
        head = pr.STACK_HEAD.unpack_from(rec)
        stack = self._decode(rec, head)
        (_, _, _, _, gen, _, _, flags, _, _, seq, thread) = head
        if not flags & pr.NODE:
            return stack
        if stack is None:
            stack = PyStack([], False)
        stack.node = seq
        stack.forward, stack.forward_missing = self._forward(gen, seq, thread)
        if stack.forward is not None:
            self.forward += 1
        else:
            self.no_forward[stack.forward_missing] += 1
        return stack

    def _forward(self, gen: int, seq: int, thread: int) -> tuple[list[dict] | None, str | None]:
        """The stack of the forward op that made node `seq` (whose making thread
        PyTorch numbers `thread`), or why it is not known."""
        made = self._nodes.get((gen, seq)) if seq != NO_FORWARD_OP else None
        tid = None
        if made is not None and len(made) == 1:
            tid = next(iter(made))
            self._threads.setdefault((gen, thread), tid)  # PyTorch's thread id -> its tid
            if self._threads[(gen, thread)] != tid:
                tid = None  # another thread's node by that number: not this one
        elif made:
            tid = self._threads.get((gen, thread))
        frames = self._frames_made(made, tid) if made and tid is not None else None
        if frames is not None:
            return frames, None
        return None, LEAF if seq == NO_FORWARD_OP else THREADS if made and tid is None else BEFORE

    def _frames_made(self, made: dict[int, Any], tid: int) -> list[dict] | None:
        """The frames of the forward op that thread `tid` made a node in (its
        record decoded once, then kept decoded)."""
        rec = made.get(tid)
        if isinstance(rec, bytes):
            stack = self._decode(rec, pr.STACK_HEAD.unpack_from(rec), count=False)
            rec = made[tid] = (stack.frames or None) if stack is not None \
                and stack.missing is None else None
        return rec

    def _decode(self, rec: bytes, head: tuple, count: bool = True) -> PyStack | None:
        """A stack record's frames (None: no frame, and nothing to say), `head` its
        unpacked STACK_HEAD; `count`: a call's, counted in stacks, borrowed and
        missing."""
        (_, _, _, _, gen, _pid, n, flags, lender, _waiting, _, _) = head
        n = min(n, pr.MAX_FRAMES)
        if flags & (pr.TOO_MANY | pr.LIST_CHANGED):
            return self._missing(TOO_MANY if flags & pr.TOO_MANY else LIST_CHANGED, count)
        if flags & pr.LENDERS_MANY:
            return self._missing(LENDERS_MANY, count)
        kinds = rec[pr.KINDS_AT : pr.KINDS_AT + n]
        out = []
        for i, kind in enumerate(kinds):
            if kind == pr.SHIM:
                continue
            code, instr, ident = pr.FRAME.unpack_from(rec, pr.FRAMES_AT + i * pr.FRAME.size)
            frame = self._frame(gen, code, ident, instr) if kind == pr.CODE else None
            if frame is None:
                return self._missing(NOT_NAMED if kind == pr.CODE else NOT_CODE, count)
            out.append(frame)
        if not out:
            return None
        self.stacks += count
        borrowed = None
        if flags & (pr.HANDED | pr.ONLY):
            self.borrowed += count
            borrowed = {"tid": lender or None,
                        "because": HANDED if flags & pr.HANDED else ONLY}
        return PyStack(out, bool(flags & pr.CUT), borrowed=borrowed)

    def _missing(self, why: str, count: bool = True) -> PyStack:
        if count:
            self.missing[why] += 1
        return PyStack([], False, why)

    def _frame(self, gen: int, code: int, ident: int, instr: int) -> dict | None:
        key = (gen, code, ident, instr)
        frame = self._lines.get(key)
        if frame is not None:
            return frame
        info = self._codes.get((gen, code, ident))
        if info is None:
            return None
        version, lay = self.layouts[info.layout]
        if lay.instr_is_pointer:
            offset = (instr - lay.code_adaptive) // 2
        else:
            offset = instr
        line = pylines.line_at(version, info.table, info.firstlineno, offset) \
            if offset >= 0 else None
        frame = {"file": info.file, "line": line, "function": info.function}
        if info.truncated:
            frame["truncated"] = True
        self._lines[key] = frame
        return frame
