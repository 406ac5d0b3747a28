"""A PyTorch training loop fed by a DataLoader with forked workers (Linux's
default), for scripts/gpu/check-descendants.sh: every epoch forks its
workers anew from a process that has CUDA initialised (they use no CUDA
themselves, but map it: cudaprobe holds each in its fork until its links
are in). Deterministic (seeded, deterministic algorithms), so the losses of
a traced run can be compared with an untraced one bit for bit. Prints a JSON
line an epoch: its number, its summed loss (float.hex), its seconds.

    python fork_loader.py [--epochs 12] [--workers 4]
"""

from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import torch  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=12)
    ap.add_argument("--workers", type=int, default=4)
    a = ap.parse_args()
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(0)
    x_all = torch.randn(4096, 64)
    y_all = x_all.sum(dim=1, keepdim=True)
    data = TensorDataset(x_all, y_all)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(),
                                torch.nn.Linear(256, 1)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    for epoch in range(a.epochs):
        order = torch.Generator()
        order.manual_seed(epoch)
        loader = DataLoader(data, batch_size=64, shuffle=True, generator=order,
                            num_workers=a.workers)
        start, total = time.perf_counter(), 0.0
        for x, y in loader:
            x, y = x.cuda(), y.cuda()
            loss = ((model(x) - y) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item()
        print(json.dumps({"epoch": epoch, "loss": total.hex(),
                          "seconds": round(time.perf_counter() - start, 4)}), flush=True)


if __name__ == "__main__":
    main()
