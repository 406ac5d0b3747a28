"""A Python program for serve --gpu-time --py-stacks --pid where there is no
GPU: it calls cudaLaunchKernel of the stand-in runtime (gputime_fake_cudart.c,
through ctypes) from two lines of its own, over and over, a millisecond
apart: `heavy()` asks for a kernel of 10,000 + i % 100 ns, `light()` for one
of 3,000 ns (the `shared` argument, which the stand-in libcupti makes the
kernel's GPU time once the GPU-time library has put CUPTI in). Prints
"ready" first; at a line on its standard input stops launching and prints
"stopped"; then waits for its standard input to close.

Usage: gpulines_attached.py LIBCUDART
"""

import ctypes
import select
import sys
import time


class Dim3(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]


runtime = ctypes.CDLL(sys.argv[1])
runtime.cudaLaunchKernel.argtypes = [ctypes.c_void_p, Dim3, Dim3, ctypes.c_void_p,
                                     ctypes.c_size_t, ctypes.c_void_p]


def heavy(i):
    runtime.cudaLaunchKernel(None, Dim3(1, 1, 1), Dim3(32, 1, 1), None, 10_000 + i % 100, None)


def light():
    runtime.cudaLaunchKernel(None, Dim3(1, 1, 1), Dim3(32, 1, 1), None, 3_000, None)


print("ready", flush=True)
i = 0
while not select.select([sys.stdin], [], [], 0)[0]:
    heavy(i)
    light()
    i += 1
    time.sleep(0.001)
sys.stdin.readline()
print("stopped", flush=True)
sys.stdin.read()
