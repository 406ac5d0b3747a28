"""The trace hot path: ring buffer records -> Calls, with per-probe decoders
compiled once from the catalogue when the session starts.

decode.decode_event takes a RawEvent and walks the function's argument
kinds for every event (~10 µs each in CPython). Here each probe gets a
ProbeDecoder built at plan time: its constant fields (symbol, api,
category), a cache of return-code names, and one closure per argument that
reads the record word it needs. Calls are made with only the cheap fields;
`args` and `details` are decoded when a reporter first asks (the table
wants only details, the summary neither), and JSONL is written from the
record by `json_line` without the intermediate dict of `Call.to_dict`.

Probes whose decoding has side effects or needs the process (kernel names
of launches, handles a call makes, strings and launch configs copied at
entry) are decoded at once by decode.decode_event, in arrival order, as
before: their names must be looked up before a later event changes them.
"""

from __future__ import annotations

import json
from collections import Counter
from json.encoder import encode_basestring
from typing import Any, Callable, Protocol

from cudaprobe.catalogue.cuda_errors import error_name
from cudaprobe.catalogue.functions import OUT_KINDS, ArgKind
from cudaprobe.decode.calls import (
    NOT_READ,
    WORD_DECODERS,
    Call,
    Symbolizer,
    _dim3_value,
    decode_event,
)
from cudaprobe.decode.handles import KernelHandles
from cudaprobe.probe.event import (
    R_COMM,
    R_DURATION,
    R_FUNC_ID,
    R_NOUTS,
    R_PID,
    R_RET,
    R_TID,
    R_TS,
    R_WORDS,
    comm_text,
    from_record,
)
from cudaprobe.probe.plan import Probe


class Summary(Protocol):
    """What the record loops count into: analysis.summary.Summary (not imported:
    decode comes before analysis on the data path)."""

    def add(self, calls: list[Call]) -> None: ...

    def add_counts(self, event: str, calls: int, total_ns: int, errors: Counter[str]) -> None: ...


# kinds a ProbeDecoder decodes from the record's words alone; the others take
# decode_event's path (see the module docstring)
SIMPLE_KINDS = set(WORD_DECODERS) - {ArgKind.FUNC, ArgKind.CU_FUNCTION, ArgKind.OUT_FUNCTION}
SIMPLE_KINDS.add(ArgKind.DIM3)

_encode = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False,
                           check_circular=False).encode



def _json_list(value: list[int]) -> str:
    return "[" + ",".join(map(str, value)) + "]"


def _json_float(value: float | None) -> str:
    return "null" if value is None else repr(value)


# kinds whose JSON value is a string: pointers and handles in hex, memcpy kind names
STRING_KINDS = {ArgKind.PTR, ArgKind.STREAM, ArgKind.EVENT, ArgKind.HANDLE, ArgKind.OUT_PTR,
                ArgKind.OUT_HANDLE, ArgKind.MEMCPY_KIND}


# kind -> its JSON value as text, as json.dumps writes it (the kinds' values are
# ints, strings, lists of ints, or a float or None)
def _json_of(kind: ArgKind) -> Callable[[Any], str]:
    if kind is ArgKind.DIM3:
        return _json_list
    if kind is ArgKind.OUT_FLOAT:
        return _json_float
    if kind in STRING_KINDS:
        return encode_basestring
    return str  # SIZE, COUNT, INT, FLAGS, ...: ints


class ArgField:
    """One argument of a probe: where its word is in the record, how it decodes."""

    __slots__ = ("name", "index", "decode", "text_key")

    def __init__(self, name: str, kind: ArgKind, index: int) -> None:
        self.name = name
        self.index = index
        if kind is ArgKind.DIM3:
            self.decode = lambda rec: _dim3_value(rec[index], rec[index + 1])
        elif kind in OUT_KINDS:
            word = WORD_DECODERS[kind]
            # nouts 0: not read (and not in a short record at all)
            self.decode = lambda rec: word(rec[index]) if rec[R_NOUTS] else NOT_READ
        else:
            word = WORD_DECODERS[kind]
            self.decode = lambda rec: word(rec[index])
        self.text_key = name + "="


