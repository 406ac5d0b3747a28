"""The workload of the GPU check of `--pid --gpu-time`
(scripts/gpu/check-attach-gputime.sh): at full speed, epoch after epoch, a
PyTorch eager training run (an MLP re-made from seed 0 each epoch, STEPS
Adam steps) and a cuBLAS-heavy block (GEMMs of a few shapes and dtypes,
each between two CUDA events), so that:

- its own output is one line per epoch, which must be the same in every
  epoch: the epoch's last loss and a checksum of its GEMMs' results, printed
  exactly (an attach that changed the work would change them);
- each GEMM's GPU time is measured independently of CUPTI: the mean of its
  CUDA event intervals per epoch;
- the step time is logged per epoch, with the monotonic time, to set against
  when a tracer was attached.

Usage: python attach_workload.py --seconds S [--stop FILE] [--log FILE] [--profile]
--stop: ends at the first epoch's end after FILE exists (else after S seconds).
--log: a JSON line per epoch {t0, t1, epoch, step_ms, loss, checksum, gemm_ms}.
--profile: the whole run under torch.profiler (the conflict check).
Prints {"epochs": N, "distinct_outputs": K, ...} at the end (K must be 1).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import time

import torch

STEPS = 30  # Adam steps per epoch
WIDTH, BATCH = 2048, 2048  # a step of ~7 ms on the GPU: its time steady enough to compare
GEMMS = [(4096, 4096, 4096, torch.float16), (8192, 2048, 4096, torch.bfloat16),
         (2048, 2048, 2048, torch.float32)]


def epoch(gemms: list, events: list) -> tuple[str, list[float], float]:
    torch.manual_seed(0)
    blocks = []
    for _ in range(6):
        blocks += [torch.nn.Linear(WIDTH, WIDTH), torch.nn.GELU()]
    model = torch.nn.Sequential(*blocks, torch.nn.Linear(WIDTH, 10)).cuda()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(BATCH, WIDTH, device="cuda")
    y = torch.randint(0, 10, (BATCH,), device="cuda")
    torch.cuda.synchronize()
    start = time.monotonic()
    for _ in range(STEPS):
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
    torch.cuda.synchronize()
    step_ms = (time.monotonic() - start) * 1000 / STEPS
    total = 0.0
    for (a, b), (e0, e1) in zip(gemms, events):
        e0.record()
        c = a @ b
        e1.record()
        total += float(c.float().abs().sum())
    torch.cuda.synchronize()
    gemm_ms = [e0.elapsed_time(e1) for e0, e1 in events]
    return f"loss {loss.item()!r} gemm {total!r}", gemm_ms, step_ms


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, required=True)
    ap.add_argument("--log")
    ap.add_argument("--stop")
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    g = torch.Generator(device="cuda").manual_seed(1)
    gemms = [(torch.randn(m, k, device="cuda", dtype=dt, generator=g),
              torch.randn(k, n, device="cuda", dtype=dt, generator=g)) for m, k, n, dt in GEMMS]
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in GEMMS]
    log = open(args.log, "a") if args.log else None
    outputs: dict[str, int] = {}
    prof = (torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                               torch.profiler.ProfilerActivity.CUDA])
            if args.profile else contextlib.nullcontext())
    n = 0
    end = time.monotonic() + args.seconds
    with prof:
        while time.monotonic() < end and not (args.stop and os.path.exists(args.stop)):
            t0 = time.monotonic()
            out, gemm_ms, step_ms = epoch(gemms, events)
            outputs[out] = outputs.get(out, 0) + 1
            n += 1
            if log:
                log.write(json.dumps({"t0": t0, "t1": time.monotonic(), "epoch": n,
                                      "step_ms": step_ms, "out": out, "gemm_ms": gemm_ms})
                          + "\n")
                log.flush()
    result = {"epochs": n, "distinct_outputs": len(outputs), "outputs": outputs}
    if args.profile:
        cuda = torch.autograd.DeviceType.CUDA
        result["profiler_cuda_events"] = sum(1 for e in prof.events() if e.device_type == cuda)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
