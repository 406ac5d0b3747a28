"""The CPU machine's stand-in for scripts/gpu/fork_loader.py: a training loop
(CPU PyTorch from .deps/torch) whose DataLoader forks 4 workers an epoch from
a process that maps libcudart, libcuda, libnccl and libcupti and calls
cudaGetDeviceCount each batch; each worker is held in its fork, linked, and
leaves its links to close as it exits. For benchmarks/forkloader_end.sh.
Prints a JSON line an epoch.

    python fork_loader_cpu.py ROOT   (ROOT: the repository, for .deps)
"""

from __future__ import annotations

import ctypes
import json
import sys
import time
import warnings

root = sys.argv[1]
sys.path.insert(0, f"{root}/.deps/torch")
libs = ["/usr/local/cuda/lib64/libcudart.so", open(f"{root}/.deps/libcuda.path").read().strip(),
        f"{root}/.deps/nccl/nvidia/nccl/lib/libnccl.so.2", "/usr/local/cuda/lib64/libcupti.so"]
cudart = [ctypes.CDLL(path) for path in libs][0]
warnings.simplefilter("ignore")
import torch  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

n = ctypes.c_int()
x = torch.randn(4096, 64)
data = TensorDataset(x, x.sum(1, keepdim=True))
model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1))
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
for epoch in range(1_000_000):
    start = time.perf_counter()
    for xb, yb in DataLoader(data, batch_size=64, shuffle=True, num_workers=4):
        cudart.cudaGetDeviceCount(ctypes.byref(n))
        loss = ((model(xb) - yb) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(json.dumps({"epoch": epoch, "seconds": round(time.perf_counter() - start, 3)}),
          flush=True)
