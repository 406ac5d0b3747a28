"""SIGINT, SIGTERM and SIGHUP all stop tracing the same way; a second signal
while stopping never raises in the middle of teardown: it is counted, and
the drain, which can be long, stops at it."""

from __future__ import annotations

import signal
from types import FrameType

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class StopRequest:
    def __init__(self) -> None:
        self.signal: int | None = None  # the first: the one acted on
        self.last: int | None = None
        self.count = 0
        self._saved: dict[int, object] = {}

    def __enter__(self) -> StopRequest:
        for sig in STOP_SIGNALS:
            self._saved[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        if self.signal is None:
            self.signal = signum
        self.last = signum
        self.count += 1

    @property
    def requested(self) -> bool:
        return self.signal is not None

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._saved.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]
