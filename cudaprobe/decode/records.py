"""The trace hot path: ring buffer records -> rows, in one loop.

calls.decode_event takes a RawEvent and walks the function's argument kinds
for every event (~10 µs each in CPython). Here each probe gets a
ProbeDecoder at plan time: its constant fields (symbol, api, category), a
cache of return-code names, and per argument the record word it reads and
how that word decodes (ArgField). `RecordDecoder.decode` is the one loop
over a batch of records: for each record it calls its probe's *row maker*,
made once per probe by the RowFormat asking (a reporter: a JSONL line, a CSV
row; or RecordDecoder itself: a Call). Calls are made with only the cheap
fields; `args` and `details` are decoded when a reporter first asks (the
table wants only details, the summary neither).

Probes whose decoding has side effects or needs the process (kernel names
of launches, handles a call makes, strings and launch configs copied at
entry) are decoded whole by calls.decode_event, in arrival order: their
names must be looked up before a later event changes them. A RowFormat
turns those Calls into its rows (`row_of_call`).
"""

from __future__ import annotations

from collections import Counter
from itertools import repeat
from json.encoder import encode_basestring_ascii as encode_basestring
from operator import itemgetter
from typing import Any, Callable, Protocol

from cudaprobe.catalogue.enums import error_name
from cudaprobe.catalogue.functions import NCCL, OUT_KINDS, ArgKind
from cudaprobe.catalogue.model import NOT_CAPTURED_SLOT
from cudaprobe.decode.calls import (
    CONFIG_DECODERS,
    NOT_READ,
    WORD_DECODERS,
    Call,
    Symbolizer,
    _dim3_text,
    _dim3_value,
    _hex,
    config_text,
    decode_event,
    launch_name,
)
from cudaprobe.decode.demangle import demangle, shorten
from cudaprobe.decode.handles import NAME_KEY, UNKNOWN_WHY, KernelHandles
from cudaprobe.decode.ranks import NO_RANK, Ranks
from cudaprobe.decode.schema import time_ms
from cudaprobe.probe.event import (
    CFG_WORDS,
    NO_CFG,
    R_CFG,
    R_COMM,
    R_DURATION,
    R_FUNC_ID,
    R_NOUTS,
    R_PID,
    R_RET,
    R_TEXT,
    R_TID,
    R_TS,
    R_WORDS,
    comm_text,
    from_record,
)
from cudaprobe.probe.plan import Probe

TOP = (0, None)  # the (depth, parent) of a call made at the top of its thread
# what a row maker makes of one record: a Call, a JSONL line, a CSV row ...
RowMaker = Callable[[tuple], Any]


class RowFormat(Protocol):
    """What RecordDecoder.decode makes rows for (output.base.Reporter, or the
    RecordDecoder itself for Calls)."""

    def row_maker(self, probe: ProbeDecoder, t0_ns: int, ranks: Ranks) -> RowMaker:
        """The row of one of `probe`'s records (probe.simple: its words decode
        alone), called as make(rec) or make(rec, depth, parent); with the
        process's rank where `ranks` knows it."""

    def row_of_call(self, call: Call) -> Any:
        """The row of a call decoded whole (not probe.simple); its depth and
        parent set."""

    def with_py_stack(self, row: Any, stack: Any) -> Any:
        """The row with its call's Python stack (decode.pystacks.PyStack)."""


class Summary(Protocol):
    """What RecordDecoder.count adds to: analysis.summary.Summary (not imported:
    decode comes before analysis on the data path)."""

    def add_counts(self, event: str, calls: int, total_ns: int, errors: Counter[str]) -> None: ...


_FUNC_RET, _FUNC, _DURATION = (itemgetter(R_FUNC_ID, R_RET), itemgetter(R_FUNC_ID),
                               itemgetter(R_DURATION))

