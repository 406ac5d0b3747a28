"""A Python program that --pid --gpu-time attaches to, and that starts a
child calling CUDA after the attach. A thread calls libcudart and libcuda
through ctypes all along (failing fast without a GPU: the injection's safe
points); prints "ready"; at each line "child" on stdin it runs a child Python
that calls cudaGetDeviceCount once, then prints "child done"; it exits at
the end of stdin.
Usage: python gputime_parent.py LIBCUDART LIBCUDA"""

import ctypes
import subprocess
import sys
import threading

stop = threading.Event()
CHILD = ("import ctypes, sys; n = ctypes.c_int(); "
         "ctypes.CDLL(sys.argv[1]).cudaGetDeviceCount(ctypes.byref(n))")


def cuda_calls():
    cudart, cuda = ctypes.CDLL(sys.argv[1]), ctypes.CDLL(sys.argv[2])
    count = ctypes.c_int(-1)
    while not stop.is_set():
        cudart.cudaGetDeviceCount(ctypes.byref(count))
        cuda.cuDeviceGetCount(ctypes.byref(count))
        stop.wait(0.001)


thread = threading.Thread(target=cuda_calls)
thread.start()
print("ready", flush=True)
for line in sys.stdin:
    if line.strip() == "child":
        subprocess.run([sys.executable, "-c", CHILD, sys.argv[1]], check=True)
        print("child done", flush=True)
stop.set()
thread.join()
