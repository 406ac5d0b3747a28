"""A PyTorch training step whose lines' GPU time the program measures itself,
with CUDA events between its lines: the oracle for `serve --gpu-time
--py-stacks` (scripts/gpu/check-lines.sh).

Each step: a bf16 GEMM and a ReLU under no_grad, then a Linear layer's
forward, its loss, the backward pass and an Adam step. An event is recorded
on the stream before each of those lines and after the last, so the time
between two events is the GPU time of the line between them (the GPU kept
busy: the host runs ahead of it, synchronising once every BATCH steps).
Every second it appends to --log one JSON line: the time (CLOCK_MONOTONIC,
the probes' clock) and each line's GPU ms so far. At the end it prints the
lines' `file:line (function)` (as cudaprobe names them) and totals as JSON,
then, with --hold FILE, waits until FILE exists.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch

BATCH = 200  # steps between two synchronisations


def marks() -> dict[str, int]:
    """Each `# line:NAME` comment's line number in this file."""
    found = {}
    with open(__file__) as f:
        for n, text in enumerate(f, 1):
            if "# line:" in text and "found" not in text:
                found[text.split("# line:")[1].strip()] = n
    return found


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--log", required=True)
    ap.add_argument("--hold")
    ap.add_argument("--ready")
    a = ap.parse_args()
    dev = torch.device("cuda")
    torch.manual_seed(0)
    # sizes that keep the GPU busy while the host, even traced, runs ahead: the time
    # between two events is then the kernels' own, not the GPU waiting for a launch
    a_mat = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    b_mat = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    x = torch.randn(4096, 4096, device=dev)
    layer = torch.nn.Linear(4096, 4096, device=dev)
    opt = torch.optim.Adam(layer.parameters(), lr=1e-4)
    names = ["matmul", "relu", "layer", "loss", "backward", "adam"]
    totals = dict.fromkeys(names, 0.0)

    def step(ev: list[torch.cuda.Event]) -> None:
        ev[0].record()
        with torch.no_grad():
            y = a_mat @ b_mat  # line:matmul
            ev[1].record()
            torch.relu(y)  # line:relu
        ev[2].record()
        h = layer(x)  # line:layer
        ev[3].record()
        loss = h.square().mean()  # line:loss
        ev[4].record()
        loss.backward()  # line:backward
        ev[5].record()
        opt.step()  # line:adam
        opt.zero_grad(set_to_none=True)
        ev[6].record()

    pending: list[list[torch.cuda.Event]] = []
    for _ in range(20):  # warm-up: cuBLAS's handles, Adam's state
        step([torch.cuda.Event(enable_timing=True) for _ in range(7)])
    torch.cuda.synchronize()
    if a.ready:
        open(a.ready, "w").close()
    log = open(a.log, "w")
    start = time.monotonic()
    next_log = start
    steps = 0
    while time.monotonic() - start < a.seconds:
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(7)]
        step(ev)
        pending.append(ev)
        steps += 1
        if len(pending) >= BATCH:
            pending[-1][-1].synchronize()
            for e in pending:
                for i, name in enumerate(names):
                    totals[name] += e[i].elapsed_time(e[i + 1])
            pending.clear()
            now = time.monotonic()
            if now >= next_log:
                log.write(json.dumps({"t": now, "steps": steps, "ms": totals}) + "\n")
                log.flush()
                next_log = now + 1
    torch.cuda.synchronize()
    for e in pending:
        for i, name in enumerate(names):
            totals[name] += e[i].elapsed_time(e[i + 1])
    log.write(json.dumps({"t": time.monotonic(), "steps": steps, "ms": totals}) + "\n")
    log.close()
    where = os.path.abspath(__file__)
    print(json.dumps({"steps": steps, "lines": {n: f"{where}:{marks()[n]} (step)"
                                                for n in names}, "ms": totals}), flush=True)
    while a.hold and not os.path.exists(a.hold):
        time.sleep(0.1)


if __name__ == "__main__":
    main()
