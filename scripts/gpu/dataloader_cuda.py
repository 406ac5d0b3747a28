"""A PyTorch DataLoader whose workers use CUDA, for scripts/gpu/check-descendants.sh.

Workers are spawned (multiprocessing's "spawn": a fork and an exec of Python;
CUDA cannot be used in a forked child once the parent has initialised it).
Each item is made on the GPU in the worker (a tensor filled and reduced, then
brought back to the CPU); the main process trains a small model on the
batches. Prints one JSON line: items, batches, the loss at the end.

    python dataloader_cuda.py [--items 256] [--workers 2]
"""

from __future__ import annotations

import argparse
import json

import torch
from torch.utils.data import DataLoader, Dataset


class OnTheGpu(Dataset):
    def __init__(self, items: int) -> None:
        self.items = items

    def __len__(self) -> int:
        return self.items

    def __getitem__(self, i: int) -> torch.Tensor:
        x = torch.full((64, 64), float(i), device="cuda")
        return (x @ x).sum(dim=0).cpu() / 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--items", type=int, default=256)
    ap.add_argument("--workers", type=int, default=2)
    a = ap.parse_args()
    loader = DataLoader(OnTheGpu(a.items), batch_size=16, num_workers=a.workers,
                        multiprocessing_context="spawn")
    model = torch.nn.Linear(64, 1).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    batches = 0
    loss = torch.zeros(())
    for batch in loader:
        loss = model(batch.cuda()).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        batches += 1
    torch.cuda.synchronize()
    print(json.dumps({"items": a.items, "batches": batches, "loss": float(loss)}))


if __name__ == "__main__":
    main()
