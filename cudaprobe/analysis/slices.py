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
    kernel counts by line only if its launch began in one."""

    KEPT = 4096
    OPEN = 1 << 63  # the end of a slice under way, its length unknown

    def __init__(self) -> None:
        # (begins, ends), swapped whole at each begin: the line join reads them
        # from the GPU records' reader, outside the metrics' lock, while the duty
        # cycle's thread tells a slice; an end is one item set in place
        self._told: tuple[list[int], list[int]] = ([], [])
        self.length_ns: int | None = None  # the slice's length (DutyCycle)

    @property
    def begins(self) -> list[int]:
        return self._told[0]

    def begin(self, at_ns: int) -> None:
        begins, ends = self._told
        keep = len(begins) - self.KEPT // 2 if len(begins) >= self.KEPT else 0
        self._told = ([*begins[keep:], at_ns],
                      [*ends[keep:], at_ns + self.length_ns if self.length_ns else self.OPEN])

    def end(self, at_ns: int) -> None:
        ends = self._told[1]
        if ends:
            ends[-1] = min(ends[-1], at_ns)

    def __contains__(self, ts_ns: int) -> bool:
        begins, ends = self._told
        if not begins:
            return False
        if ts_ns >= begins[-1]:  # the usual case: the latest slice
            i = len(begins) - 1
        else:
            i = bisect.bisect_right(begins, ts_ns) - 1
            if i < 0:
                return False
        return ts_ns < ends[i]

    def __iter__(self) -> Iterator[tuple[int, int]]:
        """Each kept slice's (begin, end)."""
        return zip(*self._told)
