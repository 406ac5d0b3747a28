"""--max-size: stop writing calls once the output file holds SIZE bytes.

A cap, not rotation: the file keeps the start of the trace, whole rows, and
its summary (the JSONL trailer, the table's summary) is still written after
the cap. Calls past it are counted: `lost.output_max_size` in the summary,
so --strict fails and the status line says so. Calls go to the wrapped
reporter CHUNK at a time, so the file ends at most one chunk past SIZE.
"""

from __future__ import annotations

from typing import Callable

from cudaprobe.analysis.summary import Summary
from cudaprobe.decode.calls import Call, humanize_bytes
from cudaprobe.output.base import Reporter
from cudaprobe.output.files import LazyOutputFile

CHUNK = 64
LOST_KEY = "output_max_size"


class SizeCapped(Reporter):
    def __init__(self, inner: Reporter, stream: LazyOutputFile, max_size: int,
                 notify: Callable[[str], None]) -> None:
        super().__init__(stream)
        self.inner = inner
        self.name = inner.name
        self.max_size = max_size
        self.notify = notify
        self.dropped = 0

    def start(self) -> None:
        self.inner.start()

    def calls(self, calls: list[Call]) -> None:
        for i in range(0, len(calls), CHUNK):
            if self.stream.written >= self.max_size:
                if not self.dropped:
                    self.notify(f"{self.stream.path} reached --max-size "
                                f"{humanize_bytes(self.max_size)}: further calls are counted, "
                                "not written")
                self.dropped += len(calls) - i
                return
            self.inner.calls(calls[i : i + CHUNK])

    def finish(self, summary: Summary) -> None:
        if self.dropped:
            summary.lost[LOST_KEY] = self.dropped
        self.inner.finish(summary)
