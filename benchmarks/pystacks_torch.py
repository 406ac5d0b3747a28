"""PyTorch training loop whose CUDA calls come from known lines, for the
--py-stacks GPU check (scripts/gpu/check-pystacks.sh): an MLP of explicit
matmuls, cross-entropy, backward, AdamW and a `.item()` each step. Each
line the check looks for ends with a `# LINE:name` marker; the check reads
their numbers from this file.

Prints "step N" every 50 steps, then one JSON object: ms/step (median of the
steps after --warmup, each ended by the .item() sync).

Usage: python pystacks_torch.py [--steps 300] [--warmup 30]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch


class MLP(torch.nn.Module):
    def __init__(self, width: int, layers: int) -> None:
        super().__init__()
        self.ws = torch.nn.ParameterList(
            torch.nn.Parameter(torch.randn(width, width) / width ** 0.5) for _ in range(layers))
        self.head = torch.nn.Parameter(torch.randn(width, 10) / width ** 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for w in self.ws:
            x = torch.relu(x @ w)  # LINE:matmul
        return x @ self.head  # LINE:head


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--width", type=int, default=512)
    ap.add_argument("--layers", type=int, default=8)
    args = ap.parse_args()
    torch.manual_seed(0)
    model = MLP(args.width, args.layers).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)
    x = torch.randn(256, args.width, device="cuda")
    y = torch.randint(0, 10, (256,), device="cuda")
    times = []
    for i in range(args.steps):
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)  # LINE:loss
        loss.backward()  # LINE:backward
        opt.step()  # LINE:optimizer
        value = loss.item()  # LINE:item
        times.append(time.perf_counter() - start)
        if i % 50 == 0:
            print(f"step {i} loss {value:.4f}", flush=True)
    timed = times[args.warmup:]
    print(json.dumps({"ms_per_step": round(statistics.median(timed) * 1e3, 4),
                      "min_ms": round(min(timed) * 1e3, 4), "steps": len(timed)}), flush=True)


if __name__ == "__main__":
    main()
