"""PyTorch ops timed with CUDA events, for scripts/gpu/check-gputime.sh: the
independent source that cudaprobe's --gpu-time durations are checked against
(benchmarks/gputime_compare.py).

  eager  matmul (fp32, 2048), softmax, layer norm and GELU of a 16384x4096 tensor
  gemm   cuBLAS GEMMs: fp16, bf16 and fp32 at 4096x4096x4096, 8192x1024x4096

Each op is a region: event.record(), the op REPEAT times (--repeat, 4), event.record()
(the events' own few microseconds between a record and the first kernel are then
spread over four runs of the op, not one); before it the
GPU is given a ~1 ms torch.cuda._sleep, so that the op's kernels are queued
before the first event runs and the region holds the GPU's time only (not
the host's launch, which tracing makes slower). After the iterations and a
synchronize, one {"op": NAME, "ms": elapsed} line per region, in the order the
regions were issued. In the trace the sleep's kernel (spin_kernel) marks
where each region begins (gputime_compare.py regions --markers sleep): the
function PyTorch records events with changes between versions (2.11's is not
cudaEventRecord) and may not be traced at all.

  python gputime_torch.py eager|gemm [--iters N] [--repeat R]
"""

from __future__ import annotations

import argparse
import json

import torch


def eager_ops():
    a = torch.randn(2048, 2048, device="cuda")
    b = torch.randn(2048, 2048, device="cuda")
    x = torch.randn(16384, 4096, device="cuda")
    ln = torch.nn.LayerNorm(4096).cuda()
    return {"matmul": lambda: a @ b, "softmax": lambda: torch.softmax(x, dim=-1),
            "layernorm": lambda: ln(x), "gelu": lambda: torch.nn.functional.gelu(x)}


def gemm_ops():
    ops = {}
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        for m, k, n in ((4096, 4096, 4096), (8192, 1024, 4096)):
            a = torch.randn(m, k, device="cuda", dtype=dtype)
            b = torch.randn(k, n, device="cuda", dtype=dtype)
            ops[f"gemm_{str(dtype)[6:]}_{m}x{k}x{n}"] = (lambda a=a, b=b: a @ b)
    return ops


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("workload", choices=["eager", "gemm"])
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--repeat", type=int, default=4)
    a = p.parse_args()
    ops = eager_ops() if a.workload == "eager" else gemm_ops()
    for op in ops.values():  # warm-up: cuBLAS handles and kernels loaded
        op()
    torch.cuda.synchronize()
    regions = []
    for _ in range(a.iters):
        for name, op in ops.items():
            torch.cuda._sleep(2_000_000)  # ~1 ms at 2 GHz: the GPU behind the host
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(a.repeat):
                op()
            end.record()
            regions.append((name, start, end))
        torch.cuda.synchronize()
    for name, start, end in regions:
        print(json.dumps({"op": name, "ms": round(start.elapsed_time(end), 6)}))


if __name__ == "__main__":
    main()
