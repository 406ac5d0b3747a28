"""PyTorch's backward pass with CUDA calls in it, on the CPU: a custom
autograd Function whose backward makes one cudaMalloc (of a size that names
the call), made at several forward lines.

    python autograd_workload.py LIBCUDART STEPS [GO]

With GO (a path), it prints {"ready": pid} once PyTorch is loaded, and waits
for that file to exist before its first step.

Prints one JSON line per backward call, from PyTorch itself: {"size": the
cudaMalloc's size, "node": the node's sequence number (ctx._sequence_nr()),
"forward": [file, line, function] of the line whose forward op made the node,
"tid": the thread that ran the backward}. Then a backward that raises, caught
here, and {"done": the calls, "caught": its message}.
"""

import ctypes
import json
import os
import sys
import threading
import time

import torch

cudart = ctypes.CDLL(sys.argv[1])
STEPS = int(sys.argv[2])
calls = 0


def here():
    """The caller's line: where it makes a node."""
    f = sys._getframe(1)
    return [f.f_code.co_filename, f.f_lineno, f.f_code.co_name]


class Double(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, made_at, boom=False):
        ctx.made_at = made_at
        ctx.boom = boom
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        global calls
        calls += 1
        size = 4096 + calls
        print(json.dumps({"size": size, "node": ctx._sequence_nr(), "forward": ctx.made_at,
                          "tid": threading.get_native_id()}), flush=True)
        cudart.cudaMalloc(ctypes.byref(ctypes.c_void_p()), ctypes.c_size_t(size))
        if ctx.boom:
            raise RuntimeError("a backward that raises")
        return grad * 2, None, None


def layer(x):
    h = Double.apply(x, here())
    return Double.apply(h, here()) + 1


def step(x):
    y = layer(x)
    z = Double.apply(y, here())
    z.sum().backward()


def main():
    if len(sys.argv) > 3:
        print(json.dumps({"ready": os.getpid()}), flush=True)
        while not os.path.exists(sys.argv[3]):
            time.sleep(0.01)
    x = torch.ones(8, requires_grad=True)
    for _ in range(STEPS):
        step(x)
    caught = None
    try:  # through the engine's C++ frames to here, as without cudaprobe
        Double.apply(x, here(), True).sum().backward()
    except RuntimeError as e:
        caught = str(e)
    print(json.dumps({"done": calls, "caught": caught}), flush=True)


main()
