"""Property tests: the decoder on arbitrary bytes and arbitrary event values.

Whatever the kernel (or a bug, or a mismatched build) hands us, decoding
either works or raises ValueError, which the session counts as a decode error;
nothing else may escape into the trace loop. What it produces must be
writable as strict JSON and renderable as a table row.
"""

from __future__ import annotations

import io
import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cudaprobe.decode.calls import decode_event
from cudaprobe.decode.handles import KernelHandles
from cudaprobe.output.table import TableReporter
from cudaprobe.probe.event import (
    CFG_WORDS,
    COMM_LEN,
    EVENT_SIZE,
    EVENT_STRUCT,
    MAX_OUTS,
    MAX_SLOTS,
    RawEvent,
    unpack_event,
)

from .eventbuild import EVERY_PROBE

# bit patterns random integers seldom hit: float NaN and infinities, sign bits, extremes
SPECIAL = [0, 1, 0x7FC00000, 0x7F800000, 0xFF800000, 0x80000000, 0xFFFFFFFF, 1 << 63,
           (1 << 64) - 1, 0x7FF8000000000000]
U64 = st.one_of(st.integers(min_value=0, max_value=(1 << 64) - 1), st.sampled_from(SPECIAL))
S64 = st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1)
U32 = st.integers(min_value=0, max_value=(1 << 32) - 1)
S32 = st.integers(min_value=-(1 << 31), max_value=(1 << 31) - 1)


def decode_all_ways(raw: RawEvent) -> None:
    handles = KernelHandles()
    for in_flight in (False, True):
        try:
            call = decode_event(raw, EVERY_PROBE, 0, in_flight=in_flight, handles=handles)
        except ValueError:
            continue
        json.dumps(call.to_dict(), allow_nan=False)  # JSONL must stay strict JSON
        TableReporter(io.StringIO()).calls([call])


@given(st.binary(max_size=2 * EVENT_SIZE))
@settings(max_examples=300)
def test_unpack_arbitrary_bytes_raises_only_value_error(data):
    try:
        raw = unpack_event(data)
    except ValueError:
        assert len(data) < EVENT_SIZE
        return
    decode_all_ways(raw)


@given(st.binary(min_size=EVENT_SIZE, max_size=EVENT_SIZE))
@settings(max_examples=300)
def test_whole_events_of_random_bytes_decode_or_raise_value_error(data):
    decode_all_ways(unpack_event(data))


@st.composite
def raw_events(draw):
    """Events with an in-range probe id (the common case) and hostile values."""
    return RawEvent(
        ts_ns=draw(U64), duration_ns=draw(U64), pid=draw(U32), tid=draw(U32),
        func_id=draw(st.one_of(st.integers(0, len(EVERY_PROBE) - 1), U32)),
        ret=draw(S32),
        args=tuple(draw(st.lists(U64, min_size=MAX_SLOTS, max_size=MAX_SLOTS))),
        # none: not read (a failed call's, or one still running)
        outs=tuple(draw(st.one_of(st.just([]),
                                  st.lists(U64, min_size=MAX_OUTS, max_size=MAX_OUTS)))),
        cfg=tuple(draw(st.lists(U64, min_size=CFG_WORDS, max_size=CFG_WORDS))),
        comm=draw(st.text(max_size=COMM_LEN)),
        caller=draw(U64), stack_id=draw(S64),
        text=draw(st.binary(max_size=64)),  # a string read at exit, not UTF-8 at all
    )


@given(raw_events())
@settings(max_examples=500, suppress_health_check=[HealthCheck.too_slow])
def test_arbitrary_event_values_decode_or_raise_value_error(raw):
    decode_all_ways(raw)


def test_the_event_struct_is_what_the_fuzzers_fill():
    assert EVENT_STRUCT.size == EVENT_SIZE
    assert len(RawEvent._fields) == 13


def test_every_probe_with_each_extreme_value_in_every_word():
    """Exhaustive where random draws are thin: each catalogue symbol, every
    argument, out-parameter and config word set to each SPECIAL pattern."""
    for value in SPECIAL:
        for probe in EVERY_PROBE:
            for outs in ((value,) * MAX_OUTS, ()):
                decode_all_ways(RawEvent(1, 2, 3, 4, probe.func_id, -1, (value,) * MAX_SLOTS,
                                         outs, (value,) * CFG_WORDS, "x"))
