"""Python mirror of `struct cp_event` in bpf/cudaprobe.h.

tests/unit/test_event_layout.py compiles the header with the C compiler and
checks that this layout (size and every offset) matches it.

Two views of an event: `RawEvent`, a named tuple (read from the in-flight
map, built by tests), and the flat *record* tuple the ring buffer reader
unpacks (`RECORD_STRUCT`, `SHORT_RECORD_STRUCT`), which the trace hot path
decodes without building a RawEvent (decoders.py: RecordDecoder).
"""

from __future__ import annotations

import struct
from typing import NamedTuple

MAX_SLOTS = 12
MAX_OUTS = 4
CFG_WORDS = 16  # copied at entry: a launch config struct (40 bytes), or a C string
COMM_LEN = 16

# counter indices (CP_LOST_RINGBUF, CP_LOST_PAIRING, CP_WAKEUPS)
LOST_RINGBUF = 0
LOST_PAIRING = 1
WAKEUPS = 2
NR_COUNTERS = 3

# struct cp_event, in declaration order; `cfg` is last so that events of probes
# which copy nothing at entry can end before it (CP_EVENT_SHORT)
_HEAD_FORMAT = f"QQIIIi{COMM_LEN}sQq{MAX_SLOTS}Q{MAX_OUTS}Q"
EVENT_FORMAT = f"<{_HEAD_FORMAT}{CFG_WORDS}Q"
EVENT_STRUCT = struct.Struct(EVENT_FORMAT)
EVENT_SIZE = EVENT_STRUCT.size
SHORT_EVENT_SIZE = struct.calcsize(f"<{_HEAD_FORMAT}")  # CP_EVENT_SHORT

# field name -> byte offset, in declaration order (checked against the C header)
FIELD_OFFSETS = {
    "ts_ns": 0,
    "duration_ns": 8,
    "pid": 16,
    "tid": 20,
    "func_id": 24,
    "ret": 28,
    "comm": 32,
    "caller": 32 + COMM_LEN,
    "stack_id": 40 + COMM_LEN,
    "args": 48 + COMM_LEN,
    "outs": 48 + COMM_LEN + 8 * MAX_SLOTS,
    "cfg": 48 + COMM_LEN + 8 * (MAX_SLOTS + MAX_OUTS),
}

# A ring buffer record: the kernel's 8-byte header (length, page offset), skipped,
# then the event, whole or short. Indices into the unpacked tuple:
RECORD_STRUCT = struct.Struct(f"<8x{_HEAD_FORMAT}{CFG_WORDS}Q")
SHORT_RECORD_STRUCT = struct.Struct(f"<8x{_HEAD_FORMAT}")
R_TS, R_DURATION, R_PID, R_TID, R_FUNC_ID, R_RET, R_COMM, R_CALLER, R_STACK_ID = range(9)
R_ARGS = 9
R_OUTS = R_ARGS + MAX_SLOTS
R_CFG = R_OUTS + MAX_OUTS  # absent from short records


class RawEvent(NamedTuple):
    ts_ns: int
    duration_ns: int
    pid: int
    tid: int
    func_id: int
    ret: int
    args: tuple[int, ...]
    outs: tuple[int, ...]
    cfg: tuple[int, ...]
    comm: str
    caller: int = 0  # return address at entry: the call site (cudaprobe memory)
    stack_id: int = -1  # user stack id in the `stacks` map, or -1


NO_CFG = (0,) * CFG_WORDS


def comm_text(comm: bytes) -> str:
    return comm.split(b"\0", 1)[0].decode("utf-8", "replace")


def unpack_event(data: bytes) -> RawEvent:
    """Unpack one whole event; raises ValueError when `data` is not one."""
    if len(data) < EVENT_SIZE:
        raise ValueError(f"event is {len(data)} bytes, expected {EVENT_SIZE}")
    return from_record(EVENT_STRUCT.unpack_from(data))


def pack_event(raw: RawEvent) -> bytes:
    """The bytes of struct cp_event for `raw` (tests, and the fuzzers)."""
    return EVENT_STRUCT.pack(raw.ts_ns, raw.duration_ns, raw.pid, raw.tid, raw.func_id, raw.ret,
                             raw.comm.encode() if isinstance(raw.comm, str) else raw.comm,
                             raw.caller, raw.stack_id, *raw.args, *raw.outs, *raw.cfg)


def from_values(v: tuple) -> RawEvent:
    """A RawEvent from its fields flattened in RawEvent order: ts, duration, pid,
    tid, func_id, ret, MAX_SLOTS args, MAX_OUTS outs, CFG_WORDS cfg, comm (bytes),
    caller, stack_id."""
    a, o = 6, 6 + MAX_SLOTS
    c = o + MAX_OUTS
    return RawEvent(*v[:6], v[a:o], v[o:c], v[c : c + CFG_WORDS], comm_text(v[-3]), v[-2],
                    v[-1])


def from_record(rec: tuple) -> RawEvent:
    """A RawEvent from a record tuple (RECORD_STRUCT or SHORT_RECORD_STRUCT, or
    EVENT_STRUCT's values)."""
    cfg = rec[R_CFG : R_CFG + CFG_WORDS] if len(rec) > R_CFG else NO_CFG
    return RawEvent(*rec[:6], rec[R_ARGS:R_OUTS], rec[R_OUTS:R_CFG], cfg, comm_text(rec[R_COMM]),
                    rec[R_CALLER], rec[R_STACK_ID])
