"""A small PyTorch training step for the GPU checks: matmul, relu, backward."""
import torch

x = torch.randn(1024, 1024, device="cuda")
w = torch.randn(1024, 1024, device="cuda", requires_grad=True)
for _ in range(3):
    y = (x @ w).relu().sum()
    y.backward()
torch.cuda.synchronize()
print("loss", y.item())