def _compile_formatters(fields: list[tuple[str, ArgKind, int]]
                        ) -> tuple[Callable[[tuple], str], Callable[[tuple], tuple[str, str]]]:
    """(json_tail, json_details) of one probe, from its (name, kind, record
    index) list: json_details(rec) is (`args` as JSON text, details);
    json_tail(rec) is `{args},"details":...}` and a newline, the end of its
    JSONL line. Generated as straight-line code rather than a loop over
    ArgFields: the loop, its lists and joins were half the cost of a line.
    A probe with out-parameters gets one test of the record's nouts and two
    returns: the out-parameters decoded, or all of them not read (NOT_READ,
    written as constants: null in `args`, `-` in details).
    Only repr()s of catalogue names and ints go into the source."""
    ns: dict[str, Any] = {"enc": encode_basestring}
    body, outs = [], []  # lines decoding the arguments, the out-parameters
    args, details = [], []  # each argument's text: out-parameters read
    args_unread, details_unread = [], []  # ... out-parameters not read
    for k, (name, kind, index) in enumerate(fields):
        json_key = (',' if k else '') + encode_basestring(name) + ':'
        text_key = (' ' if k else '') + name + '='
        if kind is ArgKind.DIM3:
            ns[f"w{k}"] = _dim3_value
            body.append(f"    v{k}, t{k} = w{k}(rec[{index}], rec[{index + 1}])")
        else:
            ns[f"w{k}"] = WORD_DECODERS[kind]
            (outs if kind in OUT_KINDS else body).append(f"    v{k}, t{k} = w{k}(rec[{index}])")
        ns[f"j{k}"] = _json_of(kind)
        args.append(f"{json_key!r} + j{k}(v{k})")
        details.append(f"{text_key!r} + t{k}")
        if kind in OUT_KINDS:
            args_unread.append(repr(json_key + _encode(NOT_READ[0])))
            details_unread.append(repr(text_key + NOT_READ[1]))
        else:
            args_unread.append(args[-1])
            details_unread.append(details[-1])
    details_key, end = repr(',"details":'), repr("}\n")

    def returns(arg_texts: list[str], detail_texts: list[str], indent: str) -> tuple[str, str]:
        args_text = " + ".join(["'{'", *arg_texts, "'}'"])
        details_text = " + ".join(detail_texts) or repr("")
        return (f"{indent}return {args_text} + {details_key} + enc({details_text}) + {end}",
                f"{indent}return {args_text}, {details_text}")

    if outs:  # read at exit only when the call returned 0: the record's nouts says
        read = [f"    if rec[{R_NOUTS}]:", *("    " + line for line in outs)]
        tail_read, pair_read = returns(args, details, "        ")
        tail_unread, pair_unread = returns(args_unread, details_unread, "    ")
        tail = "\n".join([*read, tail_read, tail_unread])
        pair = "\n".join([*read, pair_read, pair_unread])
    else:
        tail, pair = returns(args, details, "    ")
    exec("\n".join(["def json_tail(rec):", *body, tail,  # noqa: S102
                     "def json_details(rec):", *body, pair]), ns)
    return ns["json_tail"], ns["json_details"]


