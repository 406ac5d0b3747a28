"""JSON Lines: one object per call, then one `{"summary": ...}` trailer line.
With --gpu-time a call that queued GPU work has a `gpu` object last
(decode.gputime.gpu_object: start_ns, duration_ns, device, stream, ...)."""

from __future__ import annotations

import json
from json.encoder import encode_basestring_ascii as encode_basestring
from typing import Callable, TextIO

from cudaprobe.analysis.summary import Summary
from cudaprobe.decode.calls import Call
from cudaprobe.decode.gputime import gpu_json, gpu_object
from cudaprobe.decode.nesting import Mark
from cudaprobe.decode.pystacks import PyStack
from cudaprobe.decode.ranks import Ranks
from cudaprobe.decode.records import ProbeDecoder, RecordDecoder, RowMaker
from cudaprobe.decode.schema import time_ms_text
from cudaprobe.output.base import Reporter
from cudaprobe.output.recordtext import MEMO_MAX, compile_args_text, encode
from cudaprobe.probe.event import (
    R_COMM,
    R_DURATION,
    R_FUNC_ID,
    R_PID,
    R_RET,
    R_TID,
    R_TS,
    comm_text,
)


class JsonlReporter(Reporter):
    name = "jsonl"
    extensions = (".jsonl", ".ndjson")

    def __init__(self, stream: TextIO, gpu_time: bool = False, py_stacks: bool = False) -> None:
        super().__init__(stream, gpu_time, py_stacks)
        self._comms: dict[bytes, str] = {}  # the kernel's comm -> its text as JSON
        # probe -> its json_details, for Calls not decoded yet (json_line)
        self._json_details: dict[ProbeDecoder, Callable[[tuple], tuple[str, str]]] = {}

    def calls(self, calls: list[Call]) -> None:
        self.stream.write("".join(self.lines_of(calls)))

    def lines_of(self, calls: list[Call]) -> list[str]:
        """Each call's line, with its newline (and its `gpu` object, where it has one)."""
        return [self.json_line(c) + "\n" if c.gpu is None
                else self.json_line(c)[:-1] + ',"gpu":' + encode(gpu_object(c.gpu)) + "}\n"
                for c in calls]

    def held_calls(self, calls: list[Call], decoder: RecordDecoder) -> None:
        """As calls() writes them, byte for byte, but each call not decoded yet
        (most) written from its record by the probe's row maker, its `gpu`
        object spelt directly (gpu_json): several times faster than a line made
        from the Call (tests/unit/test_gputime_outputs.py checks the two agree)."""
        out = self.held_lines(calls, decoder)
        self.write_lines("".join(out), len(out))

    def held_lines(self, calls: list[Call], decoder: RecordDecoder) -> list[str]:
        """held_calls()'s lines, each with its newline (output.forked makes them
        in children too)."""
        rank_json, out = decoder.ranks.json, []
        for c in calls:
            lazy = c.as_recorded
            if (lazy is not None and c.py_stack is None
                    and (c.rank is not None or c.pid not in rank_json)):
                rec = lazy[1]
                line = decoder.maker(rec[R_FUNC_ID], self)(rec, c.depth, c.parent)
            else:
                line = self.json_line(c) + "\n"
            if c.gpu is not None:
                line = f'{line[:-2]},"gpu":{gpu_json(c.gpu)}}}\n'
            out.append(line)
        return out

    def records(self, records: list[tuple], decoder: RecordDecoder,
                nesting: list[Mark] | None = None) -> None:
        rows = decoder.decode(records, self, nesting)  # a line each: JSON escapes the rest
        self.write_lines("".join(rows), len(rows))

    def rows_data(self, records: list[tuple], decoder: RecordDecoder,
                  nesting: list[Mark] | None) -> tuple[bytes, int, int]:
        """The batch's lines as bytes, how many, and no flag (output.forked)."""
        rows = decoder.decode(records, self, nesting)
        return "".join(rows).encode(), len(rows), 0

    def forked_rows(self, data: bytes, lines: int, flags: int) -> None:
        """Lines made by a forked child (rows_data's): written as they are."""
        self.stream.write_data(data, lines)

    def row_maker(self, probe: ProbeDecoder, t0_ns: int, ranks: Ranks) -> RowMaker:
        """The probe's record -> its JSONL line, with its newline."""
        tail, _ = compile_args_text(probe)
        ret_json: dict[int, str] = {}  # return code -> its name as JSON text
        comms, rank_json = self._comms, ranks.json
        middle = _middle(probe.event, probe.api, probe.category)  # the same for every call

        def comm_json(raw: bytes) -> str:
            text = comms[raw] = encode_basestring(comm_text(raw))
            return text

        def ret_name_json(ret: int) -> str:
            text = ret_json[ret] = encode_basestring(probe.ret_name(ret))
            return text

        # the text from "pid" to "duration_ns": and from "ret" to "args": of a line,
        # remembered: a trace's rows have a few threads and results
        whos: dict[tuple, str] = {}
        results: dict[int, str] = {}

        def who_text(key: tuple) -> str:
            if len(whos) >= MEMO_MAX:
                whos.clear()
            pid, tid, comm = key
            text = whos[key] = (f',"pid":{pid},"tid":{tid},"process":'
                                f'{comms.get(comm) or comm_json(comm)}{middle}')
            return text

        def result_text(ret: int) -> str:
            text = results[ret] = (f',"ret":{ret},"ret_name":'
                                   f'{ret_json.get(ret) or ret_name_json(ret)},"args":')
            return text

        def line(rec: tuple, depth: int = 0, parent: int | None = None) -> str:
            ts, ret, pid = rec[R_TS], rec[R_RET], rec[R_PID]
            key = (pid, rec[R_TID], rec[R_COMM])
            return (f'{{"time_ms":{time_ms_text(ts - t0_ns)},"ts_ns":{ts}'
                    f'{whos.get(key) or who_text(key)}{rec[R_DURATION]}'
                    f'{results.get(ret) or result_text(ret)}{tail(rec)},"depth":{depth},'
                    f'"parent":{"null" if parent is None else parent}'
                    f'{rank_json.get(pid, "") if rank_json else ""}}}\n')
        return line

    def row_of_call(self, call: Call) -> str:
        return self.json_line(call) + "\n"

    def with_py_stack(self, row: str, stack: PyStack) -> str:
        return row[:-2] + py_stack_json(stack) + "}\n"

    def json_line(self, call: Call) -> str:
        """The call's JSONL line (no newline), as json.dumps(call.to_dict()) writes
        it; the arguments formatted from the record for a Call not decoded yet."""
        lazy = call.as_recorded
        if lazy is not None:
            d, rec = lazy
            json_details = self._json_details.get(d)
            if json_details is None:
                json_details = self._json_details[d] = compile_args_text(d)[1]
            args, details = json_details(rec)
        else:  # decoded already, or assigned
            args, details = encode(call.args), call.details
        line = _line(call.time_ms, call.ts_ns, call.pid, call.tid,
                     encode_basestring(call.process),
                     _middle(call.event, call.api, call.category), encode(call.duration_ns),
                     encode(call.ret), encode(call.ret_name),
                     f'{args},"details":{encode(details)}', call.depth, call.parent)
        if call.rank is not None:
            line += f',"rank":{call.rank},"world_size":{encode(call.world_size)}'
        if call.py_stack is not None:
            line += py_stack_json(call.py_stack)
        return line + "}"

    def finish(self, summary: Summary) -> None:
        self.stream.write(json.dumps({"summary": summary.to_dict()}, separators=(",", ":")) + "\n")
        super().finish(summary)


