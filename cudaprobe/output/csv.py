"""CSV: the JSONL keys as columns, `args` as a JSON object in one cell, `parent`
empty at the top; then `rank` and `world_size`, empty for a process that is
no known rank of a job (and with --py-stacks `py_stack`)."""

from __future__ import annotations

import csv
import io
import json
import re
from typing import TextIO

from cudaprobe.decode.calls import Call
from cudaprobe.decode.nesting import Mark
from cudaprobe.decode.pystacks import PyStack
from cudaprobe.decode.ranks import NO_RANK, Ranks
from cudaprobe.decode.records import ProbeDecoder, RecordDecoder, RowMaker
from cudaprobe.decode.schema import JSONL_KEYS, RANK_KEYS, time_ms_text
from cudaprobe.output.base import Reporter
from cudaprobe.output.recordtext import MEMO_MAX, compile_args_text
from cudaprobe.probe.event import R_COMM, R_DURATION, R_PID, R_RET, R_TID, R_TS, comm_text

MULTILINE = 1  # rows_data's flag: a cell held a line break


class CsvReporter(Reporter):
    name = "csv"
    extensions = (".csv",)

    def __init__(self, stream: TextIO, gpu_time: bool = False, py_stacks: bool = False) -> None:
        super().__init__(stream, gpu_time, py_stacks)
        self._comms: dict[bytes, str] = {}  # the kernel's comm -> its text
        # a cell made so far holds a line break (a process's name, a string it gave):
        # its rows' lines are then counted, not taken to be one a row
        self._multiline = False

    def start(self) -> None:
        self._writer = csv.writer(self.stream)
        self._writer.writerow((*CSV_KEYS, *PY_KEYS) if self.py_stacks else CSV_KEYS)

    def calls(self, calls: list[Call]) -> None:
        self.stream.write("".join(csv_line(csv_row(c)) for c in calls))

    def records(self, records: list[tuple], decoder: RecordDecoder,
                nesting: list[Mark] | None = None) -> None:
        """Rows made packed (pack(): a row with a character past ASCII, `…` in
        DETAILS, is then one byte a character, not two: made, joined and written
        out at about twice the speed), written as their UTF-8 bytes."""
        rows = decoder.decode(records, self, nesting)
        packed = "".join(rows)
        write = getattr(self.stream, "write_packed", None)
        if write is not None:  # a line a row, unless a cell made so far holds a line break
            write(packed, None if self._multiline else len(rows))
        else:  # a text stream of another kind
            self.stream.write(packed.encode("latin-1").decode())

    def rows_data(self, records: list[tuple], decoder: RecordDecoder,
                  nesting: list[Mark] | None) -> tuple[bytes, int, int]:
        """The batch's rows as bytes, their lines, and MULTILINE where a cell
        made held a line break (output.forked)."""
        rows = decoder.decode(records, self, nesting)
        data = "".join(rows).encode("latin-1")
        if self._multiline:  # a line a row, unless a cell made so far holds a line break
            return data, data.count(b"\n"), MULTILINE
        return data, len(rows), 0

    def forked_rows(self, data: bytes, lines: int, flags: int) -> None:
        """Rows made by a forked child (rows_data's), written as they are; a line
        break it met is remembered, as if its rows had been made here."""
        self._multiline = self._multiline or bool(flags & MULTILINE)
        self.stream.write_data(data, lines)

    def row_maker(self, probe: ProbeDecoder, t0_ns: int, ranks: Ranks) -> RowMaker:
        """The probe's record -> its CSV line (CSV_KEYS, `args` as JSON text), as the
        csv module writes it, packed (tests/unit/test_decoders.py checks, byte for
        byte), from parts remembered: a trace's rows repeat a few threads,
        results and argument texts."""
        _, json_details = compile_args_text(probe)
        comms, known = self._comms, ranks.known
        middle = "," + ",".join(map(cell, (probe.event, probe.api, probe.category))) + ","
        whos: dict[tuple, str] = {}  # (pid, tid, comm) -> its cells and the event's
        results: dict[int, str] = {}  # ret -> its cells
        arg_cells: dict[tuple, str] = {}  # (args, details) -> their cells

        def who_text(key: tuple) -> str:
            if len(whos) >= MEMO_MAX:
                whos.clear()
            pid, tid, raw = key
            text = comms.get(raw)
            if text is None:
                text = comms[raw] = comm_text(raw)
            whos[key] = cells = self._cells(f",{pid},{tid},{cell(text)}{middle}")
            return cells

        def result_text(ret: int) -> str:
            results[ret] = cells = pack(f",{ret},{cell(probe.ret_name(ret))},")
            return cells

        def args_text(pair: tuple[str, str]) -> str:
            if len(arg_cells) >= MEMO_MAX:
                arg_cells.clear()
            arg_cells[pair] = cells = self._cells(f"{cell(pair[0])},{cell(pair[1])}")
            return cells

        def rank_text(pid: int) -> str:  # learnt at any time: not remembered
            return ",".join("" if v is None else str(v) for v in known.get(pid, NO_RANK))

        def row(rec: tuple, depth: int = 0, parent: int | None = None) -> str:
            ts, ret, pid = rec[R_TS], rec[R_RET], rec[R_PID]
            key = (pid, rec[R_TID], rec[R_COMM])
            pair = json_details(rec)
            duration = rec[R_DURATION]
            return (f"{time_ms_text(ts - t0_ns)},{ts}{whos.get(key) or who_text(key)}"
                    f"{'' if duration is None else duration}"
                    f"{results.get(ret) or result_text(ret)}"
                    f"{arg_cells.get(pair) or args_text(pair)},{depth},"
                    f"{'' if parent is None else parent},"
                    f"{rank_text(pid) if known else ','}\r\n")
        return row

    def row_of_call(self, call: Call) -> str:
        return self._cells(csv_line(csv_row(call))[:-2]) + "\r\n"

    def with_py_stack(self, row: str, stack: PyStack) -> str:
        return row[:-2] + self._cells("," + ",".join(map(cell, py_stack_cells(stack)))) + "\r\n"

    def _cells(self, text: str) -> str:
        """Cells of a row, packed; a line break in them remembered (_multiline)."""
        if "\n" in text:
            self._multiline = True
        return pack(text)


