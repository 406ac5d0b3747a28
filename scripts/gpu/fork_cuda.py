"""Children forked without exec that use CUDA, for scripts/gpu/check-descendants.sh.

The parent imports torch (its libcudart mapped, CUDA not initialised: a fork
after that cannot use CUDA), then forks N children (multiprocessing's
"fork"); each makes a tensor on the GPU, multiplies it STEPS times, syncs and
exits through the C library's exit(), so that the CUPTI counter run in it
(an atexit handler) writes its counts: multiprocessing ends a child with
_exit(). Prints one JSON line: the children's pids and exit codes.

    python fork_cuda.py [--children 2] [--steps 200] [--wait 0]

--wait S: each child sleeps S seconds before its first CUDA call.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import multiprocessing
import sys
import time

import torch


def child(steps: int, wait: float) -> None:
    time.sleep(wait)
    x = torch.ones((256, 256), device="cuda")
    for _ in range(steps):
        x = (x @ x) / 256
    torch.cuda.synchronize()
    sys.stdout.flush()
    ctypes.CDLL(None).exit(0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--children", type=int, default=2)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--wait", type=float, default=0.0)
    a = ap.parse_args()
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=child, args=(a.steps, a.wait)) for _ in range(a.children)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    print(json.dumps({"children": [p.pid for p in procs],
                      "exit": [p.exitcode for p in procs]}), flush=True)


if __name__ == "__main__":
    main()
