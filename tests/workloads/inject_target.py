"""A Python program to inject the GPU-time library into while it works: a
thread that allocates and frees (bytearrays, dicts), one that loads and
unloads libm with ctypes (dlopen/dlclose), and one that calls libcudart and
libcuda through ctypes (failing fast without a GPU), each checking its own
results. Prints "ready", runs until stdin is closed, then prints what each
thread found, the same whatever the speed.
Usage: python inject_target.py LIBCUDART LIBCUDA"""

import _ctypes
import ctypes
import sys
import threading

stop = threading.Event()
bad = {"alloc": False, "dlopen": False, "cuda": False}
started = threading.Barrier(4)


def allocs():
    started.wait()
    i = 0
    while not stop.is_set():
        b = bytearray([i & 0xFF]) * (16 + i % 4000)
        d = {k: k * 2 for k in range(i % 64)}
        bad["alloc"] |= b[-1] != i & 0xFF or sum(d.values()) != sum(range(i % 64)) * 2
        i += 1


def dlopens():
    started.wait()
    while not stop.is_set():
        lib = ctypes.CDLL("libm.so.6")
        lib.cos.restype, lib.cos.argtypes = ctypes.c_double, [ctypes.c_double]
        bad["dlopen"] |= lib.cos(0.0) != 1.0
        _ctypes.dlclose(lib._handle)


def cuda_calls():
    cudart, cuda = ctypes.CDLL(sys.argv[1]), ctypes.CDLL(sys.argv[2])
    started.wait()
    total = n = 0
    while not stop.is_set():
        count, p = ctypes.c_int(-1), ctypes.c_void_p()
        a = cudart.cudaGetDeviceCount(ctypes.byref(count))
        b = cudart.cudaMalloc(ctypes.byref(p), 4096)
        c = cuda.cuDeviceGetCount(ctypes.byref(count))  # fails at once: no cuInit
        n += 1
        total += n
        bad["cuda"] |= a == 0 or b == 0 or c == 0
    bad["cuda"] |= total != n * (n + 1) // 2


threads = [threading.Thread(target=f) for f in (allocs, dlopens, cuda_calls)]
for t in threads:
    t.start()
started.wait()
print("ready", flush=True)
sys.stdin.read()
stop.set()
for t in threads:
    t.join()
for name, was_bad in bad.items():
    print(name, "BAD" if was_bad else "ok")