class ProbeDecoder:
    """What one probe's records decode to, built from its catalogue entry."""

    def __init__(self, probe: Probe) -> None:
        fn = probe.function
        self.probe = probe
        self.event, self.api, self.category = probe.symbol, fn.api, fn.category
        self.simple = all(arg.kind in SIMPLE_KINDS for arg in fn.args)
        self.fields: list[ArgField] = []
        if self.simple:
            for arg, slot in zip(fn.args, fn.slots):
                # the record's words: the arguments, then the out-parameters
                index = (R_WORDS + fn.words + fn.out_index[arg.name] if arg.kind in OUT_KINDS
                         else R_WORDS + slot)
                self.fields.append(ArgField(arg.name, arg.kind, index))
            self.json_tail, self.json_details = _compile_formatters(
                [(a.name, a.kind, f.index) for a, f in zip(fn.args, self.fields)])
        # the JSONL line from "event" to "duration_ns": the same for every call
        self.json_event = (f',"event":{encode_basestring(self.event)},"api":"{self.api}",'
                           f'"category":"{self.category}","duration_ns":')
        self.ret_names: dict[int, str] = {}  # return code -> name, as met
        self.ret_json: dict[int, str] = {}  # return code -> its name as JSON text
        # RecordDecoder.jsonl's calls since its summary was last told
        self.tally_calls = 0
        self.tally_ns = 0
        self.tally_errors: dict[int, int] = {}  # return code -> calls

    def ret_name(self, ret: int) -> str:
        name = self.ret_names.get(ret)
        if name is None:
            name = self.ret_names[ret] = error_name(self.api, ret)
        return name

    def ret_name_json(self, ret: int) -> str:
        text = self.ret_json[ret] = encode_basestring(self.ret_name(ret))
        return text

    def args_details(self, rec: tuple) -> tuple[dict[str, Any], str]:
        args = {}
        parts = []
        for f in self.fields:
            value, text = f.decode(rec)
            args[f.name] = value
            parts.append(f.text_key + text)
        return args, " ".join(parts)


