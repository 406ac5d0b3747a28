"""PyTorch training-loop workload for the GPU overhead check.

A small MLP (LAYERS linear layers of WIDTH, ReLU, cross-entropy, AdamW)
trained on one fixed random batch: WARMUP steps untimed, then STEPS steps,
each ended by torch.cuda.synchronize() and timed on the host. Small enough
that a step is bound by kernel launches, which is where a per-call tracer
costs most. Prints one JSON object: ms/step (median and min of the timed
steps), the steps, and, with --count-launches, the runtime API's
cudaLaunchKernel calls in one more step as CUPTI counts them
(torch.profiler, after the timed steps: it does not touch their timing),
to check the traced event count against an independent one.

Usage: python torch_train.py [--steps 300] [--warmup 30] [--count-launches]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch


def make_step(width: int, layers: int, batch: int):
    torch.manual_seed(0)
    blocks = []
    for _ in range(layers):
        blocks += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    model = torch.nn.Sequential(*blocks, torch.nn.Linear(width, 10)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)
    x = torch.randn(batch, width, device="cuda")
    y = torch.randint(0, 10, (batch,), device="cuda")

    def step() -> float:
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    return step


def count_launches(step) -> int:
    from torch.profiler import ProfilerActivity, profile  # noqa: PLC0415 - only when asked

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    return sum(e.count for e in prof.key_averages() if e.key == "cudaLaunchKernel")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--width", type=int, default=512)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--count-launches", action="store_true")
    args = ap.parse_args()
    step = make_step(args.width, args.layers, args.batch)
    for _ in range(args.warmup):
        step()
    torch.cuda.synchronize()
    times = []
    start = time.perf_counter()
    for _ in range(args.steps):
        t = time.perf_counter()
        loss = step()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t) * 1e3)
    total = time.perf_counter() - start
    result = {"steps": args.steps, "warmup": args.warmup,
              "ms_per_step": round(statistics.median(times), 4),
              "ms_per_step_min": round(min(times), 4), "seconds": round(total, 3),
              "loss": round(float(loss), 4)}
    if args.count_launches:
        result["launches_per_step"] = count_launches(step)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
