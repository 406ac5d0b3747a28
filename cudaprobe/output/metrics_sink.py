"""The Reporter that feeds metrics.py's CallMetrics: what `serve` and --otlp
drive with a TraceSession instead of (or beside) a stream of rows."""

from __future__ import annotations

from typing import Callable

from cudaprobe.analysis.metrics import CallMetrics
from cudaprobe.analysis.summary import Summary
from cudaprobe.decode.calls import Call
from cudaprobe.output.base import Reporter


class MetricsSink(Reporter):
    """The Reporter a TraceSession feeds: calls go to the metrics, not to a stream.
    `on_start` is called once the probes are attached."""

    name = "metrics"

    def __init__(self, metrics: CallMetrics, on_start: Callable[[], None] | None = None) -> None:
        super().__init__(stream=None)  # type: ignore[arg-type]
        self.metrics = metrics
        self.on_start = on_start

    def start(self) -> None:
        if self.on_start is not None:
            self.on_start()

    def calls(self, calls: list[Call]) -> None:
        self.metrics.add(calls)

    def finish(self, summary: Summary) -> None:
        self.metrics.set_lost(summary.lost)
