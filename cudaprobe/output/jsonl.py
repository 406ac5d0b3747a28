"""JSON Lines: one object per call, then one `{"summary": ...}` trailer line.
With --gpu-time a call that queued GPU work has a `gpu` object last
(decode.gputime.gpu_object: start_ns, duration_ns, device, stream, ...)."""

from __future__ import annotations

import json
from json.encoder import encode_basestring
from typing import Callable, TextIO

from cudaprobe.analysis.summary import Summary
from cudaprobe.decode.calls import Call
from cudaprobe.decode.gputime import gpu_object
from cudaprobe.decode.nesting import Mark
from cudaprobe.decode.pystacks import PyStack
from cudaprobe.decode.ranks import Ranks
from cudaprobe.decode.records import ProbeDecoder, RecordDecoder, RowMaker
from cudaprobe.output.base import Reporter
from cudaprobe.output.recordtext import compile_args_text, encode
from cudaprobe.probe.event import R_COMM, R_DURATION, R_PID, R_RET, R_TID, R_TS, comm_text


class JsonlReporter(Reporter):
    name = "jsonl"
    extensions = (".jsonl", ".ndjson")

    def __init__(self, stream: TextIO, gpu_time: bool = False) -> None:
        super().__init__(stream, gpu_time)
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

    def records(self, records: list[tuple], decoder: RecordDecoder,
                nesting: list[Mark] | None = None) -> None:
        self.stream.write("".join(decoder.decode(records, self, nesting)))

    def row_maker(self, probe: ProbeDecoder, t0_ns: int, ranks: Ranks) -> RowMaker:
        """The probe's record -> its JSONL line, with its newline."""
        tail, _ = compile_args_text(probe)
        ret_json: dict[int, str] = {}  # return code -> its name as JSON text
        comms, rank_json = self._comms, ranks.json
        # the line from "event" to "duration_ns": the same for every call
        event = (f',"event":{encode_basestring(probe.event)},"api":"{probe.api}",'
                 f'"category":"{probe.category}","duration_ns":')

        def comm_json(raw: bytes) -> str:
            text = comms[raw] = encode_basestring(comm_text(raw))
            return text

        def ret_name_json(ret: int) -> str:
            text = ret_json[ret] = encode_basestring(probe.ret_name(ret))
            return text

        def line(rec: tuple, depth: int = 0, parent: int | None = None) -> str:
            ts, ret, comm, pid = rec[R_TS], rec[R_RET], rec[R_COMM], rec[R_PID]
            return (f'{{"time_ms":{round((ts - t0_ns) / 1e6, 3)!r},"ts_ns":{ts},'
                    f'"pid":{pid},"tid":{rec[R_TID]},'
                    f'"process":{comms.get(comm) or comm_json(comm)}{event}{rec[R_DURATION]},'
                    f'"ret":{ret},"ret_name":{ret_json.get(ret) or ret_name_json(ret)},'
                    f'"args":{tail(rec)},"depth":{depth},'
                    f'"parent":{"null" if parent is None else parent}'
                    f'{rank_json.get(pid, "") if rank_json else ""}}}\n')
        return line

    def row_of_call(self, call: Call) -> str:
        return self.json_line(call) + "\n"

    def with_py_stack(self, row: str, stack: PyStack) -> str:
        return row[:-2] + py_stack_json(stack) + "}\n"

    def json_line(self, call: Call) -> str:
        """The call's JSONL line (no newline), as json.dumps(call.to_dict()) writes
        it; formatted from the record for a Call whose args are not decoded yet."""
        lazy = call.lazy
        if lazy is None or call.duration_ns is None or call.event is not lazy[0].event:
            return encode(call.to_dict())
        if call.py_stack is not None:
            return self._lazy_line(call)[:-1] + py_stack_json(call.py_stack) + "}"
        return self._lazy_line(call)

    def _lazy_line(self, call: Call) -> str:
        """json_line of a Call whose args are not decoded yet, without its stack."""
        lazy = call.lazy
        d, rec = lazy
        if call._args is None and call._details is None:
            json_details = self._json_details.get(d)
            if json_details is None:
                json_details = self._json_details[d] = compile_args_text(d)[1]
            args, details = json_details(rec)
        else:  # decoded already, or assigned
            args, details = encode(call.args), call.details
        return (f'{{"time_ms":{call.time_ms!r},"ts_ns":{call.ts_ns},"pid":{call.pid},'
                f'"tid":{call.tid},"process":{encode_basestring(call.process)},'
                f'"event":{encode_basestring(call.event)},"api":"{call.api}",'
                f'"category":"{call.category}","duration_ns":{call.duration_ns},'
                f'"ret":{call.ret},"ret_name":{encode_basestring(call.ret_name)},'
                f'"args":{args},"details":{encode_basestring(details)},"depth":{call.depth},'
                f'"parent":{"null" if call.parent is None else call.parent}'
                f'{rank_text(call)}}}')

    def finish(self, summary: Summary) -> None:
        self.stream.write(json.dumps({"summary": summary.to_dict()}, separators=(",", ":")) + "\n")
        super().finish(summary)


def rank_text(call: Call) -> str:
    """`,"rank":R,"world_size":N` where the call's process is a known rank."""
    if call.rank is None:
        return ""
    return f',"rank":{call.rank},"world_size":{json.dumps(call.world_size)}'


def py_stack_json(stack: PyStack) -> str:
    """`,"py_stack":[...]` (and `,"py_stack_cut":true`), to go before a line's `}`."""
    return (',"py_stack":' + encode(stack.frames)
            + (',"py_stack_cut":true' if stack.cut else ""))