def py_stack_json(stack: PyStack) -> str:
    """`,"py_stack":[...]` (and `,"py_stack_cut":true`, `,"py_stack_borrowed":{...}`),
    or `,"py_stack_missing":"why"`, to go before a line's `}`."""
    return "".join(f',"{key}":{encode(value)}' for key, value in stack.fields().items())


def _middle(event: str, api: str, category: str) -> str:
    """A line's text from "event" to "duration_ns":, the same for every call of
    a function."""
    return (f',"event":{encode_basestring(event)},"api":"{api}","category":"{category}",'
            '"duration_ns":')


def _line(time_ms: float, ts_ns: int, pid: int, tid: int, process_json: str, middle: str,
          duration: object, ret: object, ret_name_json: str, args_details: str, depth: int,
          parent: int | None) -> str:
    """A JSONL line, the schema's keys in order (decode/schema.py), its object left
    open. Strings come as JSON text; `args_details` is the args object then
    `,"details":` and its text. The records' fast path (row_maker) spells the
    same line in parts it remembers; tests/unit/test_decoders.py checks the two
    agree, byte for byte."""
    return (f'{{"time_ms":{time_ms!r},"ts_ns":{ts_ns},"pid":{pid},"tid":{tid},'
            f'"process":{process_json}{middle}{duration},"ret":{ret},'
            f'"ret_name":{ret_name_json},"args":{args_details},"depth":{depth},'
            f'"parent":{"null" if parent is None else parent}')