# kinds a ProbeDecoder decodes from the record's words alone; the others take
# decode_event's path (see the module docstring)
SIMPLE_KINDS = set(WORD_DECODERS) - {ArgKind.FUNC, ArgKind.CU_FUNCTION, ArgKind.OUT_FUNCTION}
SIMPLE_KINDS |= {ArgKind.DIM3, ArgKind.DIM}  # DIM: a driver launch's gridDimX, Y and Z
# a launch config struct (cudaLaunchKernelExC, cuLaunchKernelEx), copied at entry
# into the record's cfg words
SIMPLE_KINDS |= set(CONFIG_DECODERS)
# ... and those whose kernel name LaunchNames gives (FUNC: a launch's host stub;
# CU_FUNCTION: a driver launch's handle, by the handles the trace learnt)
NAMED_KINDS = SIMPLE_KINDS | {ArgKind.FUNC, ArgKind.CU_FUNCTION}
DIM_MASK = 0xFFFFFFFF  # a DIM word is an unsigned int


class LaunchNames:
    """A launch's kernel name from its record, as decode_args finds it
    (calls.launch_name), remembered by (pid, address) once found: a trace
    launches the same few hundred kernels in every row. A record holding the
    name the probe read (its text) tells the handles, as decode_args does."""

    def __init__(self, symbolize: Symbolizer | None, handles: KernelHandles | None) -> None:
        self.symbolize, self.handles = symbolize, handles
        self._known: dict[tuple[int, int], str] = {}
        self._texts: dict[str, tuple[str, str]] = {}
        self._handle_texts: dict[str, tuple[str, str]] = {}

    def texts(self, rec: tuple, address: int) -> tuple[str, str] | None:
        """The name as a JSONL line adds it after the address (`,"func_name":"..."`)
        and as DETAILS does (` ` and its short form); None where it has none."""
        name = self(rec, address)
        if name is None:
            return None
        texts = self._texts.get(name)
        if texts is None:
            texts = self._texts[name] = (f',"{NAME_KEY}":' + encode_basestring(name),
                                         " " + shorten(name))
        return texts

    def handle_texts(self, rec: tuple, handle: int) -> tuple[str, str] | None:
        """A driver launch's kernel, by its CU_FUNCTION handle, as decode_args
        names it: (the JSONL text after the handle, DETAILS' text after it);
        None where the handle is NULL. A record holding a name tells the handles."""
        handles = self.handles
        if handles is None:
            return None
        pid = rec[R_PID]
        if len(rec) > R_TEXT and rec[R_TEXT]:
            handles.seen_in_record(pid, handle, rec[R_TEXT])
        name = handles.name(pid, handle)
        if not name:
            return ("", f" ({UNKNOWN_WHY})") if handle else None
        texts = self._handle_texts.get(name)
        if texts is None:
            whole = demangle(name)
            texts = self._handle_texts[name] = (f',"{NAME_KEY}":' + encode_basestring(whole),
                                                " " + shorten(whole))
        return texts

    def handle_name(self, pid: int, handle: int) -> str | None:
        """The handle's name now (what a text made from it depends on)."""
        return self.handles.name(pid, handle) if self.handles is not None else None

    def known(self, pid: int, address: int) -> bool:
        """Whether the name at `address` in `pid` is found for good."""
        return (pid, address) in self._known

    def __call__(self, rec: tuple, address: int) -> str | None:
        pid = rec[R_PID]
        if self.handles is not None and len(rec) > R_TEXT and rec[R_TEXT]:
            self.handles.seen_in_record(pid, address, rec[R_TEXT])
        name = self._known.get((pid, address))
        if name is None:
            name = launch_name(pid, address, record_cfg(rec), self.symbolize, self.handles)
            if name:
                self._known[(pid, address)] = name
        return name


def record_cfg(rec: tuple) -> tuple[int, ...]:
    """The record's cfg words, as from_record reads them (none in a short record)."""
    return rec[R_CFG:R_CFG + CFG_WORDS] if len(rec) > R_CFG else NO_CFG


def _dims_whole(fn: Any) -> bool:
    """A function's DIM arguments come as whole X, Y, Z runs (gridDimX, gridDimY,
    gridDimZ), as decode_args groups them."""
    names = [a.name for a in fn.args if a.kind is ArgKind.DIM]
    return all(names[i:i + 3] == [names[i][:-1] + axis for axis in "XYZ"]
               for i in range(0, len(names), 3)) and len(names) % 3 == 0


