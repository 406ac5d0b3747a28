"""Python mirror of the side records in bpf/pystacks.h (--py-stacks).

tests/unit/test_pystacks_layout.py compiles the header and checks these
layouts against it. A side record starts with a zero word where a call
record has its entry time, and is longer than a whole event, so the ring
reader hands it over as its bytes (ringbuf.RingBuffer.consume).
"""

from __future__ import annotations

import struct

MAX_FRAMES = 32  # CP_PY_MAX_FRAMES
STR_MAX, NAME_MAX, STR_SLACK, TABLE_MAX = 256, 128, 32, 4096
LAYOUTS = 8  # CP_PY_LAYOUTS
SIDE_STACK, SIDE_CODE, SIDE_NODE = 1, 2, 3  # SIDE_NODE: an autograd node made (PyTorch)
CUT, LIST_CHANGED, TOO_MANY = 1, 2, 4  # struct cp_py_stack.flags
HANDED, ONLY, LENDERS_MANY = 8, 16, 32  # borrowed stacks: why this lender, or none
NODE = 64  # node_seq and node_thread hold an autograd node
CODE, SHIM, NOT_CODE = 0, 1, 2  # struct cp_py_stack.kinds[]
FOUND, NONE = 1, 2  # struct cp_py_proc.status

# the first two fields of either: zero, kind
SIDE_HEAD = struct.Struct("<QI")
# struct cp_py_stack: zero, kind, tid, ts_ns, gen, pid, nframes, flags, lender,
# lender_count, node_seq, node_thread, then each frame's kind (a byte), then the frames
STACK_HEAD = struct.Struct("<QIIQQIHHIIQQ")
KINDS_AT = STACK_HEAD.size
FRAMES_AT = KINDS_AT + MAX_FRAMES
FRAME = struct.Struct("<QII")  # code, instr, ident
STACK_KEY = struct.Struct("<12xIQ")  # tid, ts_ns: the key of the call it goes with
STACK_SIZE = FRAMES_AT + MAX_FRAMES * FRAME.size
# struct cp_py_code: zero, kind, pid, gen, code, firstlineno, table_len, layout,
# filename_state, filename_len, name_len, name_state, ident; then the bytes
CODE_HEAD = struct.Struct("<QIIQQiIIIQQII")
CODE_SIZE = CODE_HEAD.size + STR_MAX + STR_SLACK + NAME_MAX + STR_SLACK + TABLE_MAX
# struct cp_py_proc, cp_py_exe_key, cp_py_exe as the loader writes them
PROC = struct.Struct("<QQQII")
EXE_KEY = struct.Struct("<QQ")
EXE = struct.Struct("<QQQQQII")
AG_PROC = struct.Struct("<II")  # struct cp_ag_proc: where a Node keeps seq and thread
