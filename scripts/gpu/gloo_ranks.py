"""Two ranks under torchrun on one GPU, for scripts/gpu/check-descendants.sh
where only one GPU is lent: each rank trains the same small MLP on cuda:0
from its own data and averages its gradients with the other's through gloo
(CPU tensors: NCCL wants a GPU a rank). torchrun's agent imports torch, so it
maps CUDA libraries and its forks of the ranks are held in their fork, then at
their exec. Deterministic: a rank prints a JSON line a step (rank, step, loss
as float.hex), so a traced run can be compared with one alone bit for bit.

    torchrun --nproc_per_node 2 gloo_ranks.py [--steps 200]
"""

from __future__ import annotations

import argparse
import json
import os

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200)
    a = ap.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(),
                                torch.nn.Linear(256, 1)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    data = torch.Generator().manual_seed(rank)
    for step in range(a.steps):
        x = torch.randn(64, 64, generator=data).cuda()
        loss = ((model(x) - x.sum(dim=1, keepdim=True)) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        for p in model.parameters():
            grad = p.grad.cpu()
            dist.all_reduce(grad)
            p.grad.copy_(grad / 2)
        opt.step()
        print(json.dumps({"rank": rank, "step": step, "loss": loss.item().hex()}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