class ArgField:
    """One argument of a probe: where its word is in the record, how it decodes."""

    __slots__ = ("name", "kind", "index", "decode", "text_key")

    def __init__(self, name: str, kind: ArgKind, index: int) -> None:
        self.name = name
        self.kind = kind
        self.index = index
        if kind is ArgKind.DIM3:
            self.decode = lambda rec: _dim3_value(rec[index], rec[index + 1])
        elif kind is ArgKind.DIM or kind in CONFIG_DECODERS:  # decoded by args_details
            self.decode = None
        elif kind in OUT_KINDS:
            word = WORD_DECODERS[kind]
            # nouts 0: not read (and not in a short record at all)
            self.decode = lambda rec: word(rec[index]) if rec[R_NOUTS] else NOT_READ
        else:
            word = WORD_DECODERS[kind]
            self.decode = lambda rec: word(rec[index])
        self.text_key = name + "="


class ProbeDecoder:
    """What one probe's records decode to, built from its catalogue entry."""

    def __init__(self, probe: Probe, names: LaunchNames | None = None) -> None:
        fn = probe.function
        self.probe = probe
        self.event, self.api, self.category = probe.symbol, fn.api, fn.category
        # NCCL calls learn and name communicators (decode/nccl.py): decoded whole;
        # a launch by host stub too, where no LaunchNames names its kernel
        kinds = NAMED_KINDS if names is not None else SIMPLE_KINDS
        self.simple = (fn.api != NCCL and all(arg.kind in kinds for arg in fn.args)
                       and NOT_CAPTURED_SLOT not in fn.slots and _dims_whole(fn))
        # the kernel name of a FUNC or CU_FUNCTION argument, where the probe has one
        self.names = names if any(a.kind in (ArgKind.FUNC, ArgKind.CU_FUNCTION)
                                  for a in fn.args) else None
        self.fields: list[ArgField] = []
        if self.simple:
            for arg, slot in zip(fn.args, fn.slots):
                # the record's words: the arguments, then the out-parameters
                index = (R_WORDS + fn.words + fn.out_index[arg.name] if arg.kind in OUT_KINDS
                         else R_WORDS + slot)
                self.fields.append(ArgField(arg.name, arg.kind, index))
        self.ret_names: dict[int, str] = {}  # return code -> name, as met

    def ret_name(self, ret: int) -> str:
        """The status's name; "" for a function that returns none (the probe
        reads its return as 0: bpfprog's CP_NO_STATUS)."""
        name = self.ret_names.get(ret)
        if name is None:
            name = self.ret_names[ret] = "" if self.probe.function.returns else error_name(
                self.api, ret)
        return name

    def args_details(self, rec: tuple) -> tuple[dict[str, Any], str]:
        args: dict[str, Any] = {}
        parts = []
        for f in self.fields:
            if f.kind is ArgKind.DIM:  # gridDimX, Y, Z -> gridDim: [x, y, z]
                stem, axis = f.name[:-1], "XYZ".index(f.name[-1])
                dims = args.setdefault(stem, [0, 0, 0])
                dims[axis] = rec[f.index] & DIM_MASK
                if axis == 2:
                    parts.append(f"{stem}={_dim3_text(dims)}")
                continue
            if f.kind in CONFIG_DECODERS:  # its address, then the struct's fields
                args[f.name] = _hex(rec[f.index])
                cfg = CONFIG_DECODERS[f.kind](record_cfg(rec))
                args.update(cfg)
                parts.append(config_text(cfg))
                continue
            value, text = f.decode(rec)
            args[f.name] = value
            if f.kind is ArgKind.FUNC and (name := self.names(rec, rec[f.index])):
                args[NAME_KEY] = name  # whole in JSONL; shortened in DETAILS
                text = f"{text} {shorten(name)}"
            elif f.kind is ArgKind.CU_FUNCTION and self.names is not None:
                handle = rec[f.index]
                texts = self.names.handle_texts(rec, handle)
                name = self.names.handle_name(rec[R_PID], handle)
                if name:
                    args[NAME_KEY] = demangle(name)
                if texts:
                    text += texts[1]
            parts.append(f.text_key + text)
        return args, " ".join(parts)


