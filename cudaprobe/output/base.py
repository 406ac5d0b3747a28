"""The reporter interface: `start`, `calls` (a batch at a time), `finish`."""

from __future__ import annotations

from typing import ClassVar, TextIO

from cudaprobe.analysis.summary import Summary
from cudaprobe.decode.calls import Call


class Reporter:
    name: ClassVar[str]
    extensions: ClassVar[tuple[str, ...]] = ()

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def start(self) -> None:
        """Called once the probes are attached, before any call."""

    def calls(self, calls: list[Call]) -> None:
        raise NotImplementedError

    def finish(self, summary: Summary) -> None:
        """Called once at the end, after in-flight calls were reported."""
        self.stream.flush()
