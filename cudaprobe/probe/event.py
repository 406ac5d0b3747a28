"""Python mirror of `struct cp_event` in bpf/cudaprobe.h.

tests/unit/test_event_layout.py compiles the header with the C compiler and
checks that this layout (size and every offset) matches it.

Two views of an event: `RawEvent`, a named tuple (read from the in-flight
map; tests/unit/eventbuild.py builds them, and packs them into bytes), and the
flat *record* tuple the ring buffer reader unpacks (`RECORD_STRUCTS`, one per
length), which the trace hot path decodes without building a RawEvent
(cudaprobe/decode/records.py: RecordDecoder).
"""

from __future__ import annotations

import codecs
import struct
from typing import Any, NamedTuple

MAX_SLOTS = 12
MAX_OUTS = 4
CFG_WORDS = 16  # copied at entry: a launch config struct (40 bytes), or a C string
COMM_LEN = 16

# counter indices (CP_LOST_RINGBUF, CP_LOST_PAIRING, CP_WAKEUPS, CP_LOST_DEPTH)
LOST_RINGBUF = 0
LOST_PAIRING = 1
WAKEUPS = 2
LOST_DEPTH = 3
NR_COUNTERS = 4
MAX_DEPTH = 32  # CP_MAX_DEPTH: calls nested in a call of the same function, paired

# map `phase` (CP_ATTACHING ...): calls begin only while TRACING (bpf/cudaprobe.h)
ATTACHING, TRACING, STOPPING, STOPPED = range(4)
# map `targets` (CP_TARGET_*): a process traced, or one whose links are being attached
TARGET_TRACED, TARGET_LINKING = 1, 2

# struct cp_event, in declaration order. `words` holds a probe's argument words
# then its out-parameters (nargs and nouts in the header); ring buffer records
# carry only those (record_size), or the whole event with `cfg` for probes that
# copy a launch config or a string at entry. The out-parameters are read only
# when the call returned 0: a failed call's record has nouts 0 and no out words
# (a whole event keeps the words, unread).
MAX_WORDS = MAX_SLOTS + MAX_OUTS
_HEAD_FORMAT = f"QQIIHBBi{COMM_LEN}sQq"
HEAD_SIZE = struct.calcsize(f"<{_HEAD_FORMAT}")  # CP_EVENT_HEAD
EVENT_FORMAT = f"<{_HEAD_FORMAT}{MAX_WORDS + CFG_WORDS}Q"
EVENT_STRUCT = struct.Struct(EVENT_FORMAT)
EVENT_SIZE = EVENT_STRUCT.size

# field name -> byte offset, in declaration order (checked against the C header)
FIELD_OFFSETS = {
    "ts_ns": 0,
    "duration_ns": 8,
    "pid": 16,
    "tid": 20,
    "func_id": 24,
    "nargs": 26,
    "nouts": 27,
    "ret": 28,
    "comm": 32,
    "caller": 32 + COMM_LEN,
    "stack_id": 40 + COMM_LEN,
    "words": 48 + COMM_LEN,
    "cfg": 48 + COMM_LEN + 8 * MAX_WORDS,
}


def record_size(fn: Any) -> int:
    """Bytes of struct cp_event that a catalogue.Function's calls put in the ring
    (cp_probe_cfg.size): all of it where something is copied at entry. A failed
    call's record is 8 bytes shorter per out-parameter, except a whole one."""
    if fn.config_slot >= 0 or fn.string_slot >= 0:
        return EVENT_SIZE
    return HEAD_SIZE + 8 * (fn.words + len(fn.out_index))


# A ring buffer record: the kernel's 8-byte header (length, page offset), skipped,
# then the event's first HEAD_SIZE + 8 * n bytes, n = 0 .. MAX_WORDS + CFG_WORDS.
# Indices into the unpacked tuple (the same for EVENT_STRUCT's):
RECORD_STRUCTS = [struct.Struct(f"<8x{_HEAD_FORMAT}{n}Q") for n in range(MAX_WORDS + CFG_WORDS + 1)]
(R_TS, R_DURATION, R_PID, R_TID, R_FUNC_ID, R_NARGS, R_NOUTS, R_RET, R_COMM, R_CALLER,
 R_STACK_ID) = range(11)
