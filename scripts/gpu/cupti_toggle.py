"""Does switching CUPTI's recording off and on harm a running PyTorch job?
A diagnosis of the job that died under serve --duty --gpu-time (BENCHMARKS.md,
"The job that died"): serve switches the recording at each slice's edges,
twice a period, from the library's watcher thread, while the job's threads
launch. Here the same library, in one process, does it many times faster.

One process: the job's steps on its main thread (autograd's backward on its
own thread, as in any training job), and a thread of this script that drives
the GPU-time library through its control block (cupti/inject.h), as serve
does, in one MODE for SECONDS:

  pause   recording with the calls tied (serve --py-stacks), `paused` flipped
          every --every seconds: the watcher turns CUPTI's kinds and
          callbacks off and on (gputime_pause), as at a slice's edges
  work    the same, recording the GPU work only (serve without --py-stacks)
  stop    recording started and stopped every --every seconds (the stop's
          forced flush, the buffers it hands back, and CUPTI taken out of the
          process at the job's next CUDA call's exit, as cudaprobe's stop
          does; the next start brings it back)
  stop-kept  the same, CUPTI left in the process at each stop (no
          cuptiFinalize: ATTACH_KEEP_CUPTI)
  steady  recording on the whole time (the control)

Prints one line: the mode, steps, switches applied, the loss (finite), and
`alive`; a harmed job dies before it (its exit status says how).

    /opt/torch/.venv/bin/python scripts/gpu/cupti_toggle.py LIBRARY MODE
        [--seconds 60] [--every 0.05] [--workload mlp] [--cupti PATH]
Run from the repository root with it on PYTHONPATH (check-cupti-toggle.sh).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "benchmarks"))
import torch_workloads  # noqa: E402
from cupti_cost import L, Recording  # noqa: E402

MODES = ("pause", "work", "stop", "stop-kept", "steady")


def started(record: Recording, flags: int) -> bool:
    """The recording started, or why not printed."""
    try:
        record.start(flags)
    except SystemExit as refused:
        print(refused, flush=True)
        return False
    return True


def drive(record: Recording, mode: str, every: float, done: threading.Event,
          switches: list[int]) -> None:
    """The switching, until `done`; the heartbeat kept going."""
    flags = L["ATTACH_WORK_ONLY"] if mode == "work" else L["ATTACH_CALL_TIES"]
    if mode == "stop-kept":
        flags |= L["ATTACH_KEEP_CUPTI"]
    if not started(record, flags):
        return
    paused = 0
    next_at = time.monotonic() + every
    while not done.is_set():
        time.sleep(0.005)
        record.alive()
        if mode == "steady" or time.monotonic() < next_at:
            continue
        next_at += every
        if mode.startswith("stop"):
            record.stop()
            if not started(record, flags):
                return
            switches[0] += 1
            continue
        paused ^= 1
        switches[0] += record.follow(paused, within_s=1.0)
    record.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("library")
    ap.add_argument("mode", choices=MODES)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--every", type=float, default=0.05)
    ap.add_argument("--workload", default="mlp")
    ap.add_argument("--cupti", default="")
    a = ap.parse_args()
    step = torch_workloads.warmed(a.workload, 20)
    record = Recording(a.library, a.cupti)
    done, switches = threading.Event(), [0]
    driver = threading.Thread(target=drive, args=(record, a.mode, a.every, done, switches))
    driver.start()
    steps, loss = 0, 0.0
    end = time.monotonic() + a.seconds
    while time.monotonic() < end and driver.is_alive():
        out = step()
        steps += 1
        if steps % 50 == 0:
            loss = float(out) if out is not None and out.dim() == 0 else loss
    torch_workloads.torch.cuda.synchronize()
    done.set()
    driver.join()
    finite = "finite" if math.isfinite(loss) else f"NOT FINITE ({loss})"
    print(f"{a.mode} {a.workload}: {steps} steps in {a.seconds:.0f} s, {switches[0]} switches "
          f"every {a.every} s, loss {loss:.4f} ({finite}); alive", flush=True)


if __name__ == "__main__":
    main()