class RecordDecoder:
    """Decodes batches of ring buffer records (event.R_* tuples) into Calls."""

    def __init__(self, probes: list[Probe], t0_ns: int, symbolize: Symbolizer | None = None,
                 handles: KernelHandles | None = None,
                 see_process: Callable[[int], None] | None = None) -> None:
        self.probes = probes
        self.decoders = [ProbeDecoder(p) for p in probes]
        self.t0_ns = t0_ns
        self.symbolize = symbolize
        self.handles = handles
        self.see_process = see_process
        self._seen: set[int] = set()
        self._comms: dict[bytes, str] = {}  # the kernel's comm -> its text
        self._comms_json: dict[bytes, str] = {}  # the kernel's comm -> its text as JSON
        self.errors = 0  # records that could not be decoded (unknown probe id)

    def _comm(self, raw: bytes) -> str:
        text = self._comms[raw] = comm_text(raw)
        return text

    def _comm_json(self, raw: bytes) -> str:
        text = self._comms_json[raw] = encode_basestring(comm_text(raw))
        return text

    def _see(self, pid: int) -> None:
        self._seen.add(pid)
        if self.see_process is not None:
            self.see_process(pid)  # a process's first event: read its maps now

    def _decode_whole(self, rec: tuple) -> Call | None:
        try:
            return decode_event(from_record(rec), self.probes, self.t0_ns, self.symbolize,
                                handles=self.handles)
        except ValueError:
            self.errors += 1
            return None

    def jsonl(self, records: list[tuple], summary: Summary) -> str:
        """A batch's JSONL lines, each with its newline, as JsonlReporter writes
        the Calls of `calls(records)`, and the batch added to `summary`: without
        a Call per record, where the file is all that is made of them."""
        lines: list[str] = []
        append = lines.append
        decoders, ndecoders, t0 = self.decoders, len(self.decoders), self.t0_ns
        comms, seen = self._comms_json, self._seen
        for rec in records:
            pid = rec[R_PID]
            if pid not in seen:
                self._see(pid)
            fid = rec[R_FUNC_ID]
            if fid >= ndecoders:  # (unsigned)
                self.errors += 1
                continue
            d = decoders[fid]
            if not d.simple:
                call = self._decode_whole(rec)
                if call is not None:
                    summary.add([call])
                    append(json_line(call) + "\n")
                continue
            ts = rec[R_TS]
            duration = rec[R_DURATION]
            ret = rec[R_RET]
            d.tally_calls += 1
            d.tally_ns += duration
            if ret:
                d.tally_errors[ret] = d.tally_errors.get(ret, 0) + 1
            comm = rec[R_COMM]
            append(f'{{"time_ms":{round((ts - t0) / 1e6, 3)!r},"ts_ns":{ts},"pid":{pid},'
                   f'"tid":{rec[R_TID]},"process":{comms.get(comm) or self._comm_json(comm)}'
                   f'{d.json_event}{duration},"ret":{ret},"ret_name":'
                   f'{d.ret_json.get(ret) or d.ret_name_json(ret)},"args":{d.json_tail(rec)}')
        self._tell(summary)
        return "".join(lines)

    def csv_rows(self, records: list[tuple], summary: Summary,
                 row_of_call: Callable[[Call], list]) -> list:
        """A batch's CSV rows (JSONL_KEYS, `args` as JSON text), as CsvReporter
        writes the Calls of `calls(records)`, and the batch added to `summary`;
        `row_of_call` makes the rows of the records decoded whole."""
        rows: list = []
        append = rows.append
        decoders, ndecoders, t0 = self.decoders, len(self.decoders), self.t0_ns
        comms, seen = self._comms, self._seen
        for rec in records:
            pid = rec[R_PID]
            if pid not in seen:
                self._see(pid)
            fid = rec[R_FUNC_ID]
            if fid >= ndecoders:  # (unsigned)
                self.errors += 1
                continue
            d = decoders[fid]
            if not d.simple:
                call = self._decode_whole(rec)
                if call is not None:
                    summary.add([call])
                    append(row_of_call(call))
                continue
            ts = rec[R_TS]
            duration = rec[R_DURATION]
            ret = rec[R_RET]
            d.tally_calls += 1
            d.tally_ns += duration
            if ret:
                d.tally_errors[ret] = d.tally_errors.get(ret, 0) + 1
            comm = rec[R_COMM]
            append((round((ts - t0) / 1e6, 3), ts, pid, rec[R_TID],
                    comms.get(comm) or self._comm(comm), d.event, d.api, d.category, duration,
                    ret, d.ret_names.get(ret) or d.ret_name(ret), *d.json_details(rec)))
        self._tell(summary)
        return rows

    def _tell(self, summary: Summary) -> None:
        """Add what jsonl() and csv_rows() tallied to the summary, as Summary.add would have."""
        for d in self.decoders:
            if d.tally_calls:
                errors: Counter[str] = Counter()
                for ret, n in d.tally_errors.items():
                    errors[d.ret_name(ret)] += n
                summary.add_counts(d.event, d.tally_calls, d.tally_ns, errors)
                d.tally_calls = d.tally_ns = 0
                d.tally_errors = {}

    def calls(self, records: list[tuple]) -> list[Call]:
        out: list[Call] = []
        append = out.append
        decoders, ndecoders, t0 = self.decoders, len(self.decoders), self.t0_ns
        comms, seen = self._comms, self._seen
        for rec in records:
            pid = rec[R_PID]
            if pid not in seen:
                self._see(pid)
            fid = rec[R_FUNC_ID]
            if fid >= ndecoders:  # (unsigned)
                self.errors += 1
                continue
            d = decoders[fid]
            if not d.simple:
                call = self._decode_whole(rec)
                if call is not None:
                    append(call)
                continue
            ret = rec[R_RET]
            ts = rec[R_TS]
            append(Call(round((ts - t0) / 1e6, 3), ts, pid, rec[R_TID],
                        comms.get(rec[R_COMM]) or self._comm(rec[R_COMM]), d.event, d.api,
                        d.category, rec[R_DURATION], ret,
                        d.ret_names.get(ret) or d.ret_name(ret), None, None, (d, rec)))
        return out


def json_line(call: Call) -> str:
    """The call's JSONL line (no newline), as json.dumps(call.to_dict()) writes
    it, formatted directly for calls from a ProbeDecoder."""
    lazy = call.lazy
    if lazy is None or call.duration_ns is None or call.event is not lazy[0].event:
        return _encode(call.to_dict())
    d, rec = lazy
    if call._args is None and call._details is None:
        args, details = d.json_details(rec)
    else:  # decoded already, or assigned
        args, details = _encode(call.args), call.details
    return (f'{{"time_ms":{call.time_ms!r},"ts_ns":{call.ts_ns},"pid":{call.pid},'
            f'"tid":{call.tid},"process":{encode_basestring(call.process)}{d.json_event}'
            f'{call.duration_ns},"ret":{call.ret},"ret_name":{encode_basestring(call.ret_name)},'
            f'"args":{args},"details":{encode_basestring(details)}}}')
