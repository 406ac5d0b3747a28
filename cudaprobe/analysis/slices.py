"""serve --duty's slices in the calls' clock: what the call counts (metrics)
and the line join (gpulines) both place a call in."""

from __future__ import annotations

import bisect
from collections.abc import Iterator


class SliceSpans:
    """serve --duty: when each slice counted, [begin, end) in the calls' clock
    (CLOCK_MONOTONIC): from once the probes are in to the slice's length later,
    or to its end where that came first. A sampled call counts only if its
    entry lies in one: the probes go in and come out function by function,
    and the calls traced while they do (tenths of a second on a loaded node,
    as long as the slice or more) would count at 1/fraction too. The last
    KEPT slices are kept, for a decoder that runs behind. The line join
    (gpulines.LineJoin) places a launch's API record in the same slices: a
    kernel counts, by name and by line, only if its launch began in one."""

    KEPT = 4096
    OPEN = 1 << 63  # the end of a slice under way, its length unknown

    def __init__(self) -> None:
        self.begins: list[int] = []
        self.ends: list[int] = []  # the slice's length after its begin, until told sooner
        self.length_ns: int | None = None  # the slice's length (DutyCycle)

    def begin(self, at_ns: int) -> None:
        if len(self.begins) >= self.KEPT:
            del self.begins[:self.KEPT // 2], self.ends[:self.KEPT // 2]
        self.begins.append(at_ns)
        self.ends.append(at_ns + self.length_ns if self.length_ns else self.OPEN)

    def end(self, at_ns: int) -> None:
        if self.ends:
            self.ends[-1] = min(self.ends[-1], at_ns)

    def __contains__(self, ts_ns: int) -> bool:
        begins = self.begins
        if not begins:
            return False
        if ts_ns >= begins[-1]:  # the usual case: the latest slice
            i = len(begins) - 1
        else:
            i = bisect.bisect_right(begins, ts_ns) - 1
            if i < 0:
                return False
        return ts_ns < self.ends[i]

    def __iter__(self) -> Iterator[tuple[int, int]]:
        """Each kept slice's (begin, end)."""
        return zip(self.begins, self.ends)
