"""Calls libcudart through ctypes from known places, and prints, for each call,
the Python stack it was made from as the interpreter itself sees it: one
JSON line {"tid", "event", "stack": [[file, line, function], ...]} innermost
first. Runs on CPython 3.9 and later (no GPU needed: the calls are ones
that answer without a device).

    python pystack_workload.py LIBCUDART [--wait FIFO]

--wait: read one line from FIFO before the first call (the test writes it
once cudaprobe is attached to this process), after printing "ready".
"""

import asyncio
import ctypes
import json
import sys
import threading

lib = ctypes.CDLL(sys.argv[1])
out = []


def function_name(code):
    return getattr(code, "co_qualname", code.co_name)  # 3.11+: the qualified name


def cuda(fn, *args):
    """Make the call fn(*args), and note the stack it is made from."""
    frames = [[__file__, sys._getframe().f_lineno + 5, function_name(sys._getframe().f_code)]]
    f = sys._getframe(1)
    while f is not None:
        frames.append([f.f_code.co_filename, f.f_lineno, function_name(f.f_code)])
        f = f.f_back
    result = fn(*args)  # the line of the call: f_lineno above + 5
    out.append({"tid": threading.get_native_id(), "event": fn.__name__, "stack": frames})
    return result


version = ctypes.c_int()


def runtime_version():
    return cuda(lib.cudaRuntimeGetVersion, ctypes.byref(version))


def nested(depth):
    if depth == 0:
        return runtime_version()
    return nested(depth - 1)


def generator():
    for _ in range(2):
        yield cuda(lib.cudaDriverGetVersion, ctypes.byref(version))


async def coroutine():
    await asyncio.sleep(0)
    return cuda(lib.cudaRuntimeGetVersion, ctypes.byref(version))


def in_thread():
    nested(2)


def deep(n):
    if n == 0:
        return cuda(lib.cudaRuntimeGetVersion, ctypes.byref(version))
    return deep(n - 1)


def main():
    if len(sys.argv) > 3 and sys.argv[2] == "--wait":
        print("ready", flush=True)
        with open(sys.argv[3]) as fifo:
            fifo.readline()
    runtime_version()
    nested(3)
    list(generator())
    asyncio.run(coroutine())
    t = threading.Thread(target=in_thread, name="worker")
    t.start()
    t.join()
    (lambda: cuda(lib.cudaDriverGetVersion, ctypes.byref(version)))()
    [cuda(lib.cudaRuntimeGetVersion, ctypes.byref(version)) for _ in range(1)]
    deep(40)  # past the probe's 32 frames: cut
    for record in out:  # a line a write (print writes its end apart where stdout is
        # unbuffered, PYTHONUNBUFFERED): two such processes may share one pipe
        sys.stdout.write(json.dumps(record) + "\n")
        sys.stdout.flush()


main()
