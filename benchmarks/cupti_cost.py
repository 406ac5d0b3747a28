"""What CUPTI's recording costs a running PyTorch job, by what it records:
nothing, the GPU work only (serve's attach without --py-stacks), the GPU
work and the launches, copies and memsets tied to it by CUPTI's callbacks
(serve --py-stacks), or the GPU work and an API record of every call (an
attach that joins records to calls: --pid --gpu-time).

Then, what serve --duty --py-stacks leaves on between its slices: the call
ties' recording paused (the GPU work's kinds off, CUPTI's callbacks on the
launch functions left on, tying nothing). Last, what a stop costs the job
after it when CUPTI is left in the process ("CUPTI kept": the recording
stopped, CUPTI not finalized, ATTACH_KEEP_CUPTI), against "none", which
follows a stop that takes CUPTI out (cuptiFinalize at the job's next CUDA
call's exit, what cudaprobe does).

One process: the job's steps run in windows of WINDOW_S, in rounds of the
six modes in turn, the recording switched on and off between windows by
the GPU-time library itself (cupti/gputime.c through attach.c's
gputime_inject_attach, called here on the job's own thread between steps,
and its control block's `stop`). Each mode's figure is the median step of
its windows (the first STEADY_S of each left out), beside the windows of no
recording of the same rounds: the host and the GPU the same, seconds apart.

    /opt/torch/.venv/bin/python benchmarks/cupti_cost.py LIBRARY [--workload mlp]
        [--rounds 6] [--cupti PATH]
LIBRARY: the built GPU-time library (cudaprobe.targets.cupti.build_library()).
Run from the repository root with it on PYTHONPATH (check-cupti-cost.sh does):
the control block's layout is read from cupti/inject.h.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_workloads  # noqa: E402

from cudaprobe.targets.cupti import cupti_source_dir  # noqa: E402
from cudaprobe.targets.inject import read_layout  # noqa: E402

WINDOW_S = 2.0
STEADY_S = 0.3  # each window's first steps left out: CUPTI's switch settling
L = read_layout(cupti_source_dir() / "inject.h")  # the control block's offsets and states


class Recording:
    """The library's recording in this process, on and off."""

    def __init__(self, library: str, cupti: str) -> None:
        self.lib = ctypes.CDLL(library)
        self.lib.gputime_inject_attach.restype = ctypes.c_void_p
        self.lib.gputime_inject_attach.argtypes = [ctypes.c_char_p, ctypes.c_uint64,
                                                   ctypes.c_uint64]
        self.cupti = cupti.encode()
        self.block = 0
        self.beat = 1

    def _u32(self, field: str) -> ctypes.c_uint32:
        return ctypes.c_uint32.from_address(self.block + L[field])

    def start(self, flags: int) -> None:
        self.block = self.lib.gputime_inject_attach(self.cupti, os.getpid() | flags, self.beat)
        if self._u32("C_STATE").value != L["ATTACH_RECORDING"]:
            why = ctypes.string_at(self.block + L["C_WHY"]).decode(errors="replace")
            raise SystemExit(f"the library did not record: {why}")

    def follow(self, paused: int, within_s: float | None = None) -> bool:
        """Paused (1: what serve --duty leaves on between its slices, the GPU
        work's kinds off, CUPTI's callbacks on, tying nothing) or resumed (0),
        as serve's slices ask: whether the watcher applied it (within_s)."""
        self._u32("C_PAUSED").value = paused
        deadline = None if within_s is None else time.monotonic() + within_s
        while self._u32("C_APPLIED").value != paused:
            if deadline is not None and time.monotonic() >= deadline:
                return False
            time.sleep(0.002)
            self.alive()
        return True

    def alive(self) -> None:
        """The heartbeat (the watcher stops the recording without it)."""
        if self.block:
            self.beat += 1
            ctypes.c_uint64.from_address(self.block + L["C_HEARTBEAT"]).value = self.beat

    def stop(self, step=None) -> None:
        """Recording stopped; with `step`, steps run until CUPTI has left the
        process or is kept (the job's next CUDA call's exit takes it out)."""
        self._u32("C_STOP").value = 1
        while self._u32("C_STATE").value != L["ATTACH_STOPPED"]:
            time.sleep(0.01)
            self.alive()
        while step is not None and self._u32("C_DETACHED").value not in (
                L["DETACH_DONE"], L["DETACH_KEPT"]):
            step()


def window(step, record: Recording) -> list[float]:
    """Steps of one window: their times, less the first STEADY_S."""
    times = []
    start = time.perf_counter()
    last = start
    while last - start < WINDOW_S:
        step()
        torch_workloads.torch.cuda.synchronize()
        now = time.perf_counter()
        if now - start >= STEADY_S:
            times.append(now - last)
        last = now
        record.alive()
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("library")
    ap.add_argument("--workload", default="mlp")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--cupti", default="")
    a = ap.parse_args()
    step = torch_workloads.warmed(a.workload, 50)
    record = Recording(a.library, a.cupti)
    modes = {"none": None, "work only": L["ATTACH_WORK_ONLY"],
             "call ties": L["ATTACH_CALL_TIES"], "every call": 0,
             "between slices": L["ATTACH_CALL_TIES"],
             "CUPTI kept": L["ATTACH_WORK_ONLY"] | L["ATTACH_KEEP_CUPTI"]}
    steps: dict[str, list[float]] = {m: [] for m in modes}
    for r in range(a.rounds):
        this_round = {}
        for mode, flags in modes.items():
            if flags is not None:
                record.start(flags)
            if mode == "between slices":
                record.follow(1)
            if mode == "CUPTI kept":  # a stop that leaves CUPTI in, then the job's steps
                record.stop(step)
            this_round[mode] = window(step, record)
            steps[mode] += this_round[mode]
            if mode == "CUPTI kept":  # taken out again for the next round's "none"
                record.start(L["ATTACH_WORK_ONLY"])
            if flags is not None:
                record.stop(step)
        print(f"round {r + 1} (its windows alone): " + ", ".join(
            f"{m} {1e3 * statistics.median(t):.3f} ms" for m, t in this_round.items()),
            flush=True)
        if r == 0:
            first = this_round["none"]  # before any CUPTI
    print(f"{a.workload}: the first window, before CUPTI was ever in the process: median step "
          f"{1e3 * statistics.median(first):.3f} ms", flush=True)
    base = statistics.median(steps["none"])
    print(f"{a.workload}: median step " + ", ".join(
        f"{m} {1e3 * statistics.median(t):.3f} ms ({statistics.median(t) / base - 1:+.1%}, "
        f"{len(t)} steps)" for m, t in steps.items()), flush=True)


if __name__ == "__main__":
    main()
