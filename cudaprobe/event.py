"""Python mirror of `struct cp_event` in bpf/cudaprobe.h.

tests/unit/test_event_layout.py compiles the header with the C compiler and
checks that this layout (size and every offset) matches it.
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

EVENT_FORMAT = f"<QQIIIi{MAX_SLOTS}Q{MAX_OUTS}Q{CFG_WORDS}Q{COMM_LEN}sQq"
EVENT_STRUCT = struct.Struct(EVENT_FORMAT)
EVENT_SIZE = EVENT_STRUCT.size

# field name -> byte offset, in declaration order (checked against the C header)
FIELD_OFFSETS = {
    "ts_ns": 0,
    "duration_ns": 8,
    "pid": 16,
    "tid": 20,
    "func_id": 24,
    "ret": 28,
    "args": 32,
    "outs": 32 + 8 * MAX_SLOTS,
    "cfg": 32 + 8 * (MAX_SLOTS + MAX_OUTS),
    "comm": 32 + 8 * (MAX_SLOTS + MAX_OUTS + CFG_WORDS),
    "caller": 32 + 8 * (MAX_SLOTS + MAX_OUTS + CFG_WORDS) + COMM_LEN,
    "stack_id": 40 + 8 * (MAX_SLOTS + MAX_OUTS + CFG_WORDS) + COMM_LEN,
}


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
    caller: int = 0  # return address at entry: the call site
    stack_id: int = -1  # user stack id in the `stacks` map, or -1


def unpack_event(data: bytes) -> RawEvent:
    """Unpack one event; raises ValueError when `data` is not one whole event."""
    if len(data) < EVENT_SIZE:
        raise ValueError(f"event is {len(data)} bytes, expected {EVENT_SIZE}")
    return from_values(EVENT_STRUCT.unpack_from(data))


# a ring buffer record: the kernel's 8-byte header (length, page offset), then the event
RECORD_STRUCT = struct.Struct("<II" + EVENT_FORMAT[1:])


def from_values(v: tuple) -> RawEvent:
    """A RawEvent from the flat values of EVENT_STRUCT (or RECORD_STRUCT minus 2)."""
    a, o = 6, 6 + MAX_SLOTS
    c = o + MAX_OUTS
    comm = v[-3].split(b"\0", 1)[0].decode("utf-8", "replace")
    return RawEvent(*v[:6], v[a:o], v[o:c], v[c : c + CFG_WORDS], comm, v[-2], v[-1])


def from_record(rec: tuple) -> RawEvent:
    return from_values(rec[2:])
