"""A PyTorch training step whose lines' GPU time the program measures itself,
with CUDA events between its lines: the oracle for `serve --gpu-time
--py-stacks` (scripts/gpu/check-lines.sh).

Each step: a bf16 GEMM and a ReLU under no_grad, then a Linear layer's
forward, its loss, the backward pass and an Adam step. Events are recorded
on the stream just before and just after each of those lines, so the time
between the two is the GPU time of the line's kernels. Before each line's
first event the GPU is given a spin of SPIN_MS (torch.cuda._sleep, from a
line of its own): the host, however slowly a tracer makes it run, has queued
the whole line by the time the GPU reaches it, so the events never hold the
GPU waiting for a launch. The host synchronises once every BATCH steps
(--batch).
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

BATCH = 200  # steps between two synchronisations (--batch)
SPIN_MS = 2.0  # the GPU's spin before each line: longer than the host takes to queue it


def marks() -> dict[str, int]:
    """Each `# line:NAME` comment's line number in this file."""
    found = {}
    with open(__file__) as f:
        for n, text in enumerate(f, 1):
            if "# line:" in text and "found" not in text:
                found[text.split("# line:")[1].strip()] = n
    return found


EVENTS = 12  # before and after each of the six lines


def calibrate() -> int:
    """torch.cuda._sleep's cycles for SPIN_MS on this GPU."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    cycles = 1_000_000
    start.record()
    torch.cuda._sleep(cycles)
    end.record()
    end.synchronize()
    return int(cycles * SPIN_MS / start.elapsed_time(end))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--log", required=True)
    ap.add_argument("--hold")
    ap.add_argument("--ready")
    ap.add_argument("--batch", type=int, default=BATCH,
                    help="steps between two synchronisations: 1, the host launches each step "
                         "as the GPU starts it (evenly in time, as sampled slices want)")
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

    spin_cycles = calibrate()

    def spin() -> None:
        torch.cuda._sleep(spin_cycles)  # line:spin

    def step(ev: list[torch.cuda.Event]) -> None:
        spin()
        ev[0].record()
        with torch.no_grad():
            y = a_mat @ b_mat  # line:matmul
            ev[1].record()
            spin()
            ev[2].record()
            torch.relu(y)  # line:relu
        ev[3].record()
        spin()
        ev[4].record()
        h = layer(x)  # line:layer
        ev[5].record()
        spin()
        ev[6].record()
        loss = h.square().mean()  # line:loss
        ev[7].record()
        spin()
        ev[8].record()
        loss.backward()  # line:backward
        ev[9].record()
        spin()
        ev[10].record()
        opt.step()  # line:adam
        opt.zero_grad(set_to_none=True)
        ev[11].record()

    pending: list[list[torch.cuda.Event]] = []
    for _ in range(20):  # warm-up: cuBLAS's handles, Adam's state
        step([torch.cuda.Event(enable_timing=True) for _ in range(EVENTS)])
    torch.cuda.synchronize()
    if a.ready:
        open(a.ready, "w").close()
    log = open(a.log, "w")
    start = time.monotonic()
    next_log = start
    steps = 0
    spun = [0.0]  # GPU ms of the spins (the kernels between the lines' events)
    while time.monotonic() - start < a.seconds:
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(EVENTS)]
        step(ev)
        pending.append(ev)
        steps += 1
        if len(pending) >= a.batch:
            pending[-1][-1].synchronize()
            for e in pending:
                for i, name in enumerate(names):
                    totals[name] += e[2 * i].elapsed_time(e[2 * i + 1])
                # the spins between two lines' events: each step has one more, first
                spun[0] += sum(e[2 * i + 1].elapsed_time(e[2 * i + 2])
                               for i in range(len(names) - 1)) * len(names) / (len(names) - 1)
            pending.clear()
            now = time.monotonic()
            if now >= next_log:
                log.write(json.dumps({"t": now, "steps": steps, "ms": totals,
                                      "spin_ms": spun[0]}) + "\n")
                log.flush()
                next_log = now + 1
    torch.cuda.synchronize()
    for e in pending:
        for i, name in enumerate(names):
            totals[name] += e[2 * i].elapsed_time(e[2 * i + 1])
    log.write(json.dumps({"t": time.monotonic(), "steps": steps, "ms": totals,
                          "spin_ms": spun[0]}) + "\n")
    log.close()
    where = os.path.abspath(__file__)
    print(json.dumps({"steps": steps, "lines": {n: f"{where}:{marks()[n]} (step)"
                                                for n in names}, "ms": totals}), flush=True)
    while a.hold and not os.path.exists(a.hold):
        time.sleep(0.1)


if __name__ == "__main__":
    main()