def pack(text: str) -> str:
    """`text`'s UTF-8 bytes as a str of one character a byte (U+0000-U+00FF):
    what records() joins and writes out as the bytes again (latin-1), where a
    str with one character past U+00FF would take two bytes a character."""
    return text.encode().decode("latin-1")


SPECIAL = re.compile(r'[",\r\n]')  # what the csv module quotes a cell for (QUOTE_MINIMAL)


def cell(text: str) -> str:
    """A string cell as the csv module writes it: quoted, its quotes doubled,
    where it holds a comma, a quote or a line break."""
    return '"' + text.replace('"', '""') + '"' if SPECIAL.search(text) else text


def csv_line(row: tuple) -> str:
    """A row as the csv module writes it (the slow path, for Calls)."""
    buffer = io.StringIO()
    csv.writer(buffer).writerow(row)
    return buffer.getvalue()


CSV_KEYS = JSONL_KEYS + RANK_KEYS
# --py-stacks: the last columns
PY_KEYS = ("py_stack", "py_stack_borrowed", "py_stack_forward")


def _row(time: float, ts: int, pid: int, tid: int, process: str, event: str, api: str,
         category: str, duration: int | None, ret: int, ret_name: str,
         args_details: tuple[str, str], depth: int, parent: int | None,
         rank: tuple) -> tuple:
    """A row in CSV_KEYS' order, `args` as JSON text: from a record (row_maker)
    or from a Call (csv_row) alike."""
    return (time, ts, pid, tid, process, event, api, category, duration, ret, ret_name,
            *args_details, depth, parent, *rank)


def csv_row(call: Call) -> tuple:
    """The call's row, with its Python stack last (--py-stacks) if it has one."""
    row = _row(call.time_ms, call.ts_ns, call.pid, call.tid, call.process, call.event,
               call.api, call.category, call.duration_ns, call.ret, call.ret_name,
               (json.dumps(call.args, separators=(",", ":")), call.details), call.depth,
               call.parent, NO_RANK if call.rank is None else (call.rank, call.world_size))
    if call.py_stack is not None:  # --py-stacks: the last columns, as JSON
        row += py_stack_cells(call.py_stack)
    return row


def py_stack_cells(stack: PyStack) -> tuple[str, str, str]:
    """The py_stack column: the frames as JSON, or {"missing": why}; the
    py_stack_borrowed column: {"tid", "because"} where the stack is another
    thread's, else empty; the py_stack_forward column, for a call of PyTorch's
    backward pass: {"node", "stack"} (the forward op's frames) or {"node",
    "missing": why}, else empty."""
    value = stack.frames if stack.missing is None else {"missing": stack.missing}
    borrowed = "" if stack.borrowed is None else json.dumps(stack.borrowed,
                                                             separators=(",", ":"))
    forward = ""
    if stack.node is not None:
        forward = json.dumps({"node": stack.node, "stack": stack.forward}
                             if stack.forward is not None else
                             {"node": stack.node, "missing": stack.forward_missing},
                             separators=(",", ":"))
    return json.dumps(value, separators=(",", ":")), borrowed, forward