class RecordDecoder:
    """Decodes batches of ring buffer records (event.R_* tuples) into rows."""

    def __init__(self, probes: list[Probe], t0_ns: int, symbolize: Symbolizer | None = None,
                 handles: KernelHandles | None = None,
                 see_process: Callable[[int], None] | None = None) -> None:
        self.probes = probes
        # made at each probe's first record: -e all has ~900 probes, a few of them used
        self._decoders: list[ProbeDecoder | None] = [None] * len(probes)
        self.t0_ns = t0_ns
        self.symbolize = symbolize
        self.handles = handles
        self.see_process = see_process
        # each process's rank in its job, for every row (decode/ranks.py)
        self.ranks = handles.ranks if handles is not None else Ranks()
        self._seen: set[int] = set()
        self._comms: dict[bytes, str] = {}  # the kernel's comm -> its text
        # RowFormat -> its row maker per probe id, made at the probe's first record
        self._makers: dict[int, tuple[RowFormat, list[RowMaker | None]]] = {}
        self.errors = 0  # records that could not be decoded (unknown probe id)
        self.py_stacks: Any = None  # --py-stacks: decode.pystacks.PyStacks, joined by decode()
        self.names = LaunchNames(symbolize, handles)  # launches' kernels, by their records

    def decoder(self, fid: int) -> ProbeDecoder:
        d = self._decoders[fid]
        if d is None:
            d = self._decoders[fid] = ProbeDecoder(self.probes[fid], self.names)
        return d

    def decode(self, records: list[tuple], rows: RowFormat,
               nesting: list[tuple[int, int | None]] | None = None) -> list:
        """The rows of a batch of records, in order; records of an unknown probe
        are counted in `errors`, not made into rows. `nesting`: each record's
        (depth, parent), as nesting.CallOrder gives them (else depth 0)."""
        makers = self._makers_of(rows)
        out: list = []
        append = out.append
        nmakers, seen, errors, py = len(makers), self._seen, self.errors, self.py_stacks
        for rec, (depth, parent) in zip(records, repeat(TOP) if nesting is None else nesting):
            pid = rec[R_PID]
            if pid not in seen:
                self._see(pid)
            fid = rec[R_FUNC_ID]
            if fid >= nmakers:  # (unsigned)
                self.errors += 1
                continue
            make = makers[fid]
            if make is None:
                make = makers[fid] = self._maker(self.decoder(fid), rows)
            if py is None:
                append(make(rec, depth, parent))
            else:  # --py-stacks: the call's stack, where its thread ran Python
                row, stack = make(rec, depth, parent), py.pop(rec[R_TID], rec[R_TS])
                append(row if stack is None or row is None else rows.with_py_stack(row, stack))
        if self.errors != errors:  # a record decoded whole failed (None), or unknown ids
            out = [row for row in out if row is not None]
        return out

    def _makers_of(self, rows: RowFormat) -> list[RowMaker | None]:
        """The format's row maker per probe id (None: not made yet)."""
        entry = self._makers.get(id(rows))
        if entry is None:
            entry = self._makers[id(rows)] = (rows, [None] * len(self._decoders))
        return entry[1]

    def maker(self, fid: int, rows: RowFormat) -> RowMaker:
        """The probe's row maker for `rows`, made now if it was not."""
        makers = self._makers_of(rows)
        if makers[fid] is None:
            makers[fid] = self._maker(self.decoder(fid), rows)
        return makers[fid]

    @property
    def seen(self) -> set[int]:
        """The processes whose first record was decoded."""
        return self._seen

    def see(self, pid: int) -> None:
        """A process's first record: its rank, its maps read (see_process)."""
        if pid not in self._seen:
            self._see(pid)

    def _maker(self, d: ProbeDecoder, rows: RowFormat) -> RowMaker:
        if d.simple:
            return rows.row_maker(d, self.t0_ns, self.ranks)
        row_of_call = rows.row_of_call

        def whole(rec: tuple, depth: int = 0, parent: int | None = None) -> Any:
            try:
                call = decode_event(from_record(rec), self.probes, self.t0_ns, self.symbolize,
                                    handles=self.handles)
            except ValueError:
                self.errors += 1
                return None
            call.depth, call.parent = depth, parent
            return row_of_call(call)
        return whole

    def _see(self, pid: int) -> None:
        self._seen.add(pid)
        self.ranks.see(pid)
        if self.see_process is not None:
            self.see_process(pid)  # a process's first event: read its maps now

    def comm(self, raw: bytes) -> str:
        """The kernel's comm as text (cached)."""
        text = self._comms.get(raw)
        if text is None:
            text = self._comms[raw] = comm_text(raw)
        return text

    def calls(self, records: list[tuple],
              nesting: list[tuple[int, int | None]] | None = None) -> list[Call]:
        return self.decode(records, self, nesting)

    # RowFormat, for calls(): a Call per record, args and details decoded lazily
    def row_maker(self, probe: ProbeDecoder, t0_ns: int, ranks: Ranks) -> RowMaker:
        d, comms, comm, known = probe, self._comms, self.comm, ranks.known
        event, api, category, ret_names, ret_name = (d.event, d.api, d.category, d.ret_names,
                                                     d.ret_name)

        def make(rec: tuple, depth: int = 0, parent: int | None = None) -> Call:
            ret, ts, pid = rec[R_RET], rec[R_TS], rec[R_PID]
            call = Call(time_ms(ts, t0_ns), ts, pid, rec[R_TID],
                        comms.get(rec[R_COMM]) or comm(rec[R_COMM]), event, api, category,
                        rec[R_DURATION], ret, ret_names.get(ret) or ret_name(ret), None, None,
                        (d, rec), depth, parent)
            if known:
                call.rank, call.world_size = known.get(pid, NO_RANK)
            return call
        return make

    def row_of_call(self, call: Call) -> Call:
        return call

    def with_py_stack(self, call: Call, stack: Any) -> Call:
        call.py_stack = stack
        return call

    def count(self, records: list[tuple], summary: Summary) -> None:
        """Add the batch's calls, time and errors per probe to `summary`, as
        Summary.add would of its Calls. (Until the kernel counts them.)"""
        # (probe id, return code) -> calls, and probe id -> ns, counted in C where it can
        total_ns: dict[int, int] = {}
        for fid, ns in zip(map(_FUNC, records), map(_DURATION, records)):
            total_ns[fid] = total_ns.get(fid, 0) + ns
        self._add_counts(Counter(map(_FUNC_RET, records)), total_ns, summary)

    def count_columns(self, fids: list[int], rets: list[int], durations: list[int],
                      summary: Summary) -> None:
        """count() of a batch given as its columns (ringbuf.Strided)."""
        total_ns: dict[int, int] = {}
        if fids and fids.count(fids[0]) == len(fids):  # one probe's (a launch loop's)
            fid = fids[0]
            total_ns[fid] = sum(durations)
            by_ret = Counter({(fid, ret): n for ret, n in Counter(rets).items()})
        else:
            for fid, ns in zip(fids, durations):
                total_ns[fid] = total_ns.get(fid, 0) + ns
            by_ret = Counter(zip(fids, rets))
        self._add_counts(by_ret, total_ns, summary)

    def _add_counts(self, by_ret: Counter, total_ns: dict[int, int], summary: Summary) -> None:
        for fid, ns in total_ns.items():
            if fid >= len(self._decoders):
                continue  # unknown probe: counted in errors by decode()
            d = self.decoder(fid)
            calls, named = 0, Counter()
            for (f, ret), n in by_ret.items():
                if f == fid:
                    calls += n
                    if ret:
                        named[d.ret_name(ret)] += n
            summary.add_counts(d.event, calls, ns, named)
