"""Events as the BPF program writes them, built by the tests.

`pack_event` is the inverse of cudaprobe.probe.event.unpack_event; `make_event`
builds a RawEvent from the words a test chooses and passes it through those
bytes, so that decoding starts where it does in a trace.
"""

from __future__ import annotations

from cudaprobe.catalogue import functions as catalogue
from cudaprobe.probe.event import (
    CFG_WORDS,
    EVENT_STRUCT,
    MAX_OUTS,
    MAX_SLOTS,
    RawEvent,
    unpack_event,
)
from cudaprobe.probe.plan import Probe


def padded(words: tuple[int, ...] | list[int], n: int) -> tuple[int, ...]:
    """`words` then zeros, n in all."""
    assert len(words) <= n, (words, n)
    return tuple(words) + (0,) * (n - len(words))


def pack_event(raw: RawEvent) -> bytes:
    """The bytes of struct cp_event for `raw`: all MAX_SLOTS argument words, then
    all MAX_OUTS out-parameters, zero-padded; nouts says none were read where
    `raw.outs` is empty (a failed call)."""
    comm = raw.comm.encode() if isinstance(raw.comm, str) else raw.comm
    return EVENT_STRUCT.pack(raw.ts_ns, raw.duration_ns, raw.pid, raw.tid, raw.func_id,
                             MAX_SLOTS, MAX_OUTS if raw.outs else 0, raw.ret, comm,
                             raw.caller, raw.stack_id, *padded(raw.args, MAX_SLOTS),
                             *padded(raw.outs, MAX_OUTS), *padded(raw.cfg, CFG_WORDS))


def make_event(args=(), outs=(), cfg=(), *, ret: int = 0, ts_ns: int = 2_000_000,
               duration_ns: int = 1500, pid: int = 42, tid: int = 43, func_id: int = 0,
               comm: str = "app") -> RawEvent:
    """A call's event, words zero-padded, as unpacked from its bytes. As the kernel
    does, the out-parameters are read only when the call returned 0 (`ret`): a
    failed call's `outs` are dropped, whatever the test put there."""
    raw = RawEvent(ts_ns, duration_ns, pid, tid, func_id, ret, padded(args, MAX_SLOTS),
                   padded(outs, MAX_OUTS) if ret == 0 else (), padded(cfg, CFG_WORDS), comm)
    return unpack_event(pack_event(raw))


# the probes of a trace of every symbol in the catalogue, variants included
EVERY_PROBE = [Probe(i, s, fn) for i, (s, fn) in
               enumerate((s, fn) for fn in catalogue.FUNCTIONS for s in fn.symbols)]


def probes_for(symbol: str) -> list[Probe]:
    """The probe list of a trace that probes only `symbol` (its func_id is 0)."""
    fn = next(f for f in catalogue.FUNCTIONS if symbol in f.symbols)
    return [Probe(0, symbol, fn)]
