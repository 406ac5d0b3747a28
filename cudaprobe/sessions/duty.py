"""serve --duty: the probes on for a slice of each period and off for the
rest, so that an always-on node daemon costs the jobs about that fraction of
what exact counting costs (docs/fleet.md, BENCHMARKS.md).

Each period of `period_s` has one slice of `fraction * period_s` seconds
traced, starting at a random point of the period (uniform, drawn afresh
each period): a job whose steps repeat at some period of their own is not
seen always at the same point of its step, so the estimate has no bias from
where the slice falls. Between slices the library-wide links are off
(Attacher.pause: no breakpoint is left in any process); a slice begins once
every link is in again and ends as calls stop beginning, each function at
once (the `phase` map), so a slice holds whole calls only. Every call
counted in a slice stands for 1/fraction calls (CallMetrics.weight).

The allocations and frees (EXACT) stay traced between slices, each call
counted once: live memory and the out-of-memory errors are exact. They are
rare calls (a caching allocator makes a few), so they cost nothing to speak
of; serve puts them in Settings.duty_exact, whose links pause() leaves on.
With --py-stacks, PyTorch's autograd probes cycle with the rest, and the
slices are told to the metrics (`window_traced`, `window_ended`), whose join
of GPU work to Python lines looks only at work launched inside one. With
--gpu-time, the GPU-time library's CUPTI recording in each process is never
switched with the slices: switching CUPTI off and on while a job launches
can kill it (CUPTI's own thread faults; H100, CUDA 13: any of its kinds or
callbacks switched, a few times a second, killed a PyTorch training step
within a few thousand switches, scripts/gpu/check-cupti-toggle.sh). So
CUPTI records from the library's start to serve's stop: every kernel's GPU
time is counted, unscaled, and its cost on each launch is the job's all
along (BENCHMARKS.md). The Python lines of GPU time are the slices' (the
launches the probes traced, each standing for 1/fraction).
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from cudaprobe.analysis.memtrack import ROLES
from cudaprobe.analysis.metrics import CallMetrics
from cudaprobe.errors import CudaprobeError, UsageError
from cudaprobe.probe.autograd import AutogradProbe
from cudaprobe.probe.tracer import Tracer

if TYPE_CHECKING:  # (it imports bcc's users: only its type here)
    from cudaprobe.sessions.gputime_attach import GpuTimeAttach

# traced all the time, counted exactly: the allocations and frees (rare calls,
# whose every one live memory and an out-of-memory alert need)
EXACT = frozenset(ROLES)
MIN_SLICE_S = 0.05  # a shorter slice is mostly the links going on and off
SLACK_S = 0.5  # of each period, left after its slice for the links to go on and off


def parse_duty(text: str) -> float:
    """`2%` or `0.02` -> 0.02; one clear error otherwise."""
    try:
        value = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        value = -1.0
    if not 0 < value <= 1:
        raise UsageError(f"--duty {text!r}: a fraction of the time, above 0 and at most 1 "
                         "(0.02) or a percentage (2%)")
    return value


class DutyCycle:
    """Cycles a Tracer's links once started (RunOptions.on_started), feeding
    `metrics` its weight and its slices."""

    def __init__(self, fraction: float, period_s: float, metrics: CallMetrics,
                 rng: random.Random | None = None) -> None:
        self.check(fraction, period_s)
        self.fraction, self.period_s = fraction, period_s
        self.slice_s = fraction * period_s
        self.metrics = metrics
        self.rng = rng or random.Random()
        self.notify: Callable[[str], None] = lambda _line: None  # said to the user
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._autograd: AutogradProbe | None = None
        # serve --gpu-time: the GPU-time library in the node's processes (CUPTI on
        # all along, never switched with the slices); asked for once the probes are in
        self.gpu_of: Callable[[], GpuTimeAttach | None] = lambda: None
        metrics.weight = 1 / fraction
        metrics.spans.length_ns = round(self.slice_s * 1e9)  # a call counts in one
        metrics.exact(EXACT)

    @staticmethod
    def check(fraction: float, period_s: float) -> None:
        """One clear error where the slice is too short, or leaves no time between."""
        slice_s = fraction * period_s
        if slice_s < MIN_SLICE_S or slice_s > period_s - SLACK_S:
            raise UsageError(f"--duty {fraction:g} of --duty-period {period_s:g}s is a slice "
                             f"of {slice_s:.3g}s: it must be at least {MIN_SLICE_S}s and leave "
                             f"{SLACK_S}s of each period (make the period longer)")

    def start(self, tracer: Tracer) -> None:
        """The probes of the start are in: off until the first slice."""
        attacher = tracer.attacher
        self._autograd = tracer.autograd  # --py-stacks: PyTorch's autograd probes cycle too
        if not attacher.pause():  # perf-event probes (CUDAPROBE_ATTACH=perf): always on
            self.metrics.weight = 1
            self.notify("--duty: the probes cannot be taken off and put back with this "
                        "kernel's perf-event uprobes: every call is counted, unscaled")
            return
        if self._autograd is not None:
            self._autograd.pause()
        gpu = self.gpu_of()
        if gpu is not None and gpu.reader is not None:
            self.notify("--duty with --gpu-time: CUPTI records in each process all along, not "
                        "only in the slices (switching it with them can kill a job), so every "
                        "kernel's GPU time is counted, unscaled, and CUPTI costs each launch "
                        "all along")
        self.metrics.slices_only()  # --py-stacks: the lines are the slices' launches'
        self._thread = threading.Thread(target=self._run, args=(attacher,),
                                        name="cudaprobe-duty", daemon=True)
        self._thread.start()

    def _run(self, attacher) -> None:
        try:
            self._cycle(attacher)
        except Exception as e:  # links refused, a process's memory gone: say so, once,
            self._halt(attacher)  # and stop with everything off, never stuck on
            why = str(e) if isinstance(e, (CudaprobeError, OSError)) else \
                f"{type(e).__name__}: {e}"
            self.notify(f"--duty: the slices stopped ({why}); the probes are off and from "
                        "now on nothing is counted")

    def _halt(self, attacher) -> None:
        """After a failure in the cycle: a slice under way ended, and the probes
        and the autograd probes off, each as far as it goes (a slice left open,
        or the probes left in, would count every call from then on at
        1/fraction: a job seen ten times over)."""
        offs = [self.metrics.window_ended, attacher.pause]
        if self._autograd is not None:
            offs.append(self._autograd.pause)
        for off in offs:
            with contextlib.suppress(Exception):
                off()

    def _cycle(self, attacher) -> None:
        """Each period, a slice: the probes in, `slice_s`, the probes out."""
        begins = time.monotonic()
        while True:
            offset = self.rng.uniform(0, max(0.0, self.period_s - self.slice_s - SLACK_S))
            if self._stop.wait(max(0.0, begins + offset - time.monotonic())):
                return
            if self._autograd is not None:
                self._autograd.resume()
            if not attacher.resume():  # tracing over
                return
            self.metrics.window_traced()  # from now on: the probes are in
            stopped = self._stop.wait(self.slice_s)
            self.metrics.window_ended()
            paused = attacher.pause()
            if self._autograd is not None:
                self._autograd.pause()
            if not paused or stopped:
                return
            begins += self.period_s
            if begins < time.monotonic():  # the links took longer than the slack: a
                begins = time.monotonic()   # period starts now (none is left unsampled)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
