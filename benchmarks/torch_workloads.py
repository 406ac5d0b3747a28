"""PyTorch workloads for the GPU checks, at full speed, with a window that an
attached tracer can be lined up with.

  loop     1024x1024 matmul, relu, scale and softmax (the issue's 3-second loop)
  mlp      launch-bound training step: 6 linear+GELU layers of 256, batch 64, Adam
  gemm     cuBLAS GEMMs of several shapes and dtypes (cuLaunchKernelEx)
  compile  a torch.compile'd MLP step (Triton kernels through cuLaunchKernel)
  transformer  a training step of 2 transformer encoder layers (width 256, 4
           heads, 64 tokens, batch 32, Adam): attention, layer norms, GEMMs

Each runs WARMUP iterations first (kernels loaded, handles made: what a tracer
attached later has not seen), then the measured iterations (--iters N or
--seconds S), each synchronized, and prints one JSON line: workload,
iterations, seconds, ms per iteration (median), and the bytes PyTorch's
caching allocator holds from CUDA (torch.cuda.memory_reserved()). Several workloads named run in
one process, one after the other, each with its line (--iters N: the count of
the first; --iters-next M: of the others), so that a cost measurement pays
Python's, CUDA's and the tracer's start-up once for all of them.

With --stop FILE, the measured part ends at the first step's end after FILE
exists (else after --seconds). With --log FILE, each measured step's end
(time.monotonic()) and its seconds go to FILE, a line each, when the run
ends: what a check that turns a tracer on and off beside one long run lines
up with its windows (scripts/gpu/duty_cost.py).

With --oom, one allocation of 1 TiB is asked for after the warm-up and
refused (an out-of-memory error for the fleet checks' error panel and alert).

For `--pid` checks: with --ready FILE --go FILE --done FILE --quit FILE, it
writes READY after the warm-up and waits for GO before the measured part,
writes DONE after it and waits for QUIT before exiting, making no CUDA call
while it waits: a tracer attached between READY and GO and detached between
DONE and QUIT sees exactly the measured part. Under the CUPTI counter
(benchmarks/oracle/cupti_counter.c, CUDA_INJECTION64_PATH), the counts are
snapshotted to $CUPTI_COUNTER_OUT.window as "before" and "after" around it.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import time

import torch


def loop_step():
    a = torch.randn(1024, 1024, device="cuda")
    b = torch.randn(1024, 1024, device="cuda")

    def step():
        c = torch.relu(a @ b) * 0.5
        return torch.softmax(c, dim=-1)
    return step


def mlp_step():
    torch.manual_seed(0)
    blocks = []
    for _ in range(6):
        blocks += [torch.nn.Linear(256, 256), torch.nn.GELU()]
    model = torch.nn.Sequential(*blocks, torch.nn.Linear(256, 10)).cuda()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(64, 256, device="cuda")
    y = torch.randint(0, 10, (64,), device="cuda")

    def step():
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss
    return step


def gemm_step():
    shapes = [(512, 512, 512), (1024, 256, 2048), (4096, 4096, 1024)]
    mats = []
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        for m, k, n in shapes:
            mats.append((torch.randn(m, k, device="cuda", dtype=dtype),
                         torch.randn(k, n, device="cuda", dtype=dtype)))

    def step():
        return [a @ b for a, b in mats]
    return step


def compile_step():
    model = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.GELU(),
                                torch.nn.LayerNorm(512), torch.nn.Linear(512, 512)).cuda()
    fn = torch.compile(model)
    x = torch.randn(128, 512, device="cuda")

    def step():
        return fn(x).sum()
    return step


def transformer_step():
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(256, 4, dim_feedforward=1024, dropout=0.0,
                                             batch_first=True)
    model = torch.nn.Sequential(torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False),
                                torch.nn.Linear(256, 10)).cuda()
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    x = torch.randn(32, 64, 256, device="cuda")
    y = torch.randint(0, 10, (32 * 64,), device="cuda")

    def step():
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x).reshape(-1, 10), y)
        loss.backward()
        opt.step()
        return loss
    return step


WORKLOADS = {"loop": loop_step, "mlp": mlp_step, "gemm": gemm_step, "compile": compile_step,
             "transformer": transformer_step}


def warmed(name: str, steps: int):
    """The workload's step, run `steps` times first and synchronised."""
    step = WORKLOADS[name]()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    return step


def wait_for(path: str) -> None:
    while not os.path.exists(path):
        time.sleep(0.01)


def snapshot(label: str) -> None:
    lib, out = os.environ.get("CUDA_INJECTION64_PATH"), os.environ.get("CUPTI_COUNTER_OUT")
    if lib and out:
        ctypes.CDLL(lib).cupti_counter_dump(f"{out}.window".encode(), label.encode())


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("workload", choices=sorted(WORKLOADS), nargs="+")
    p.add_argument("--iters", type=int, default=0)
    p.add_argument("--iters-next", type=int, default=0,
                   help="iterations of the second and later workloads (default: --iters)")
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--warmup", type=int, default=20)
    for name in ("ready", "go", "done", "quit", "log", "stop"):
        p.add_argument(f"--{name}")
    p.add_argument("--oom", action="store_true",
                   help="after the warm-up, ask once for 1 TiB of device memory (refused)")
    a = p.parse_args()
    steps = [WORKLOADS[w]() for w in a.workload]
    for step in steps:
        for _ in range(a.warmup):
            step()
    torch.cuda.synchronize()
    if a.oom:
        try:
            torch.empty(1 << 40, dtype=torch.uint8, device="cuda")
        except torch.OutOfMemoryError:
            print(json.dumps({"oom": "refused"}), flush=True)
    if a.ready:
        open(a.ready, "w").close()
        wait_for(a.go)
    snapshot("before")
    for i, (name, step) in enumerate(zip(a.workload, steps)):
        iters = a.iters_next if i and a.iters_next else a.iters
        times, ends = [], []
        start = time.monotonic()
        while ((len(times) < iters) if iters else (time.monotonic() - start < a.seconds)) \
                and not (a.stop and os.path.exists(a.stop)):
            t = time.perf_counter()
            step()
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t)
            ends.append(time.monotonic())
        seconds = time.monotonic() - start
        if a.log:
            with open(a.log, "a") as log:
                log.writelines(f"{e:.6f} {t:.9f}\n" for e, t in zip(ends, times))
        print(json.dumps({"workload": name, "iterations": len(times),
                          "seconds": round(seconds, 3),
                          "ms_per_iter": round(statistics.median(times) * 1e3, 4),
                          "ms_min": round(min(times) * 1e3, 4),
                          "reserved_bytes": torch.cuda.memory_reserved()}), flush=True)
    snapshot("after")
    if a.done:
        open(a.done, "w").close()
        wait_for(a.quit)


if __name__ == "__main__":
    main()
