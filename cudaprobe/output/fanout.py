"""One reporter that feeds several: the output (table, jsonl ...) and sinks
beside it (--otlp), from the one TraceSession that drives a reporter."""

from __future__ import annotations

from cudaprobe.analysis.summary import Summary
from cudaprobe.decode.calls import Call
from cudaprobe.output.base import Reporter


class Fanout(Reporter):
    """Calls go to `primary` and then to each sink, in order. At the end the
    sinks finish first: what they lost goes into the summary that `primary`
    writes (the JSONL trailer, the table's summary)."""

    def __init__(self, primary: Reporter, sinks: list[Reporter]) -> None:
        super().__init__(primary.stream)
        self.name = primary.name
        self.primary = primary
        self.sinks = sinks

    def start(self) -> None:
        self.primary.start()
        for sink in self.sinks:
            sink.start()

    def calls(self, calls: list[Call]) -> None:
        self.primary.calls(calls)
        for sink in self.sinks:
            sink.calls(calls)

    def finish(self, summary: Summary) -> None:
        try:
            for sink in self.sinks:
                sink.finish(summary)
        finally:  # a sink that fails leaves the output whole
            self.primary.finish(summary)
