"""The reporter interface: `start`, `records` (a batch at a time, as the ring
gave them), `finish`; `calls` for calls decoded elsewhere (in flight at the end)."""

from __future__ import annotations

from typing import ClassVar, TextIO

from cudaprobe.analysis.summary import Summary
from cudaprobe.decode.calls import Call
from cudaprobe.decode.nesting import Mark
from cudaprobe.decode.records import RecordDecoder


class Reporter:
    name: ClassVar[str]
    extensions: ClassVar[tuple[str, ...]] = ()
    def __init__(self, stream: TextIO, gpu_time: bool = False, py_stacks: bool = False) -> None:
        self.stream = stream
        # --gpu-time: calls may carry `gpu` work (decode.gputime), --py-stacks a `py_stack`
        # (decode.pystacks): shown where the format has room
        self.gpu_time = gpu_time
        self.py_stacks = py_stacks

    def start(self) -> None:
        """Called once the probes are attached, before any call."""

    def records(self, records: list[tuple], decoder: RecordDecoder,
                nesting: list[Mark] | None = None) -> None:
        """A batch of ring records, in call order, with each one's (depth, parent)
        in `nesting` (decode.nesting.CallOrder): as Calls to calls(), by default.
        A reporter that writes text per record is a decode.records.RowFormat
        (row_maker, row_of_call) and writes `decoder.decode(records, self,
        nesting)`: no Call per record (JSONL, CSV)."""
        self.calls(decoder.calls(records, nesting))

    def calls(self, calls: list[Call]) -> None:
        raise NotImplementedError

    def held_calls(self, calls: list[Call], decoder: RecordDecoder) -> None:
        """Calls made of `decoder`'s records and held until the end (--gpu-time:
        each given its GPU work): as calls() writes them."""
        self.calls(calls)

    def state(self) -> object:
        """What making rows changes in the reporter, copied (output.forked keeps it
        for rows it may have to make again): nothing for rows that stand alone."""
        return None

    def restore(self, state: object) -> None:
        """The reporter as `state()` found it."""

    def advance(self, records: list, decoder: RecordDecoder,
                nesting: list[Mark] | None) -> None:
        """The reporter as records() of these records leaves it, their rows made
        elsewhere (output.forked: by a child, from the reporter as it was).
        Among the tuples may be batches still bytes (probe.ringbuf.Strided, each
        call at the top): a reporter that keeps state reads their columns."""

    def write_lines(self, text: str, lines: int) -> None:
        """`text`, known to hold `lines` line breaks: given with it to an output
        file (files.OutputStream.write_lines: not counted again), or written."""
        write = getattr(self.stream, "write_lines", None)
        if write is not None:
            write(text, lines)
        else:  # a text stream of another kind
            self.stream.write(text)

    def with_py_stack(self, row: object, stack: object) -> object:
        """A row of row_maker's with its call's Python stack (RowFormat)."""
        raise NotImplementedError

    def finish(self, summary: Summary) -> None:
        """Called once at the end, after in-flight calls were reported."""
        self.stream.flush()