R_WORDS = 11
R_CFG = R_WORDS + MAX_WORDS  # present in whole records only
# A record longer than the whole event is one followed by a string read at exit
# (a kernel name, CP_NAME_MAX bytes at most with its NUL): the ring reader
# appends those bytes to the event's tuple.
R_TEXT = R_CFG + CFG_WORDS
NAME_MAX = 8192  # CP_NAME_MAX
# a record's number fields by their index in its tuple: (struct code, byte offset in
# the ring record, after the kernel's 8-byte header), for ringbuf.Strided's columns
RECORD_FIELDS = {
    R_TS: ("Q", 8 + FIELD_OFFSETS["ts_ns"]),
    R_DURATION: ("Q", 8 + FIELD_OFFSETS["duration_ns"]),
    R_PID: ("I", 8 + FIELD_OFFSETS["pid"]),
    R_TID: ("I", 8 + FIELD_OFFSETS["tid"]),
    R_FUNC_ID: ("H", 8 + FIELD_OFFSETS["func_id"]),
    R_RET: ("i", 8 + FIELD_OFFSETS["ret"]),
    R_CALLER: ("Q", 8 + FIELD_OFFSETS["caller"]),
    **{R_WORDS + k: ("Q", 8 + FIELD_OFFSETS["words"] + 8 * k)
       for k in range(MAX_WORDS + CFG_WORDS)},
}
# cfg words holding struct cp_frame (a call site, resolved to build-id and offset)
FRAME_WORD = 8
FRAME_STRUCT = struct.Struct("<i20sQQ")  # status, build_id, offset, caller
FRAME_VALID = 1  # BPF_STACK_BUILD_ID_VALID: build_id and offset are set
PAGE_SIZE = 4096  # x86-64: mappings start at page-aligned file offsets


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
    # return address at entry: the call site (cudaprobe memory); in trace (CP_OUTER),
    # 1 for a call made inside an NCCL call of its thread
    caller: int = 0
    stack_id: int = -1  # user stack id in the `stacks` map, or -1
    text: bytes = b""  # a string read at exit, whole (R_TEXT), NUL-terminated


NO_CFG = (0,) * CFG_WORDS


class CallTally(NamedTuple):
    """struct cp_tally of one probe, summed over CPUs (MapReader.read_tally)."""

    calls: int
    total_ns: int
    errors: dict[int, int]  # return code -> failed calls
    errors_unkeyed: int = 0  # failed calls whose code could not be kept (map full)


TASK_COMM_LEN = 16  # the kernel's comm: 15 bytes and a NUL


def comm_text(comm: bytes) -> str:
    """The kernel's comm as text: UTF-8, each byte that is not shown as `\\xNN`
    (valid text everywhere: JSON, CSV, Prometheus labels, OTLP strings; never a
    lossy U+FFFD). The kernel cuts a long name at 15 bytes, inside a character
    as often as not: a last character left incomplete by that cut is dropped,
    not shown as a byte the process never named."""
    raw = comm.split(b"\0", 1)[0]
    if len(raw) < TASK_COMM_LEN - 1:
        return raw.decode("utf-8", "backslashreplace")
    # final=False: the decoder holds back an incomplete last character
    return codecs.getincrementaldecoder("utf-8")("backslashreplace").decode(raw, final=False)


def unpack_event(data: bytes) -> RawEvent:
    """Unpack one whole event; raises ValueError when `data` is not one."""
    if len(data) < EVENT_SIZE:
        raise ValueError(f"event is {len(data)} bytes, expected {EVENT_SIZE}")
    return from_record(EVENT_STRUCT.unpack_from(data))


def _padded(words: tuple, n: int) -> tuple:
    return words + (0,) * (n - len(words)) if len(words) < n else words


def from_record(rec: tuple) -> RawEvent:
    """A RawEvent from a record tuple (RECORD_STRUCTS, or EVENT_STRUCT's values):
    the words it has, the rest zero; `outs` empty where the kernel read none
    (nouts 0: the call failed, and CUDA does not say what it leaves there)."""
    nargs = min(rec[R_NARGS], MAX_SLOTS)
    nouts = min(rec[R_NOUTS], MAX_OUTS)
    args = _padded(rec[R_WORDS : R_WORDS + nargs], MAX_SLOTS)
    outs = _padded(rec[R_WORDS + nargs : R_WORDS + nargs + nouts], MAX_OUTS) if nouts else ()
    cfg = rec[R_CFG : R_CFG + CFG_WORDS] if len(rec) > R_CFG else NO_CFG
    return RawEvent(rec[R_TS], rec[R_DURATION], rec[R_PID], rec[R_TID], rec[R_FUNC_ID],
                    rec[R_RET], args, outs, cfg, comm_text(rec[R_COMM]), rec[R_CALLER],
                    rec[R_STACK_ID], rec[R_TEXT] if len(rec) > R_TEXT else b"")


def site_frame(cfg: tuple[int, ...]) -> tuple[str, int, int] | None:
    """(build-id in hex, file offset, address) of a call site, as the probe
    recorded it (struct cp_frame) at the first launch of a kernel in a process,
    or with CP_CALLER the first call from a call site; None where it did not."""
    data = b"".join(w.to_bytes(8, "little") for w in cfg[FRAME_WORD : FRAME_WORD + 5])
    status, build_id, offset, caller = FRAME_STRUCT.unpack(data)
    # The walk starts with the return address only where the kernel sees the
    # probe at a function's entry (Linux >= 6.12, a function that begins with
    # push %rbp); else its first frame is a caller further up. A file offset and
    # the address it is mapped at agree modulo the page size: a frame that does
    # not is not the return address (1 in 4096 would pass by chance).
    if status != FRAME_VALID or not caller or (offset - caller) % PAGE_SIZE:
        return None
    return build_id.hex(), offset, caller
